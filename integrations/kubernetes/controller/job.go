package controller

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow"
)

// Pod labels the Kubeflow operators put on replica pods (see
// integrations/kubeflow, which maps them to ranks).
const (
	LabelJobName      = kubeflow.LabelJobName
	LabelReplicaType  = kubeflow.LabelReplicaType // training-operator
	LabelJobRole      = kubeflow.LabelJobRole     // mpi-operator: launcher | worker
	LabelReplicaIndex = kubeflow.LabelReplicaIdx
)

// job is the controller's view of one Kubeflow job: integrations/kubeflow's
// adapter (ranks, replica counts, suspend switch).
type job = kubeflow.Job

// jobRef names the Kubeflow job a pod belongs to.
type jobRef struct {
	kind, name string
	uid        types.UID
}

// ownerJob finds the Kubeflow job controlling pod directly (its controller
// owner reference). ok is false for any other pod, including the launcher
// of an MPIJob, which a batch Job owns (see c.jobOf).
func ownerJob(pod *corev1.Pod) (jobRef, bool) { return kubeflowController(pod.OwnerReferences) }

// kubeflowController finds the Kubeflow job among controller owner
// references.
func kubeflowController(refs []metav1.OwnerReference) (jobRef, bool) {
	for _, ref := range refs {
		if ref.Controller == nil || !*ref.Controller {
			continue
		}
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			continue
		}
		if k, known := kubeflow.ByName(ref.Kind); known && k.GVK().Group == gv.Group {
			return jobRef{kind: ref.Kind, name: ref.Name, uid: ref.UID}, true
		}
	}
	return jobRef{}, false
}

// jobOf finds the job of pod: its controller owner, or, for a pod that
// a batch Job controls (an MPIJob launcher that runs as a worker, every
// pod of a JobSet), the job that controls that batch Job, and, when that
// job's kind may be controlled by another (a JobSet made by a TrainJob),
// the one that stands for it (read from the API server: the controller
// caches no batch Jobs). ok is false when pod is no supported job's pod.
func (c *Controller) jobOf(ctx context.Context, pod *corev1.Pod) (jobRef, bool, error) {
	if r, ok := ownerJob(pod); ok {
		return r, true, nil
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "Job" || ref.APIVersion != batchv1.SchemeGroupVersion.String() || pod.Labels[LabelJobName] == "" {
		return jobRef{}, false, nil
	}
	if r, ok, known := c.batchOwners.get(ref.UID); known {
		return r, ok, nil
	}
	bj := &batchv1.Job{}
	if err := c.api.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}, bj); err != nil {
		if client.IgnoreNotFound(err) == nil {
			c.batchOwners.put(ref.UID, jobRef{}, false) // a UID never comes back
			return jobRef{}, false, nil
		}
		return jobRef{}, false, fmt.Errorf("reading Job %s/%s, owner of pod %s: %w", pod.Namespace, ref.Name, pod.Name, err)
	}
	if bj.UID != ref.UID {
		c.batchOwners.put(ref.UID, jobRef{}, false)
		return jobRef{}, false, nil
	}
	r, ok := kubeflowController(bj.OwnerReferences)
	k, known := kubeflow.ByName(r.kind)
	if !ok || !known || !k.OwnsThroughBatchJob() {
		c.batchOwners.put(ref.UID, jobRef{}, false)
		return jobRef{}, false, nil
	}
	if len(k.ControlledBy()) > 0 {
		var err error
		if r, err = c.standIn(ctx, k, pod.Namespace, r); err != nil {
			return jobRef{}, false, err
		}
	}
	c.batchOwners.put(ref.UID, r, true)
	return r, true, nil
}

// standIn is the job that stands for r, a job of kind k: the job of one
// of k.ControlledBy() that controls it, else r itself.
func (c *Controller) standIn(ctx context.Context, k kubeflow.Kind, ns string, r jobRef) (jobRef, error) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(k.GVK())
	if err := c.api.Get(ctx, types.NamespacedName{Namespace: ns, Name: r.name}, m); err != nil {
		return jobRef{}, fmt.Errorf("reading %s %s/%s: %w", r.kind, ns, r.name, err)
	}
	if m.UID != r.uid {
		return r, nil // replaced since: the pod's gang is gone with the old one
	}
	ctl := metav1.GetControllerOf(m)
	if ctl == nil {
		return r, nil
	}
	gv, err := schema.ParseGroupVersion(ctl.APIVersion)
	if err != nil {
		return r, nil
	}
	if c.standsIn(k, gv.Group, ctl.Kind) {
		return jobRef{kind: ctl.Kind, name: ctl.Name, uid: ctl.UID}, nil
	}
	return r, nil
}

// standsIn: a job of group/kind, when it controls a job of kind k, stands
// for it (one of k.ControlledBy(), and watched).
func (c *Controller) standsIn(k kubeflow.Kind, group, kind string) bool {
	for _, gk := range k.ControlledBy() {
		if gk == (schema.GroupKind{Group: group, Kind: kind}) {
			if sk, known := kubeflow.ByName(kind); known && c.watches(sk) {
				return true
			}
		}
	}
	return false
}

// representedBy names the kind of the job that stands for o ("" when o
// stands for itself).
func (c *Controller) representedBy(o client.Object) string {
	ctl := metav1.GetControllerOf(o)
	if ctl == nil {
		return ""
	}
	j, err := kubeflow.FromObject(o)
	if err != nil {
		return ""
	}
	k, _ := kubeflow.ByGVK(j.GVK())
	gv, err := schema.ParseGroupVersion(ctl.APIVersion)
	if err != nil || !c.standsIn(k, gv.Group, ctl.Kind) {
		return ""
	}
	return ctl.Kind
}
