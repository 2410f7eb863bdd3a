// Package jobkind is the interface every supported job kind implements,
// the way Kueue's job framework puts each kind behind one adapter: a Kind
// says its GroupVersionKind, makes and wraps its objects, names where its
// replica templates are, and how its operator owns and labels the pods;
// a Job (one wrapped object) says its replicas, how its pods map to ranks,
// and reads and sets its suspend switch.
//
// Each kind lives in its own package (integrations/kubeflow/pytorchjob,
// integrations/kubeflow/mpijob, integrations/kubeflow/trainjob,
// integrations/kubeflow/jobset); integrations/kubeflow lists them in its
// registry. Nothing outside those packages names a kind.
package jobkind

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

// MaxReplicas bounds a replica count read from outside input: beyond it a
// value is taken for a typo, not a job.
const MaxReplicas = 100000

// ErrNoRank is wrapped by the error a rank lookup returns for a pod that
// exists by design but runs no rank: the launcher of an MPIJob without
// runLauncherAsWorker.
var ErrNoRank = errors.New("not a rank")

// ErrNoIndex is wrapped by ReplicaIndex's error for a pod that lacks the
// label its index is read from; the message begins with "has no".
var ErrNoIndex = errors.New("no index label")

// Object is a Kubernetes object with metadata (the same method set as
// controller-runtime's client.Object).
type Object interface {
	metav1.Object
	runtime.Object
}

// ObjectList is a list of objects (the same method set as
// controller-runtime's client.ObjectList).
type ObjectList interface {
	metav1.ListInterface
	runtime.Object
}

// Kind is one supported job kind.
type Kind interface {
	// GVK is the kind's GroupVersionKind, e.g. kubeflow.org/v1 PyTorchJob.
	GVK() schema.GroupVersionKind
	// GVR is its resource, e.g. kubeflow.org/v1 pytorchjobs.
	GVR() schema.GroupVersionResource
	// AddToScheme registers the kind's API group version.
	AddToScheme(*runtime.Scheme) error
	// New returns an empty typed object; NewList an empty typed list.
	New() Object
	NewList() ObjectList
	// Wrap adapts a typed object of this kind (as New returns it).
	Wrap(Object) (Job, error)
	// Strip removes what a controller never reads from a cached object
	// (the pod templates) and shares the replica specs left between equal
	// ones: cached objects are read-only.
	Strip(Object)
	// PodLabels are the pod labels the kind's operators set and its jobs
	// read a pod's job, replica type and index from (a cached pod keeps
	// them).
	PodLabels() []string
	// PodJobNameLabel is the pod label that names the object whose
	// operator created the pod (training.kubeflow.org/job-name).
	PodJobNameLabel() string
	// ControlledBy are the kinds that may control an object of this kind
	// and then stand for it: gate, suspend and Workload are theirs (the
	// TrainJob that created a JobSet). Empty for a kind that is always
	// its own gang.
	ControlledBy() []schema.GroupKind
	// Launcher is the replica type of a launcher that starts the ranks
	// without running one itself (an MPIJob's Launcher), "" when the kind
	// has none: the webhook's launcher gate applies to it.
	Launcher() string
	// OperatorName is the operator-name label value that kind's operator
	// sets on its pods.
	OperatorName() string
	// OwnsThroughBatchJob: some of the kind's pods are controlled by a
	// batch Job that the job controls (mpi-operator's launcher, every
	// pod of a JobSet), not by the job itself.
	OwnsThroughBatchJob() bool
}

// Job is one wrapped object of a Kind.
type Job interface {
	// GVK of the wrapped object, e.g. kubeflow.org/v1 PyTorchJob.
	GVK() schema.GroupVersionKind
	Kind() string
	Namespace() string
	Name() string
	// Object is the wrapped typed object; changes made through
	// SetSuspended are visible there.
	Object() Object
	// ReplicaSpecs in a stable order (Master, Worker / Launcher, Worker),
	// with the operator's defaults for a nil replica count. A replica type
	// the spec leaves out, or sets to null, is left out.
	ReplicaSpecs() []ReplicaSpec
	// Templates is every non-null replica spec's pod template by replica
	// type as the spec spells it, types no operator runs included (the
	// webhook adds the init container to every GPU template it admits).
	// The templates are the wrapped object's own. A kind whose object
	// also holds the templates of pods that are by design no rank (a
	// Trainer JobSet's initializers) leaves those out; a kind whose
	// templates live elsewhere (a TrainJob's, in its runtime) has none.
	Templates() map[string]*corev1.PodTemplateSpec
	// TemplatePath is where the pod template of replica type typ (as in
	// Templates) is in the object: field names from the root, list
	// positions in decimal (spec, pytorchReplicaSpecs, Worker, template).
	TemplatePath(typ string) []string
	// ReplicaTypes are every replica type the kind knows, in that order,
	// whether or not the spec has them.
	ReplicaTypes() []string
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
	// RankSlots is how the pods of each replica type map to ranks, the
	// way the operator numbers them; an error says what in the spec
	// keeps them from being numbered.
	RankSlots() ([]RankSlot, error)
	// ReplicaTypeLabel reads a pod's replica type from the label the
	// operator sets and says which label that was; with no such label,
	// value is "" and missing says why the pod cannot be one the operator
	// created.
	ReplicaTypeLabel(labels map[string]string) (value, key string, missing error)
	// ReplicaIndex reads a pod's index among the pods of its replica type
	// from the labels the operator sets (the replica-index label; for a
	// JobSet, job index x pods per Job + completion index); an error says
	// which label is missing or wrong.
	ReplicaIndex(labels map[string]string) (int, error)
	// PodNameFits says why a pod of replica type typ (as the spec spells
	// it) is not named and controlled the way the operator names and
	// controls that replica's pods; nil when it is.
	PodNameFits(pod *corev1.Pod, typ string) error
	// NprocPerNode is the per-pod process count the spec sets for the
	// training launcher (torchrun), nil when it sets none or the kind has
	// no such field.
	NprocPerNode() *string
}

// Restarter is a Kind whose pods are re-created, all of them, when the
// job restarts, each carrying the restart's number (a JobSet's
// jobset.sigs.k8s.io/restart-attempt): the ranks of a restart are a new
// gang. RestartAttempt reads it from a pod's labels; ok is false when the
// pod carries none (or not a number).
type Restarter interface {
	RestartAttempt(labels map[string]string) (attempt int32, ok bool)
}

// PodInjected is a Kind whose rank pods get the `rankgate init` init
// container from the Pod mutating webhook when they are created: the job
// mutating webhook only labels its rank templates (LabelInject in
// package contract), and leaves the templates' containers as the user or
// the Trainer wrote them (a JobSet: its pod templates are immutable once
// it runs, and the Trainer applies them again at will).
type PodInjected interface {
	InjectsAtPodCreation() bool
}

// LabelPropagator is a Job whose pod templates are held by another
// object that it creates (a TrainJob's JobSet, made from its runtime),
// which carries the labels the Job asks for. PropagateLabels says how to
// ask for them on behalf of manager: append item to the list at path (n
// entries now), or needed is false when manager has asked already.
type LabelPropagator interface {
	PropagateLabels(manager string, labels map[string]string) (path []string, n int, item any, needed bool)
}

// LauncherHolder is a Job whose launcher (a pod that starts the ranks
// without running one) is told by the object, not by its kind alone: a
// JobSet made from a Trainer MPI runtime. The webhook's launcher gate
// applies to it as to Kind.Launcher's.
type LauncherHolder interface {
	// LauncherTemplate is the launcher's replica type and pod template
	// (the object's own), "" and nil when this job has none.
	LauncherTemplate() (typ string, t *corev1.PodTemplateSpec)
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

// RankSlot is how the pods of one replica type map to ranks: the pod
// labelled index First+k (k < Count) is rank Base+k.
type RankSlot struct {
	Type  string // as the spec spells it
	First int
	Count int
	Base  int
	// NoRank set: the pods of this type are no rank, and why (wraps
	// ErrNoRank).
	NoRank error
	// Note is added to the message for an index outside the slot.
	Note string
}
