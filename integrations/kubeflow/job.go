// Package kubeflow puts the Kubeflow training jobs rankgate supports behind
// one small interface, so that diagnose and the controller handle them
// alike:
//
//   - PyTorchJob, kubeflow.org/v1 (github.com/kubeflow/training-operator
//     v1.9.4): replica types Master and Worker.
//   - MPIJob, kubeflow.org/v2beta1 (github.com/kubeflow/mpi-operator
//     v0.8.0): replica types Launcher and Worker; the launcher runs ranks
//     only with runLauncherAsWorker.
//
// Wrap a typed object with FromObject (or an unstructured one with
// FromUnstructured); the adapter reads and writes the object it wraps.
package kubeflow

import (
	"errors"
	"fmt"
	"strings"

	mpiv2 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	kftraining "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kinds, GroupVersionKinds and resources of the supported jobs.
var (
	PyTorchJobGVK = kftraining.GroupVersion.WithKind(kftraining.PyTorchJobKind)
	MPIJobGVK     = mpiv2.SchemeGroupVersionKind
	PyTorchJobGVR = kftraining.GroupVersion.WithResource("pytorchjobs")
	MPIJobGVR     = mpiv2.SchemeGroupVersion.WithResource("mpijobs")
)

// Pod labels the operators put on the pods they create.
const (
	LabelJobName     = "training.kubeflow.org/job-name"
	LabelReplicaType = "training.kubeflow.org/replica-type"
	LabelReplicaIdx  = "training.kubeflow.org/replica-index"
)

// MaxReplicas bounds a replica count read from outside input: beyond it a
// value is taken for a typo, not a job.
const MaxReplicas = 100000

// ErrUnsupported is returned for objects that are not a supported job.
var ErrUnsupported = errors.New("not a supported Kubeflow job (PyTorchJob kubeflow.org/v1, MPIJob kubeflow.org/v2beta1)")

// Object is a Kubernetes object with metadata (the same method set as
// controller-runtime's client.Object).
type Object interface {
	metav1.Object
	runtime.Object
}

// Job is a Kubeflow training job.
type Job interface {
	// GVK of the wrapped object, e.g. kubeflow.org/v1 PyTorchJob.
	GVK() schema.GroupVersionKind
	Kind() string
	Namespace() string
	Name() string
	// Object is the wrapped typed object (*PyTorchJob or *MPIJob); changes
	// made through SetSuspended are visible there.
	Object() Object
	// ReplicaSpecs in a stable order (Master, Worker / Launcher, Worker),
	// with defaults applied: a nil replica count is 1.
	ReplicaSpecs() []ReplicaSpec
	// Suspended reports spec.runPolicy.suspend.
	Suspended() bool
	// SetSuspended sets spec.runPolicy.suspend on the wrapped object.
	SetSuspended(bool)
	// OwnsPod reports whether a pod belongs to this job: controller owner
	// reference, or the operator's job-name label in the same namespace
	// (the MPIJob launcher pod is owned by a batch Job).
	OwnsPod(pod *corev1.Pod) bool
	// Validate checks what rankgate relies on: known replica types,
	// counts within 0..MaxReplicas, a pod template with containers.
	Validate() error
}

// ReplicaSpec is one replica type of a job.
type ReplicaSpec struct {
	// Type as in the job spec: Master, Worker, Launcher.
	Type     string
	Replicas int32
	Template *corev1.PodTemplateSpec
	// RunsRanks: the pods of this replica type run training ranks (and the
	// rankgate init container). False for an MPIJob launcher that does not
	// run as a worker.
	RunsRanks bool
}

// RankPods is the number of pods of a job that run ranks: the count the
// controller waits for.
func RankPods(j Job) int {
	n := 0
	for _, r := range j.ReplicaSpecs() {
		if r.RunsRanks {
			n += int(r.Replicas)
		}
	}
	return n
}

// ReplicaTypeOf returns the pod's replica type as the job spells it
// (labels carry it in lower case), or "" if the job has no such type.
func ReplicaTypeOf(j Job, pod *corev1.Pod) string {
	v := pod.Labels[LabelReplicaType]
	for _, r := range j.ReplicaSpecs() {
		if strings.EqualFold(r.Type, v) {
			return r.Type
		}
	}
	return ""
}

// FromObject wraps a *PyTorchJob or *MPIJob.
func FromObject(obj runtime.Object) (Job, error) {
	switch o := obj.(type) {
	case *kftraining.PyTorchJob:
		return &pytorchJob{o}, nil
	case *mpiv2.MPIJob:
		return &mpiJob{o}, nil
	}
	return nil, fmt.Errorf("%T: %w", obj, ErrUnsupported)
}

// FromUnstructured converts an unstructured PyTorchJob or MPIJob (as a
// dynamic client returns it) and wraps it.
func FromUnstructured(u *unstructured.Unstructured) (Job, error) {
	var obj runtime.Object
	switch u.GroupVersionKind() {
	case PyTorchJobGVK:
		obj = &kftraining.PyTorchJob{}
	case MPIJobGVK:
		obj = &mpiv2.MPIJob{}
	default:
		return nil, fmt.Errorf("%s %s/%s: %w", u.GroupVersionKind(), u.GetNamespace(), u.GetName(), ErrUnsupported)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return FromObject(obj)
}

// Supported reports whether a GroupVersionKind is a supported job kind.
func Supported(gvk schema.GroupVersionKind) bool {
	return gvk == PyTorchJobGVK || gvk == MPIJobGVK
}

type pytorchJob struct{ o *kftraining.PyTorchJob }

var _ Job = (*pytorchJob)(nil)

func (j *pytorchJob) GVK() schema.GroupVersionKind { return PyTorchJobGVK }
func (j *pytorchJob) Kind() string                 { return PyTorchJobGVK.Kind }
func (j *pytorchJob) Namespace() string            { return j.o.Namespace }
func (j *pytorchJob) Name() string                 { return j.o.Name }
func (j *pytorchJob) Object() Object               { return j.o }
func (j *pytorchJob) Suspended() bool {
	return j.o.Spec.RunPolicy.Suspend != nil && *j.o.Spec.RunPolicy.Suspend
}
func (j *pytorchJob) SetSuspended(v bool) { j.o.Spec.RunPolicy.Suspend = &v }
func (j *pytorchJob) OwnsPod(p *corev1.Pod) bool {
	return ownsPod(j.o, PyTorchJobGVK.Kind, p)
}

func (j *pytorchJob) ReplicaSpecs() []ReplicaSpec {
	var out []ReplicaSpec
	for _, t := range []kftraining.ReplicaType{kftraining.PyTorchJobReplicaTypeMaster, kftraining.PyTorchJobReplicaTypeWorker} {
		if r := j.o.Spec.PyTorchReplicaSpecs[t]; r != nil {
			out = append(out, ReplicaSpec{Type: string(t), Replicas: replicas(r.Replicas), Template: &r.Template, RunsRanks: true})
		}
	}
	return out
}

func (j *pytorchJob) Validate() error {
	specs := j.o.Spec.PyTorchReplicaSpecs
	if len(specs) == 0 {
		return errors.New("spec.pytorchReplicaSpecs is empty: want Master and/or Worker")
	}
	for t, r := range specs {
		if t != kftraining.PyTorchJobReplicaTypeMaster && t != kftraining.PyTorchJobReplicaTypeWorker {
			return fmt.Errorf("spec.pytorchReplicaSpecs: unknown replica type %q (want Master or Worker)", t)
		}
		if err := checkReplica("spec.pytorchReplicaSpecs."+string(t), r); err != nil {
			return err
		}
	}
	if m := specs[kftraining.PyTorchJobReplicaTypeMaster]; m != nil && replicas(m.Replicas) > 1 {
		return fmt.Errorf("spec.pytorchReplicaSpecs.Master.replicas is %d: a PyTorchJob has at most one Master", replicas(m.Replicas))
	}
	return nil
}

type mpiJob struct{ o *mpiv2.MPIJob }

var _ Job = (*mpiJob)(nil)

func (j *mpiJob) GVK() schema.GroupVersionKind { return MPIJobGVK }
func (j *mpiJob) Kind() string                 { return MPIJobGVK.Kind }
func (j *mpiJob) Namespace() string            { return j.o.Namespace }
func (j *mpiJob) Name() string                 { return j.o.Name }
func (j *mpiJob) Object() Object               { return j.o }
func (j *mpiJob) Suspended() bool {
	return j.o.Spec.RunPolicy.Suspend != nil && *j.o.Spec.RunPolicy.Suspend
}
func (j *mpiJob) SetSuspended(v bool) { j.o.Spec.RunPolicy.Suspend = &v }
func (j *mpiJob) OwnsPod(p *corev1.Pod) bool {
	return ownsPod(j.o, MPIJobGVK.Kind, p)
}

func (j *mpiJob) ReplicaSpecs() []ReplicaSpec {
	var out []ReplicaSpec
	asWorker := j.o.Spec.RunLauncherAsWorker != nil && *j.o.Spec.RunLauncherAsWorker
	for _, t := range []mpiv2.MPIReplicaType{mpiv2.MPIReplicaTypeLauncher, mpiv2.MPIReplicaTypeWorker} {
		if r := j.o.Spec.MPIReplicaSpecs[t]; r != nil {
			out = append(out, ReplicaSpec{
				Type: string(t), Replicas: replicas(r.Replicas), Template: &r.Template,
				RunsRanks: t == mpiv2.MPIReplicaTypeWorker || asWorker,
			})
		}
	}
	return out
}

func (j *mpiJob) Validate() error {
	specs := j.o.Spec.MPIReplicaSpecs
	if len(specs) == 0 {
		return errors.New("spec.mpiReplicaSpecs is empty: want Launcher and Worker")
	}
	for t, r := range specs {
		if t != mpiv2.MPIReplicaTypeLauncher && t != mpiv2.MPIReplicaTypeWorker {
			return fmt.Errorf("spec.mpiReplicaSpecs: unknown replica type %q (want Launcher or Worker)", t)
		}
		path := "spec.mpiReplicaSpecs." + string(t)
		if r == nil {
			return fmt.Errorf("%s is null", path)
		}
		if err := checkTemplate(path, r.Replicas, &r.Template); err != nil {
			return err
		}
	}
	if l := specs[mpiv2.MPIReplicaTypeLauncher]; l == nil || replicas(l.Replicas) != 1 {
		return errors.New("spec.mpiReplicaSpecs.Launcher: an MPIJob needs exactly one launcher")
	}
	if s := j.o.Spec.SlotsPerWorker; s != nil && (*s < 0 || *s > 4096) {
		return fmt.Errorf("spec.slotsPerWorker is %d: want 0..4096", *s)
	}
	return nil
}

func checkReplica(path string, r *kftraining.ReplicaSpec) error {
	if r == nil {
		return fmt.Errorf("%s is null", path)
	}
	return checkTemplate(path, r.Replicas, &r.Template)
}

func checkTemplate(path string, count *int32, t *corev1.PodTemplateSpec) error {
	if count != nil && (*count < 0 || *count > MaxReplicas) {
		return fmt.Errorf("%s.replicas is %d: want 0..%d", path, *count, MaxReplicas)
	}
	if len(t.Spec.Containers) == 0 {
		return fmt.Errorf("%s.template.spec.containers is empty", path)
	}
	return nil
}

func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

func ownsPod(job metav1.Object, kind string, p *corev1.Pod) bool {
	if p.Namespace != job.GetNamespace() {
		return false
	}
	if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == kind && ref.Name == job.GetName() &&
		strings.HasPrefix(ref.APIVersion, "kubeflow.org/") {
		return job.GetUID() == "" || ref.UID == "" || ref.UID == job.GetUID()
	}
	return p.Labels[LabelJobName] == job.GetName()
}
