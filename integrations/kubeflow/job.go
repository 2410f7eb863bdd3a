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
// RankPods counts a job's rank pods and RankOf maps a pod to its rank, the
// way the operators number them.
package kubeflow

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	mpiv2 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	kftraining "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// Kinds, GroupVersionKinds and resources of the supported jobs.
var (
	PyTorchJobGVK = kftraining.GroupVersion.WithKind(kftraining.PyTorchJobKind)
	MPIJobGVK     = mpiv2.SchemeGroupVersionKind
	PyTorchJobGVR = kftraining.GroupVersion.WithResource("pytorchjobs")
	MPIJobGVR     = mpiv2.SchemeGroupVersion.WithResource("mpijobs")
)

// Pod labels the operators put on the pods they create.
//
// The training-operator (v1.9.4, pkg/controller.v1/common/pod.go,
// createNewPod) sets LabelReplicaType to the replica type in lower case
// ("master", "worker") and LabelReplicaIdx to the index. mpi-operator
// v0.8.0 (pkg/controller/mpi_job_controller.go, defaultLabels) sets no
// LabelReplicaType: it sets LabelJobRole to "launcher" or "worker", and
// LabelReplicaIdx on workers, and on the launcher only with
// runLauncherAsWorker.
const (
	LabelJobName     = "training.kubeflow.org/job-name"
	LabelReplicaType = "training.kubeflow.org/replica-type"
	LabelReplicaIdx  = "training.kubeflow.org/replica-index"
	LabelJobRole     = "training.kubeflow.org/job-role"
)

// LabelOperatorName is set by both operators on every pod they create
// (mpi-operator v0.8.0 defaultLabels; training-operator v1.9.4 GenLabels).
const LabelOperatorName = "training.kubeflow.org/operator-name"

// operatorKinds maps the operator-name label values to the job kinds.
var operatorKinds = map[string]string{
	"mpi-operator":          MPIJobGVK.Kind, // kubeflow.OperatorName in mpi-operator v0.8.0
	"pytorchjob-controller": PyTorchJobGVK.Kind,
}

// KindOfOperator names the job kind whose operator sets the operator-name
// label value v ("" for any other operator).
func KindOfOperator(v string) string { return operatorKinds[v] }

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
	// with the operators' defaults for a nil replica count: 1 for a
	// PyTorchJob's Master and Worker (training-operator v1.9.4,
	// SetDefaults_PyTorchJob), 1 for an MPIJob's Launcher and 0 for its
	// Worker (mpi-operator v0.8.0, setDefaultsTypeLauncher and
	// setDefaultsTypeWorker). A replica type the spec leaves out, or sets
	// to null, is left out.
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
// controller waits for. RankOf maps those pods onto 0..RankPods-1, and
// returns an error rather than a rank outside that range.
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
// (labels carry it in lower case), or "" if the job has no such type. It
// reads the label the job's operator sets: LabelReplicaType for a
// PyTorchJob; LabelJobRole for an MPIJob (LabelReplicaType if the pod has
// no LabelJobRole).
func ReplicaTypeOf(j Job, pod *corev1.Pod) string {
	return ReplicaTypeOfLabels(j, pod.Labels)
}

// ReplicaTypeOfLabels is ReplicaTypeOf for a pod's labels alone.
func ReplicaTypeOfLabels(j Job, labels map[string]string) string {
	v, _ := replicaTypeLabel(j, labels)
	if v == "" {
		return ""
	}
	for _, r := range j.ReplicaSpecs() {
		if strings.EqualFold(r.Type, v) {
			return r.Type
		}
	}
	return ""
}

// ErrNoRank is wrapped by the error RankOf and Rank return for a pod that
// exists by design but runs no rank: the launcher of an MPIJob without
// runLauncherAsWorker. Any other error means a pod or a spec that does not
// match what the operator creates.
var ErrNoRank = errors.New("not a rank")

// RankOf returns the rank of one of the job's pods, read from the labels
// its operator put on it (replica type and replica index), or an error
// that says what is wrong with the pod or the spec. A rank is the pod's
// place among the job's rank pods, 0..RankPods(j)-1 (for a PyTorchJob the
// RANK the training-operator gives it; for an MPIJob its line in the
// hostfile, so MPI ranks rank*slotsPerWorker and up). RankOf does not
// check that the pod belongs to j: see OwnsPod.
//
//   - PyTorchJob: Master 0 is rank 0; Worker i is rank i+1 when the spec
//     has a Master, else rank i.
//   - MPIJob: Worker i is rank i. With runLauncherAsWorker the launcher,
//     labelled index 0, is rank 0, and mpi-operator labels Worker i with
//     index i+1, which is its rank. Without it the launcher is no rank:
//     the error wraps ErrNoRank.
func RankOf(j Job, pod *corev1.Pod) (int, error) {
	if pod == nil {
		return 0, fmt.Errorf("%s: no pod", jobRef(j))
	}
	fail := func(format string, args ...any) (int, error) {
		return 0, fmt.Errorf("pod %s/%s of %s: %w", pod.Namespace, pod.Name, jobRef(j), fmt.Errorf(format, args...))
	}
	rt, key := replicaTypeLabel(j, pod.Labels)
	if rt == "" {
		if _, ok := j.(*mpiJob); ok {
			return fail("the pod has neither a %s nor a %s label (mpi-operator labels its pods %s=launcher or worker): not a pod mpi-operator created for this job",
				LabelJobRole, LabelReplicaType, LabelJobRole)
		}
		return fail("the pod has no %s label (the training-operator sets it on every replica pod): not a pod the operator created for this job", LabelReplicaType)
	}
	slot, err := rankSlotOf(j, rt, key)
	if err != nil {
		return fail("%w", err)
	}
	v, ok := pod.Labels[LabelReplicaIdx]
	if !ok {
		return fail("the %s pod has no %s label, which its operator sets on every %s pod", slot.typ, LabelReplicaIdx, slot.typ)
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 {
		return fail("label %s=%q is not a replica index: want an integer 0 or more", LabelReplicaIdx, v)
	}
	r, err := slot.rank(i)
	if err != nil {
		return fail("%w", err)
	}
	return r, nil
}

// Rank returns the rank of the pod of the job with the given replica type
// (any case: pods carry it in lower case) and replica-index label value,
// by the rules of RankOf.
func Rank(j Job, replicaType string, index int) (int, error) {
	slot, err := rankSlotOf(j, replicaType, "")
	if err == nil {
		var r int
		if r, err = slot.rank(index); err == nil {
			return r, nil
		}
	}
	return 0, fmt.Errorf("%s: %w", jobRef(j), err)
}

// rankSlot is how the pods of one replica type map to ranks: the pod
// labelled index first+k (k < count) is rank base+k.
type rankSlot struct {
	typ    string // as the spec spells it
	first  int
	count  int
	base   int
	noRank error // set: the pods of this type are no rank, and why
	note   string
}

func (s rankSlot) rank(i int) (int, error) {
	if i < 0 {
		return 0, fmt.Errorf("%s index %d is negative", s.typ, i)
	}
	if i < s.first || i-s.first >= s.count {
		if s.count == 0 {
			return 0, fmt.Errorf("%s index %d, but the spec has 0 %s replicas", s.typ, i, s.typ)
		}
		return 0, fmt.Errorf("%s index %d is outside the spec's %d %s replica(s), indexes %d..%d%s: a pod left from an earlier, larger spec, or one not created by the operator",
			s.typ, i, s.count, s.typ, s.first, s.first+s.count-1, s.note)
	}
	return s.base + i - s.first, nil
}

// rankSlotOf finds the slot of a replica type (any case) read from the
// pod label key ("" if not from a pod), or says why there is none.
func rankSlotOf(j Job, replicaType, key string) (rankSlot, error) {
	var slots []rankSlot
	var types []string
	var err error
	switch jj := j.(type) {
	case *pytorchJob:
		slots, err = jj.rankSlots()
		types = []string{string(kftraining.PyTorchJobReplicaTypeMaster), string(kftraining.PyTorchJobReplicaTypeWorker)}
	case *mpiJob:
		slots, err = jj.rankSlots()
		types = []string{string(mpiv2.MPIReplicaTypeLauncher), string(mpiv2.MPIReplicaTypeWorker)}
	default:
		return rankSlot{}, fmt.Errorf("%T: %w", j, ErrUnsupported)
	}
	if err != nil {
		return rankSlot{}, err
	}
	for _, s := range slots {
		if strings.EqualFold(s.typ, replicaType) {
			if s.noRank != nil {
				return rankSlot{}, s.noRank
			}
			return s, nil
		}
	}
	what := fmt.Sprintf("replica type %q", replicaType)
	if key != "" {
		what = fmt.Sprintf("label %s=%q", key, replicaType)
	}
	for _, t := range types {
		if strings.EqualFold(t, replicaType) {
			return rankSlot{}, fmt.Errorf("%s, but the spec has no %s replicas", what, t)
		}
	}
	return rankSlot{}, fmt.Errorf("%s is not one of the %s replica types (%s)", what, j.Kind(), strings.Join(types, ", "))
}

// replicaTypeLabel reads the pod's replica type from the label the job's
// operator sets, and says which label that was.
func replicaTypeLabel(j Job, labels map[string]string) (value, key string) {
	if _, ok := j.(*mpiJob); ok {
		// mpi-operator v0.8.0 sets only LabelJobRole (defaultLabels, after
		// copying the template's labels, so it wins over them).
		if v := labels[LabelJobRole]; v != "" {
			return v, LabelJobRole
		}
	}
	// Not LabelJobRole for a PyTorchJob: the training-operator sets
	// job-role=master on Worker 0 of a job without a Master (IsMasterRole).
	return labels[LabelReplicaType], LabelReplicaType
}

func jobRef(j Job) string {
	return j.Kind() + " " + j.Namespace() + "/" + j.Name()
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

// NewScheme returns a scheme with the built-in Kubernetes kinds, the
// training-operator's kubeflow.org/v1 kinds (PyTorchJob) and mpi-operator's
// kubeflow.org/v2beta1 MPIJob: what the controller and the tests' clients
// decode.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(kftraining.AddToScheme(s))
	utilruntime.Must(mpiv2.AddToScheme(s))
	return s
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
			out = append(out, ReplicaSpec{Type: string(t), Replicas: replicas(r.Replicas, 1), Template: &r.Template, RunsRanks: true})
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
	if m := specs[kftraining.PyTorchJobReplicaTypeMaster]; m != nil && replicas(m.Replicas, 1) > 1 {
		return fmt.Errorf("spec.pytorchReplicaSpecs.Master.replicas is %d: a PyTorchJob has at most one Master", replicas(m.Replicas, 1))
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
			def := int32(1) // setDefaultsTypeLauncher
			if t == mpiv2.MPIReplicaTypeWorker {
				def = 0 // setDefaultsTypeWorker
			}
			out = append(out, ReplicaSpec{
				Type: string(t), Replicas: replicas(r.Replicas, def), Template: &r.Template,
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
	if l := specs[mpiv2.MPIReplicaTypeLauncher]; l == nil || replicas(l.Replicas, 1) != 1 {
		return errors.New("spec.mpiReplicaSpecs.Launcher: an MPIJob needs exactly one launcher")
	}
	if s := j.o.Spec.SlotsPerWorker; s != nil && (*s < 0 || *s > 4096) {
		return fmt.Errorf("spec.slotsPerWorker is %d: want 0..4096", *s)
	}
	return nil
}

// rankSlots: Master 0 is rank 0, Worker i is rank i+1 when the spec has a
// Master, else rank i. Verified against training-operator v1.9.4:
// pkg/controller.v1/common/pod.go (ReconcilePods, createNewPod) labels a
// pod with the replica type in lower case and its index;
// pkg/controller.v1/pytorch/envvar.go (setPodEnv) sets RANK to the index,
// plus 1 for a Worker, whenever PyTorchReplicaSpecs[Master] is not nil,
// and WORLD_SIZE to the sum of all replicas. Without a Master it sets no
// RANK (torchrun's rendezvous assigns node ranks); rank i for Worker i
// is then rankgate's own numbering, the one the operator also uses when
// it gives Worker 0 the master role (IsMasterRole).
func (j *pytorchJob) rankSlots() ([]rankSlot, error) {
	specs := j.o.Spec.PyTorchReplicaSpecs
	var out []rankSlot
	base := 0
	if m := specs[kftraining.PyTorchJobReplicaTypeMaster]; m != nil {
		// pkg/webhooks/pytorch/pytorchjob_webhook.go: Master.replicas
		// "must be 1". With any other count the operator's ranks clash or
		// leave a gap (Workers start at RANK 1 either way).
		if n := replicas(m.Replicas, 1); n != 1 {
			return nil, fmt.Errorf("spec.pytorchReplicaSpecs.Master.replicas is %d: want 1 (the training-operator numbers Workers from RANK 1 whenever a Master is present)", n)
		}
		out = append(out, rankSlot{typ: string(kftraining.PyTorchJobReplicaTypeMaster), count: 1})
		base = 1
	}
	if w := specs[kftraining.PyTorchJobReplicaTypeWorker]; w != nil {
		n, err := rankCount("spec.pytorchReplicaSpecs.Worker", replicas(w.Replicas, 1))
		if err != nil {
			return nil, err
		}
		out = append(out, rankSlot{typ: string(kftraining.PyTorchJobReplicaTypeWorker), count: n, base: base})
	}
	return out, nil
}

// rankSlots: Worker i is rank i; with runLauncherAsWorker the launcher is
// rank 0 and Worker i rank i+1. Verified against mpi-operator v0.8.0,
// pkg/controller/mpi_job_controller.go: defaultLabels sets job-role
// (launcher, worker), no replica-type; workerReplicaIndexLabel labels
// Worker i (pod <job>-worker-i) with index i, or i+1 with
// runLauncherAsWorker; newLauncherPodTemplate labels the launcher index 0
// only with runLauncherAsWorker, and without it blanks
// NVIDIA_VISIBLE_DEVICES (nvidiaDisableEnvVars); newConfigMap writes the
// hostfile with the launcher first (only with runLauncherAsWorker), then
// Worker 0..n-1, so a pod's line in the hostfile is its index label.
func (j *mpiJob) rankSlots() ([]rankSlot, error) {
	specs := j.o.Spec.MPIReplicaSpecs
	var out []rankSlot
	first := 0
	note := ""
	if j.o.Spec.RunLauncherAsWorker != nil && *j.o.Spec.RunLauncherAsWorker {
		l := specs[mpiv2.MPIReplicaTypeLauncher]
		if l == nil {
			return nil, errors.New("spec.mpiReplicaSpecs.Launcher is missing: with runLauncherAsWorker the launcher is rank 0, and an MPIJob needs exactly one launcher")
		}
		if n := replicas(l.Replicas, 1); n != 1 {
			return nil, fmt.Errorf("spec.mpiReplicaSpecs.Launcher.replicas is %d: want 1 (mpi-operator's validation: \"must be 1\")", n)
		}
		out = append(out, rankSlot{typ: string(mpiv2.MPIReplicaTypeLauncher), count: 1})
		first = 1
		note = " (with runLauncherAsWorker mpi-operator labels Worker i with index i+1)"
	} else {
		out = append(out, rankSlot{typ: string(mpiv2.MPIReplicaTypeLauncher), noRank: fmt.Errorf(
			"the Launcher is %w: without spec.runLauncherAsWorker it only runs mpirun and holds no GPUs (mpi-operator blanks NVIDIA_VISIBLE_DEVICES on it), so it should not get the rankgate init container",
			ErrNoRank)})
	}
	if w := specs[mpiv2.MPIReplicaTypeWorker]; w != nil {
		n, err := rankCount("spec.mpiReplicaSpecs.Worker", replicas(w.Replicas, 0))
		if err != nil {
			return nil, err
		}
		out = append(out, rankSlot{typ: string(mpiv2.MPIReplicaTypeWorker), first: first, count: n, base: first, note: note})
	}
	return out, nil
}

// rankCount checks a replica count that ranks are numbered by.
func rankCount(path string, n int32) (int, error) {
	if n < 0 || n > MaxReplicas {
		return 0, fmt.Errorf("%s.replicas is %d: want 0..%d", path, n, MaxReplicas)
	}
	return int(n), nil
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

// replicas is a replica count with the operator's default def for nil.
func replicas(p *int32, def int32) int32 {
	if p == nil {
		return def
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
