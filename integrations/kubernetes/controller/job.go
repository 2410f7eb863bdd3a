package controller

import (
	"fmt"
	"strconv"
	"strings"

	mpiv2beta1 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Pod labels the Kubeflow operators put on replica pods (identical in
// training-operator v1.9 and mpi-operator v0.8).
const (
	LabelJobName      = "training.kubeflow.org/job-name"
	LabelReplicaType  = "training.kubeflow.org/replica-type"
	LabelReplicaIndex = "training.kubeflow.org/replica-index"
)

// job is the controller's view of one Kubeflow job, whatever its kind: how
// many ranks it has, which pod is which rank, and its suspend switch. (A
// small adapter in the manner of Kueue's; integrations/kubeflow had none
// when this was written.)
type job interface {
	Object() client.Object
	Kind() string
	// ExpectedRanks is the number of rank pods the spec asks for.
	ExpectedRanks() int
	// Rank maps a replica pod to its rank, or says why it is not a rank.
	Rank(replicaType string, index int) (int, error)
	Suspended() bool
	SetSuspend(bool)
}

// jobKind describes one supported kind.
type jobKind struct {
	GVK  schema.GroupVersionKind
	New  func() client.Object
	Wrap func(client.Object) job
	// Strip removes what the controller never reads (pod templates) before
	// the object enters the informer cache.
	Strip func(client.Object)
}

var (
	pytorchGVK = kubeflowv1.SchemeGroupVersion.WithKind(kubeflowv1.PyTorchJobKind)
	mpiGVK     = mpiv2beta1.SchemeGroupVersion.WithKind("MPIJob")
)

var jobKinds = []jobKind{
	{
		GVK:  pytorchGVK,
		New:  func() client.Object { return &kubeflowv1.PyTorchJob{} },
		Wrap: func(o client.Object) job { return pytorchJob{o.(*kubeflowv1.PyTorchJob)} },
		Strip: func(o client.Object) {
			for _, s := range o.(*kubeflowv1.PyTorchJob).Spec.PyTorchReplicaSpecs {
				if s != nil {
					s.Template = corev1.PodTemplateSpec{}
				}
			}
		},
	},
	{
		GVK:  mpiGVK,
		New:  func() client.Object { return &mpiv2beta1.MPIJob{} },
		Wrap: func(o client.Object) job { return mpiJob{o.(*mpiv2beta1.MPIJob)} },
		Strip: func(o client.Object) {
			for _, s := range o.(*mpiv2beta1.MPIJob).Spec.MPIReplicaSpecs {
				if s != nil {
					s.Template = corev1.PodTemplateSpec{}
				}
			}
		},
	},
}

func kindByName(kind string) (jobKind, bool) {
	for _, k := range jobKinds {
		if k.GVK.Kind == kind {
			return k, true
		}
	}
	return jobKind{}, false
}

// ownerJob finds the Kubeflow job controlling pod: its controller owner
// reference, else the job-name label (kind unknown then).
func ownerJob(pod *corev1.Pod) (kind, name string, uid string, ok bool) {
	for _, ref := range pod.OwnerReferences {
		if ref.Controller == nil || !*ref.Controller {
			continue
		}
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil || gv.Group != kubeflowv1.GroupVersion.Group {
			continue
		}
		if _, known := kindByName(ref.Kind); known {
			return ref.Kind, ref.Name, string(ref.UID), true
		}
	}
	return "", "", "", false
}

// podReplica reads the replica type (lower case) and index labels.
func podReplica(pod *corev1.Pod) (string, int, error) {
	rt := strings.ToLower(pod.Labels[LabelReplicaType])
	idx := pod.Labels[LabelReplicaIndex]
	if rt == "" || idx == "" {
		return "", 0, fmt.Errorf("pod %s/%s lacks the %s and %s labels the Kubeflow operators set", pod.Namespace, pod.Name, LabelReplicaType, LabelReplicaIndex)
	}
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 {
		return "", 0, fmt.Errorf("pod %s/%s: label %s=%q is not an index", pod.Namespace, pod.Name, LabelReplicaIndex, idx)
	}
	return rt, i, nil
}

func jobKey(j job) string {
	o := j.Object()
	return o.GetNamespace() + "/" + j.Kind() + "/" + o.GetName()
}

type pytorchJob struct{ *kubeflowv1.PyTorchJob }

func (j pytorchJob) Object() client.Object { return j.PyTorchJob }
func (j pytorchJob) Kind() string          { return pytorchGVK.Kind }

func (j pytorchJob) replicas(t kubeflowv1.ReplicaType) int {
	s := j.Spec.PyTorchReplicaSpecs[t]
	if s == nil {
		return 0
	}
	return int(ptr.Deref(s.Replicas, 1)) // the operator's default
}

// ExpectedRanks: Master (0 or 1) plus Workers. Elastic jobs are gated at
// their spec's Worker count.
func (j pytorchJob) ExpectedRanks() int {
	return j.replicas(kubeflowv1.PyTorchJobReplicaTypeMaster) + j.replicas(kubeflowv1.PyTorchJobReplicaTypeWorker)
}

// Rank: Master 0 is rank 0; Worker i is rank i+1 when there is a Master,
// else rank i (the operator's RANK for the pod).
func (j pytorchJob) Rank(rt string, i int) (int, error) {
	m := j.replicas(kubeflowv1.PyTorchJobReplicaTypeMaster)
	w := j.replicas(kubeflowv1.PyTorchJobReplicaTypeWorker)
	switch rt {
	case "master":
		if i >= m {
			return 0, fmt.Errorf("master index %d, but the spec has %d master(s)", i, m)
		}
		return i, nil
	case "worker":
		if i >= w {
			return 0, fmt.Errorf("worker index %d, but the spec has %d worker(s)", i, w)
		}
		return m + i, nil
	}
	return 0, fmt.Errorf("replica type %q is not a PyTorchJob rank (Master, Worker)", rt)
}

func (j pytorchJob) Suspended() bool   { return ptr.Deref(j.Spec.RunPolicy.Suspend, false) }
func (j pytorchJob) SetSuspend(b bool) { j.Spec.RunPolicy.Suspend = ptr.To(b) }

type mpiJob struct{ *mpiv2beta1.MPIJob }

func (j mpiJob) Object() client.Object { return j.MPIJob }
func (j mpiJob) Kind() string          { return mpiGVK.Kind }

func (j mpiJob) workers() int {
	s := j.Spec.MPIReplicaSpecs[mpiv2beta1.MPIReplicaTypeWorker]
	if s == nil {
		return 0
	}
	return int(ptr.Deref(s.Replicas, 0)) // mpi-operator's default for workers
}

func (j mpiJob) launcherIsWorker() bool { return ptr.Deref(j.Spec.RunLauncherAsWorker, false) }

// ExpectedRanks: the workers, plus the launcher when it runs a worker
// process too (runLauncherAsWorker).
func (j mpiJob) ExpectedRanks() int {
	if j.launcherIsWorker() {
		return j.workers() + 1
	}
	return j.workers()
}

// Rank: Worker i is rank i. With runLauncherAsWorker the operator labels the
// launcher index 0 and Worker i index i+1, which are then the ranks.
func (j mpiJob) Rank(rt string, i int) (int, error) {
	switch rt {
	case "worker":
		lo, hi := 0, j.workers()
		if j.launcherIsWorker() {
			lo, hi = 1, j.workers()+1
		}
		if i < lo || i >= hi {
			return 0, fmt.Errorf("worker index %d outside the spec's %d worker(s)", i, j.workers())
		}
		return i, nil
	case "launcher":
		if j.launcherIsWorker() {
			return 0, nil
		}
		return 0, fmt.Errorf("the launcher of an MPIJob is not a rank (it holds no GPUs unless runLauncherAsWorker); do not give it the rankgate init container")
	}
	return 0, fmt.Errorf("replica type %q is not an MPIJob rank (Worker)", rt)
}

func (j mpiJob) Suspended() bool   { return ptr.Deref(j.Spec.RunPolicy.Suspend, false) }
func (j mpiJob) SetSuspend(b bool) { j.Spec.RunPolicy.Suspend = ptr.To(b) }
