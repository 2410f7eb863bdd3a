package leader

import (
	"context"
	"fmt"
	"strings"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller/metrics"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kueue-managed jobs. Kueue admits a job by clearing runPolicy.suspend, so
// a fail verdict that sets it would fight Kueue (resumed, re-gated,
// suspended again, in a loop). For these jobs a fail with the suspend
// action deactivates the job's Kueue Workload instead (spec.active=false:
// Kueue evicts it, suspends the job itself and frees its quota). The
// Workload is the one in the job's namespace whose controller
// ownerReference is the job. A job without one has not been admitted yet:
// Kueue keeps it suspended, and the verdict is only annotated.

// LabelKueueQueue marks a job as managed by Kueue (its LocalQueue).
const LabelKueueQueue = "kueue.x-k8s.io/queue-name"

// WorkloadGVK is Kueue's Workload as the controller reads and patches it
// (served by Kueue v0.17.0 as v1beta2, its storage version).
var WorkloadGVK = schema.GroupVersionKind{Group: "kueue.x-k8s.io", Version: "v1beta2", Kind: "Workload"}

// kueueWorkloads reads and deactivates the Kueue Workloads of jobs: read
// from the API server (the controller caches none), patched as the
// controller.
type kueueWorkloads struct {
	api    client.Reader
	client client.Client
}

// kueueManaged says whether Kueue manages job (a non-empty queue-name label).
func kueueManaged(job client.Object) bool {
	return job.GetLabels()[LabelKueueQueue] != ""
}

// list lists the Kueue Workloads in job's namespace whose
// controller owner is job. Kueue keeps one (it deletes others that claim
// the job), but anyone allowed to create Workloads can add one for a
// while: every verdict acts on all of them, so that a forged Workload
// never stands in for the real one.
func (k kueueWorkloads) list(ctx context.Context, job client.Object) ([]*unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(WorkloadGVK.GroupVersion().WithKind(WorkloadGVK.Kind + "List"))
	if err := k.api.List(ctx, list, client.InNamespace(job.GetNamespace())); err != nil {
		return nil, fmt.Errorf("listing Kueue Workloads in namespace %s: %w", job.GetNamespace(), err)
	}
	var out []*unstructured.Unstructured
	for i := range list.Items {
		w := &list.Items[i]
		if ref := metav1.GetControllerOfNoCopy(w); ref != nil && ref.UID == job.GetUID() {
			out = append(out, w)
		}
	}
	return out, nil
}

// workloadActive reads a Workload's spec.active (true when unset: Kueue's
// default).
func workloadActive(w *unstructured.Unstructured) bool {
	active, found, err := unstructured.NestedBool(w.Object, "spec", "active")
	return !found || err != nil || active
}

// deactivate stops a Kueue-managed job by deactivating its
// Workloads (every one the job controls: the real one among them). It
// returns the Event's account of what was done.
func (k kueueWorkloads) deactivate(ctx context.Context, job client.Object) (string, error) {
	ws, err := k.list(ctx, job)
	if err != nil {
		return "", err
	}
	if len(ws) == 0 {
		return "job not admitted by Kueue yet (no Workload; Kueue keeps it suspended): verdict annotated only", nil
	}
	var done, gone []string
	for _, w := range ws {
		ok, err := k.deactivateOne(ctx, w)
		if err != nil {
			return "", err
		}
		if ok {
			done = append(done, w.GetName())
		} else {
			gone = append(gone, w.GetName())
		}
	}
	if len(done) == 0 {
		return "job's Kueue Workload " + strings.Join(gone, ", ") + " was gone: verdict annotated only", nil
	}
	return fmt.Sprintf("Kueue Workload %s deactivated (spec.active=false; Kueue suspends the job and frees its quota)", strings.Join(done, ", ")), nil
}

// deactivateOne sets spec.active=false on w; false when w was gone or
// replaced meanwhile.
func (k kueueWorkloads) deactivateOne(ctx context.Context, w *unstructured.Unstructured) (bool, error) {
	if !workloadActive(w) {
		return true, nil
	}
	patch := fmt.Sprintf(`{"metadata":{"uid":%q},"spec":{"active":false}}`, w.GetUID())
	err := k.client.Patch(ctx, w, client.RawPatch(types.MergePatchType, []byte(patch)))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return false, nil
	}
	if err != nil {
		metrics.APIErrors.WithLabelValues("workload").Inc()
		if apierrors.IsForbidden(err) {
			err = fmt.Errorf("%w (the controller needs get, list and patch on workloads.kueue.x-k8s.io: apply configs/deploy/rbac.yaml)", err)
		}
		return false, fmt.Errorf("deactivating Kueue Workload %s/%s: %w", w.GetNamespace(), w.GetName(), err)
	}
	return true, nil
}

// resumed says whether a Kueue-managed job that carries a suspend
// verdict was resumed by a person: every Workload the job controls is
// active again (a forged active one alongside the deactivated real one
// does not count). Without a Workload the job stays as the verdict left
// it.
func (k kueueWorkloads) resumed(ctx context.Context, job client.Object) (bool, error) {
	ws, err := k.list(ctx, job)
	if err != nil || len(ws) == 0 {
		return false, err
	}
	for _, w := range ws {
		if !workloadActive(w) {
			return false, nil
		}
	}
	return true, nil
}
