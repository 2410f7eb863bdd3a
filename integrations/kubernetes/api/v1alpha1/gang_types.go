package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Gang is one gated attempt of a training job: which ranks reported, what
// each found, and the job-wide verdict once it is decided. Its name is
// GangName(kind, job, attempt).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,categories=rankgate
// +kubebuilder:printcolumn:name="Job",type=string,JSONPath=`.spec.job.name`
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.job.kind`,priority=1
// +kubebuilder:printcolumn:name="Attempt",type=integer,JSONPath=`.spec.attempt`,priority=1
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ranks",type=string,JSONPath=`.status.progress`
// +kubebuilder:printcolumn:name="Verdict",type=string,JSONPath=`.status.verdict`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`
// +kubebuilder:printcolumn:name="Deadline",type=date,JSONPath=`.status.deadline`,priority=1
// +kubebuilder:printcolumn:name="Decided-By",type=string,JSONPath=`.status.decidedBy`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Gang struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GangSpec   `json:"spec"`
	Status GangStatus `json:"status,omitempty"`
}

// GangList is a list of Gangs.
//
// +kubebuilder:object:root=true
type GangList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Gang `json:"items"`
}

// GangSpec names the gated job attempt. It is set when the Gang is created
// and never changes.
type GangSpec struct {
	// Job is the gated job, in the Gang's namespace.
	Job JobReference `json:"job"`
	// Attempt counts the job's gated attempts: 1, then one more each time
	// the job is resumed after a fail verdict and gated again.
	// +kubebuilder:validation:Minimum=1
	Attempt int32 `json:"attempt"`
	// ExpectedRanks is how many ranks the job has (its rank pods).
	// +kubebuilder:validation:Minimum=0
	ExpectedRanks int32 `json:"expectedRanks"`
	// Timeout is the gang timeout: how long after the first report the
	// ranks wait for the others.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// JobReference names a Kubeflow job.
type JobReference struct {
	// +kubebuilder:validation:MaxLength=256
	APIVersion string `json:"apiVersion"`
	// Kind is PyTorchJob or MPIJob.
	// +kubebuilder:validation:MaxLength=64
	Kind string `json:"kind"`
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// UID tells this job apart from an earlier one of the same name.
	UID types.UID `json:"uid"`
}

// GangPhase is where a gang stands.
// +kubebuilder:validation:Enum=WaitingForRanks;WaitingForPlacement;Passed;Failed
type GangPhase string

// The phases of a gang.
const (
	// PhaseWaitingForRanks: ranks are reporting; the gang is open.
	PhaseWaitingForRanks GangPhase = "WaitingForRanks"
	// PhaseWaitingForPlacement: the job's pods cannot be placed yet and the
	// Pending watchdog found a cause that may pass (status.waitingFor).
	PhaseWaitingForPlacement GangPhase = "WaitingForPlacement"
	// PhasePassed: the verdict is pass or warn; the ranks start.
	PhasePassed GangPhase = "Passed"
	// PhaseFailed: the verdict is fail; the job's action is in status.action.
	PhaseFailed GangPhase = "Failed"
)

// Limits on what a Gang's status lists, so that the largest gang's object
// stays well under the API server's request size limit.
const (
	MaxRankEntries    = 256
	MaxRankDevices    = 8
	MaxMissingEntries = 20
	MaxReasonLength   = 256
	MaxMessageLength  = 2048
	MaxReportLength   = 256 * 1024
)

// GangStatus is what the controller knows of the gang. The verdict fields
// are written once: the first verdict recorded stands.
type GangStatus struct {
	// Phase: WaitingForRanks, WaitingForPlacement, Passed or Failed.
	// +optional
	Phase GangPhase `json:"phase,omitempty"`
	// Progress is "reported/expected", for the Ranks column.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Progress string `json:"progress,omitempty"`
	// ReportedRanks counts the ranks that reported.
	// +optional
	ReportedRanks int32 `json:"reportedRanks,omitempty"`
	// Ranks lists the reported ranks in rank order, failing ranks first
	// when there are more than fit (then RanksOmitted counts the others).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Ranks []RankStatus `json:"ranks,omitempty"`
	// RanksOmitted counts reported ranks left out of Ranks.
	// +optional
	RanksOmitted int32 `json:"ranksOmitted,omitempty"`
	// MissingRanks lists ranks that have not reported (the first 20), once
	// the gang was decided without them.
	// +optional
	// +kubebuilder:validation:MaxItems=20
	MissingRanks []int32 `json:"missingRanks,omitempty"`
	// MissingCount counts the ranks that had not reported when the gang
	// was decided.
	// +optional
	MissingCount int32 `json:"missingCount,omitempty"`
	// FirstReportAt is the gang's first report: its deadline's start.
	// +optional
	FirstReportAt *metav1.Time `json:"firstReportAt,omitempty"`
	// Deadline: the gang is decided by then, with the ranks that reported.
	// +optional
	Deadline *metav1.Time `json:"deadline,omitempty"`
	// WaitingFor says what a job whose pods cannot be placed waits for.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	WaitingFor string `json:"waitingFor,omitempty"`

	// Verdict is pass, warn or fail, once decided.
	// +optional
	// +kubebuilder:validation:Enum=pass;warn;fail
	Verdict string `json:"verdict,omitempty"`
	// Rules are the rule IDs of the fail and warn findings.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Rules []string `json:"rules,omitempty"`
	// Reason is one line: the first cause and its rule ID, or what the
	// gang waits for.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason,omitempty"`
	// Message is the full reason: every failing finding with its fix.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Message string `json:"message,omitempty"`
	// Report is the gang report, JSON, as the job's rankgate.io/report
	// annotation (trimmed the same way).
	// +optional
	// +kubebuilder:validation:MaxLength=262144
	Report string `json:"report,omitempty"`
	// Action is what a fail verdict does to the job: suspend, delete or
	// annotate.
	// +optional
	Action string `json:"action,omitempty"`
	// DecidedAt is when the verdict was decided.
	// +optional
	DecidedAt *metav1.Time `json:"decidedAt,omitempty"`
	// DecidedBy names the controller replica that decided.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	DecidedBy string `json:"decidedBy,omitempty"`

	// Conditions: Decided (the verdict is recorded here) and Applied (the
	// job carries it).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RankStatus is one rank's report.
type RankStatus struct {
	// +kubebuilder:validation:Minimum=0
	Rank int32 `json:"rank"`
	// Pod is the rank's pod.
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`
	// Node is the node the pod runs on.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node,omitempty"`
	// Devices are the rank's GPUs or MIG devices (UUIDs; the first 8).
	// +optional
	// +kubebuilder:validation:MaxItems=8
	Devices []string `json:"devices,omitempty"`
	// Verdict is the rank's own preflight verdict.
	// +kubebuilder:validation:Enum=pass;warn;fail
	Verdict string `json:"verdict"`
	// Rules are the rule IDs of the rank's fail and warn findings.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Rules []string `json:"rules,omitempty"`
	// Source is where the rank's report comes from: "dra" when it was
	// made from the rank pod's DRA allocation (the devices the scheduler
	// allocated to its ResourceClaims, with the facts their driver
	// publishes), before or without the rank's own report; empty for the
	// rank's own report (NVML on its node).
	// +optional
	// +kubebuilder:validation:Enum=dra
	Source string `json:"source,omitempty"`
	// DRADevices are the rank's devices as their DRA driver publishes
	// them (the first 8), when the report comes from its allocation.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	DRADevices []DRADevice `json:"draDevices,omitempty"`
}

// DRADevice is a device allocated through DRA, as its driver publishes it.
type DRADevice struct {
	// Driver is the DRA driver (gpu.nvidia.com).
	// +kubebuilder:validation:MaxLength=63
	Driver string `json:"driver"`
	// Pool is the driver's pool (NVIDIA's driver: one per node).
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool"`
	// Device is the device's name in the pool's ResourceSlices.
	// +kubebuilder:validation:MaxLength=128
	Device string `json:"device"`
	// UUID is the device's uuid attribute (GPU-... or MIG-...).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	UUID string `json:"uuid,omitempty"`
	// Profile is the MIG profile, or "full" for a whole GPU.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Profile string `json:"profile,omitempty"`
}
