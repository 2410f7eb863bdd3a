// Package contract is rankgate's public vocabulary on Kubernetes objects:
// every label and annotation under the rankgate.io/ prefix, the condition
// types of a Gang, and the reasons of the Events the controller emits.
// Users, scripts and other controllers rely on these names (docs/controller.md
// and docs/status.md document them): changing a value is a breaking change.
//
// The package imports nothing of the project, so that the API types, the
// gate, the webhooks, the CA distribution, the controller and the command
// line can all read the one declaration. rankgate sets no finalizers.
package contract

import (
	"strconv"
	"strings"
)

// Prefix starts every rankgate label and annotation key. The controller
// writes only annotations under it on jobs, and its validating webhook
// lets such writes through.
const Prefix = "rankgate.io/"

// Opt-in keys. A person writes them, as a label or an annotation; the
// controller, the mutating and validating webhooks and the CA distribution
// read them.
const (
	// KeyGate opts a job in: "enabled" (or "true") as a label or annotation
	// on the job, or as a label on its namespace. "disabled" (or "false")
	// on the job opts it out of a namespace that is opted in. The CA
	// distribution writes the gate's CA into namespaces labelled with it.
	KeyGate = "rankgate.io/gate"
	// KeyLauncherGate ("enabled"), as a label or annotation on an MPIJob,
	// asks the mutating webhook to run the launcher behind
	// `rankgate launch --gang`, so that mpirun waits for the gang verdict.
	KeyLauncherGate = "rankgate.io/launcher-gate"
)

// Per-job settings. A person writes them as annotations on the job; the
// controller reads them (the mutating webhook reads AnnotationGangTimeout
// too, to size the init container's wait).
const (
	// AnnotationOnFail overrides the controller's --on-fail for one job:
	// "suspend", "delete" or "annotate".
	AnnotationOnFail = "rankgate.io/on-fail"
	// AnnotationGangTimeout overrides the controller's --gang-timeout for
	// one job ("15m").
	AnnotationGangTimeout = "rankgate.io/gang-timeout"
	// AnnotationMultiNodeNVLink ("enabled"): the job expects its ranks to
	// reach each other over NVLink across nodes (an NVL72-class domain), so
	// ranks in different NVLink domains fail the gang
	// (GANG_NVLINK_DOMAIN_SPLIT) even when their GPUs report no fabric
	// cluster.
	AnnotationMultiNodeNVLink = "rankgate.io/multi-node-nvlink"
	// AnnotationPendingGrace overrides the controller's --pending-grace for
	// one job ("30s", "0s").
	AnnotationPendingGrace = "rankgate.io/pending-grace"
	// AnnotationPendingTimeout overrides the controller's --pending-timeout
	// for one job ("30m").
	AnnotationPendingTimeout = "rankgate.io/pending-timeout"
)

// The recorded verdict. The controller writes these annotations on the
// job (the Gang's status holds the same); people, scripts, `rankgate
// diagnose` and a restarted controller read them. Values a person writes
// here are never read as instructions.
const (
	// AnnotationBypass, on a rank pod, set by an operator to a reason, lets
	// its init container stop waiting for the gate (break-glass while the
	// controller is down); the injected init container reads it from a
	// downward API volume.
	AnnotationBypass = "rankgate.io/bypass"
	// AnnotationVerdict is "pass", "warn" or "fail".
	AnnotationVerdict = "rankgate.io/verdict"
	// AnnotationReason is the failing findings in words, with their rule
	// IDs and fixes (at most 2 KiB); a summary for pass and warn.
	AnnotationReason = "rankgate.io/reason"
	// AnnotationRules is the rule IDs of the fail and warn findings,
	// comma-separated.
	AnnotationRules = "rankgate.io/rules"
	// AnnotationDecidedAt is when the verdict was decided, RFC 3339.
	AnnotationDecidedAt = "rankgate.io/decided-at"
	// AnnotationDecidedBy names the controller replica that decided.
	AnnotationDecidedBy = "rankgate.io/decided-by"
	// AnnotationReport is the gang report, JSON, trimmed to fit the API
	// server's limit on the job's annotations.
	AnnotationReport = "rankgate.io/report"
	// AnnotationAction is what a fail verdict did to the job: "suspend",
	// "delete" or "annotate" (fail only).
	AnnotationAction = "rankgate.io/action"
	// AnnotationFirstReport is read, no longer written: jobs gated by
	// earlier releases carry it as the gang deadline's start (the Gang's
	// status.firstReportAt replaces it).
	AnnotationFirstReport = "rankgate.io/first-report-at"
	// AnnotationAttempt is the job's gated attempt: 1 when absent, one more
	// each time the controller re-gates a resumed job (written in the same
	// patch that clears the verdict).
	AnnotationAttempt = "rankgate.io/attempt"
	// AnnotationPreviousVerdict keeps "<verdict> <decided-at> <rules>" of
	// the attempt before a re-gate; the controller writes it.
	AnnotationPreviousVerdict = "rankgate.io/previous-verdict"
	// AnnotationRestartAttempt is the restart attempt of a JobSet (or a
	// TrainJob's JobSet) whose pods the job's gated attempt judges: its
	// pods' jobset.sigs.k8s.io/restart-attempt (0 when absent). Pods of a
	// later restart open the job's next attempt; pods of an earlier one
	// are refused.
	AnnotationRestartAttempt = "rankgate.io/restart-attempt"
	// AnnotationWaitingFor says what an unschedulable job waits for,
	// "<RULE>: <message>"; the Pending watchdog writes and removes it.
	AnnotationWaitingFor = "rankgate.io/waiting-for"
)

// Attempt is a job's gated attempt, from its annotations
// (rankgate.io/attempt; 1 when absent or not a positive number).
func Attempt(annotations map[string]string) int32 {
	n, err := strconv.ParseInt(annotations[AnnotationAttempt], 10, 32)
	if err != nil || n < 1 {
		return 1
	}
	return int32(n)
}

// Labels every Gang carries, written by the controller, so that a job's
// Gangs can be listed by selector (`rankgate status`, diagnose, people).
const (
	// LabelJobName is the job's name, when it fits a label value.
	LabelJobName = "rankgate.io/job-name"
	// LabelJobKind is the job's kind ("PyTorchJob", "MPIJob").
	LabelJobKind = "rankgate.io/job-kind"
	// LabelJobUID is the job's UID.
	LabelJobUID = "rankgate.io/job-uid"
)

// LabelInject ("rank-init"), on a pod template, asks the Pod mutating
// webhook to add the `rankgate init` init container to each pod made from
// it, when the pod is created. The job mutating webhook writes it on the
// rank templates of an opted-in JobSet (a TrainJob's too), whose pods get
// their init container that way, not from the template; the webhook's
// objectSelector sends only pods that carry it (and a JobSet's labels), so
// that no other pod waits on rankgate. A person may write it on a JobSet's
// rank template by hand, as the webhook would.
const (
	LabelInject      = "rankgate.io/inject"
	ValueInjectRanks = "rank-init"
)

// LabelMPILauncherIsNode ("true"), in the runtime patch the mutating
// webhook adds to an opted-in TrainJob (and so on its JobSet), says that
// the TrainJob's runtime runs its MPI launcher as a node
// (mlPolicy.mpi.runLauncherAsNode, as the Trainer's DeepSpeed and MLX
// runtimes do): its node step runs numNodes-1 pods (at least one), the
// gang's ranks; the launcher starts once they are ready (the runtimes'
// dependsOn), after the verdict, and is no rank. The webhook reads the
// runtime once, when the TrainJob is created.
const LabelMPILauncherIsNode = "rankgate.io/mpi-launcher-is-node"

// RuntimePatchManager is the manager of the runtime patch the mutating
// webhook adds to an opted-in TrainJob (spec.runtimePatches): its
// template labels carry KeyGate to the JobSet the Trainer makes.
const RuntimePatchManager = "rankgate.io/webhook"

// The CA ConfigMaps the controller writes into opted-in namespaces, for
// rank pods to trust the gate.
const (
	// LabelCABundle ("true") marks the CA ConfigMaps the controller writes.
	// It is informational: anyone may set it, so the controller never
	// selects by it alone.
	LabelCABundle = "rankgate.io/ca-bundle"
	// AnnotationCAHash is the fingerprint (SHA-256) of the CA a CA
	// ConfigMap holds, written and read by the controller so that keeping
	// them up to date needs their metadata only.
	AnnotationCAHash = "rankgate.io/ca-sha256"
	// AnnotationCAPublished, on the controller's certificate Secret, is
	// the fingerprint of the CA bundle every CA ConfigMap was confirmed
	// to hold; the next CA signs only once it names the bundle holding it.
	AnnotationCAPublished = "rankgate.io/ca-published-sha256"
)

// LabelMetricsScraper ("true"), on a namespace, lets its pods reach the
// controller's metrics port: a person (or the servicemonitor overlay)
// labels the monitoring namespace; the NetworkPolicy of configs/deploy
// selects by it.
const LabelMetricsScraper = "rankgate.io/metrics-scraper"

// The condition types of a Gang's status.conditions; the controller
// writes them, `rankgate status` and people read them.
const (
	// ConditionDecided is True once the verdict is recorded in the status.
	ConditionDecided = "Decided"
	// ConditionApplied is True once the job carries the verdict (its
	// annotations, and the fail action).
	ConditionApplied = "Applied"
)

// Reasons of the Events the controller emits on a job.
const (
	// ReasonGangPassed (Normal): every rank passed.
	ReasonGangPassed = "GangPassed"
	// ReasonGangPassedWithWarnings (Normal): the gang passed with warn
	// findings.
	ReasonGangPassedWithWarnings = "GangPassedWithWarnings"
	// ReasonGangFailed (Warning): the gang failed; the note names the
	// action and the failing findings.
	ReasonGangFailed = "GangFailed"
	// ReasonPendingFailed (Warning): the Pending watchdog failed a job whose
	// pods can never be placed, or that waited past its pending timeout.
	ReasonPendingFailed = "PendingFailed"
	// ReasonPendingWaiting (Normal): the job's pods wait for something that
	// may come; the note says what, with the fix.
	ReasonPendingWaiting = "PendingWaiting"
	// ReasonRankClaimedTwice (Warning): two pods reported for one rank.
	ReasonRankClaimedTwice = "RankClaimedTwice"
	// ReasonUnexpectedPod (Warning): a pod carries the job's labels and
	// owner reference but is not a pod its operator creates.
	ReasonUnexpectedPod = "UnexpectedPod"
	// ReasonGateConnectionsTooFew (Warning): the job has more rank pods
	// than the gate serves connections at once.
	ReasonGateConnectionsTooFew = "GateConnectionsTooFew"
)

// Names the controller uses in its own memory only, never written to the
// API server. They carry the prefix so that they cannot collide with a
// key someone else puts on a pod.
const (
	// CachedAnnotationPlacement is the fingerprint of an unbound pod's
	// placement rules, on the controller's cached copy of the pod.
	CachedAnnotationPlacement = "rankgate.io/cached-placement"
	// CachedAnnotationUnreadableRequest is why a cached pod's effective
	// request cannot be read.
	CachedAnnotationUnreadableRequest = "rankgate.io/cached-unreadable-request"
	// CachedAnnotationClaimsCut marks a cached pod with more resource
	// claims than the cache keeps: it is not judged from its DRA
	// allocation.
	CachedAnnotationClaimsCut = "rankgate.io/cached-claims-cut"
	// IndexPodsByJob names the controller's cache index of pods by their
	// operator's job-name label.
	IndexPodsByJob = "rankgate.io/job-name"
)

// GateSetting is a job's own KeyGate setting, label first, then
// annotation, trimmed and in lower case ("" when neither is set).
func GateSetting(labels, annotations map[string]string) string {
	for _, m := range []map[string]string{labels, annotations} {
		if v, ok := m[KeyGate]; ok {
			return strings.ToLower(strings.TrimSpace(v))
		}
	}
	return ""
}

// GateEnabled and GateDisabled read a KeyGate value (GateSetting's, or a
// namespace label's in lower case).
func GateEnabled(v string) bool  { return v == "enabled" || v == "true" }
func GateDisabled(v string) bool { return v == "disabled" || v == "false" }
