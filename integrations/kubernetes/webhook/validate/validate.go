// Package validate is the validating admission handler for PyTorchJob
// (kubeflow.org/v1) and MPIJob (kubeflow.org/v2beta1) objects: it refuses,
// or warns about, jobs that can never run as written before a single pod
// exists. Each check is named by the rule ID it reports (verdict/rules.go)
// and has its own policy: deny, warn or off.
//
// Checks:
//   - SHAPE_MISMATCH: a MIG resource that no node offers and no valid MIG
//     layout of any node's GPU could give (the schedule engine of `rankgate
//     diagnose`; a shape a relabel would create, RECONFIGURABLE, passes).
//   - STRATEGY_MISMATCH: the shape is offered only under the other MIG
//     strategy (single vs mixed).
//   - MIG_MULTIPLE_PER_PROCESS: a container asks for more than one MIG
//     device.
//   - GANG_MIG_MIXED_WITH_FULL: some ranks ask for MIG devices, others for
//     full GPUs.
//   - NPROC_EXCEEDS_DEVICES: torchrun's --nproc-per-node (or
//     PET_NPROC_PER_NODE, or the PyTorchJob's nprocPerNode) above the GPUs
//     of its container.
//   - DRA_CLAIM_UNMATCHED, DRA_MIG_MAY_SPAN_GPUS: the job's resource
//     claims against the DeviceClasses and the published devices
//     (claims.go).
//   - The NCCL settings rules a template alone can show (NCCLChecks):
//     settings that cannot work on what the job asks for (NCCL_NVLS_ENABLE=1
//     on MIG, several MIG ranks without NCCL_MULTI_RANK_GPU_ENABLE=1, a
//     hand-set CUDA_VISIBLE_DEVICES beyond the request, ...), judged by
//     preflight/ncclenv as the controller and diagnose judge them.
package validate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/review"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

// Path is where the handler is served.
const Path = "/validate-kubeflow-jobs"

// Policy is what a check does with a finding.
type Policy string

// The policies.
const (
	// Deny refuses the job with the rule ID, the reason and the fix.
	Deny Policy = "deny"
	// Warn admits the job with an admission warning (kubectl prints it).
	Warn Policy = "warn"
	// Off skips the check.
	Off Policy = "off"
)

// ParsePolicy reads a policy as written in the controller's configuration.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(strings.ToLower(strings.TrimSpace(s))); p {
	case Deny, Warn, Off:
		return p, nil
	}
	return "", fmt.Errorf("policy %q: want deny, warn or off", s)
}

// Checks are the rule IDs of the checks, in the order they are reported.
var Checks = append([]string{
	verdict.RuleShapeMismatch,
	verdict.RuleStrategyMismatch,
	verdict.RuleMIGMultiplePerProcess,
	verdict.RuleGangMIGMixedWithFull,
	verdict.RuleNprocExceedsDevices,
	verdict.RuleDRAClaimUnmatched,
	verdict.RuleDRAMIGMaySpanGPUs,
}, NCCLChecks...)

// NCCLChecks are the checks that judge NCCL settings, those of the NCCL
// settings rules (preflight/ncclenv) a template alone can show. A job's
// settings may be right for an image or a cluster the webhook cannot see
// (an NCCL it cannot tell, nodes it does not read), so they warn unless an
// operator sets them to deny.
var NCCLChecks = []string{
	verdict.RuleNCCLMIGVersion,
	verdict.RuleNCCLMultiRankGPU,
	verdict.RuleNCCLNVLSOnMIG,
	verdict.RuleNCCLMNNVLNoDomain,
	verdict.RuleNCCLSHMDisabledMIG,
	verdict.RuleNCCLIgnoreNetMismatch,
	verdict.RuleNCCLSettingsDiffer,
	verdict.RuleVisibleDevicesMismatch,
}

// DefaultPolicies: the shapes that can never be placed (no node offers
// them, no valid layout could give them, or only under the other MIG
// strategy) are refused; the rest may be meant (a launcher that sets
// CUDA_VISIBLE_DEVICES per process, a job that is about to be edited) and
// only warn. The claim checks warn: a DeviceClass or a node that
// publishes the devices may come after the job.
func DefaultPolicies() map[string]Policy {
	m := map[string]Policy{
		verdict.RuleShapeMismatch:         Deny,
		verdict.RuleStrategyMismatch:      Deny,
		verdict.RuleMIGMultiplePerProcess: Warn,
		verdict.RuleGangMIGMixedWithFull:  Warn,
		verdict.RuleNprocExceedsDevices:   Warn,
		verdict.RuleDRAClaimUnmatched:     Warn,
		verdict.RuleDRAMIGMaySpanGPUs:     Warn,
	}
	for _, id := range NCCLChecks {
		m[id] = Warn
	}
	return m
}

// NodeSource returns the cluster's nodes, the engine's input: the same
// objects the controller's placement judgement reads from its node cache.
type NodeSource func(ctx context.Context) ([]corev1.Node, error)

// FleetSource is the engine's prepared cluster of every node and how many
// nodes advertise GPU resources (Options.Fleet).
type FleetSource func(ctx context.Context) (cl *schedule.Cluster, gpuNodes int, err error)

// ListNodes is a NodeSource over a client: with the controller manager's
// client, the informer cache.
func ListNodes(c client.Reader) NodeSource {
	return func(ctx context.Context) ([]corev1.Node, error) {
		l := &corev1.NodeList{}
		if err := c.List(ctx, l); err != nil {
			return nil, err
		}
		return l.Items, nil
	}
}

// Options configure the handler.
type Options struct {
	// Policies by rule ID (Checks); a check not named takes its default
	// (DefaultPolicies).
	Policies map[string]Policy
	// Nodes feeds the schedule engine. Nil turns SHAPE_MISMATCH and
	// STRATEGY_MISMATCH off.
	Nodes NodeSource
	// DeviceClasses say which extended resources come through DRA; a job
	// whose pods use DRA is never refused on placement. Nil: none do
	// (resource claims are still seen).
	DeviceClasses DeviceClassSource
	// DRAObjects are the published devices and the claims and templates:
	// a job whose pods use DRA is judged on them, and the claim checks
	// read them. Nil: such a job is not judged on placement, and
	// DRA_CLAIM_UNMATCHED and DRA_MIG_MAY_SPAN_GPUS are off.
	DRAObjects DRAObjectSource
	// Engine judges placement; nil is schedule.New().
	Engine *schedule.Engine
	// Fleet, if set, is the engine's cluster of every node as the caller
	// keeps it current (the controller's node model, which the Pending
	// watchdog judges on too) and how many nodes advertise GPU
	// resources; Nodes then serves only a job whose pods use DRA (the
	// allocator tries each node). Nil: the cluster is prepared here from
	// Nodes, once per change of the nodes.
	Fleet FleetSource
	// TrustedUsers are user names whose updates are never judged: the
	// controller's own identity (its writes are limited to rankgate.io/
	// annotations and spec.runPolicy.suspend by the shipped
	// ValidatingAdmissionPolicy rankgate-controller-job-writes).
	TrustedUsers []string
}

// NewHandler returns the validating admission handler. Unknown rule IDs or
// policies in opts are programming errors of the caller: validate the
// configuration with CheckPolicies first.
func NewHandler(opts Options) admission.Handler {
	h := &handler{policy: DefaultPolicies(), nodes: opts.Nodes, fleet: opts.Fleet, classes: opts.DeviceClasses, objects: opts.DRAObjects,
		engine: opts.Engine, trusted: slices.Clone(opts.TrustedUsers), cel: cel.NewCache(256, cel.Features{})}
	for id, p := range opts.Policies {
		h.policy[id] = p
	}
	if h.engine == nil {
		h.engine = schedule.New()
	}
	return h
}

// CheckPolicies validates a policy map from configuration.
func CheckPolicies(m map[string]Policy) error {
	for id, p := range m {
		if !slices.Contains(Checks, id) {
			return fmt.Errorf("admission check %q: unknown (want one of %s)", id, strings.Join(Checks, ", "))
		}
		if _, err := ParsePolicy(string(p)); err != nil {
			return fmt.Errorf("admission check %s: %w", id, err)
		}
	}
	return nil
}

type handler struct {
	policy  map[string]Policy
	nodes   NodeSource
	fleet   FleetSource
	classes DeviceClassSource
	objects DRAObjectSource
	engine  *schedule.Engine
	// cel compiles the claims' selectors once (the scheduler's CEL).
	cel *cel.Cache
	// trusted: user names whose updates are allowed unjudged.
	trusted []string
	// last is the last prepared cluster (snapshot).
	last atomic.Pointer[snapshot]
}

// Handle judges a create of a PyTorchJob or MPIJob, and an update as a
// change (update.go). Anything else is allowed: the API server and the
// operators' schemas validate those.
func (h *handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	j, err := decodeObject(req, req.Object.Raw)
	if errors.Is(err, review.ErrTooLarge) {
		// Not judged, and not refused: an update over the bounds may be
		// the one that stops the job.
		return admission.Allowed("").WithWarnings(fmt.Sprintf("rankgate: not checked: %v", err))
	}
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if j == nil {
		return admission.Allowed("")
	}
	if req.Operation == admissionv1.Update {
		return h.handleUpdate(ctx, req, j)
	}
	fs, notes := h.judge(ctx, j)
	return h.respond(j, fs, notes)
}

// decodeObject reads raw (the request's object or old object) as the
// request's kind, once and within the shared bounds (review.DecodeJob);
// nil for kinds the webhook does not judge.
func decodeObject(req admission.Request, raw []byte) (kubeflow.Job, error) {
	return review.DecodeJob(req.Kind, req.Namespace, raw)
}

// respond turns findings into the answer: denied when a finding's check
// says deny, with every other finding and the notes as warnings.
func (h *handler) respond(j kubeflow.Job, fs []verdict.Finding, notes []string) admission.Response {
	var deny, warn []string
	for _, f := range fs {
		switch h.policy[f.Rule] {
		case Deny:
			deny = append(deny, f.Rule+": "+f.Message+" Fix: "+f.Remediation)
		case Warn:
			warn = append(warn, warning(f))
		}
	}
	warn = append(warn, notes...)
	if len(deny) > 0 {
		msg := fmt.Sprintf("rankgate refused %s %s: %s", j.Kind(), subject(j), strings.Join(deny, " "))
		return admission.Denied(msg).WithWarnings(warn...)
	}
	return admission.Allowed("").WithWarnings(warn...)
}

func subject(j kubeflow.Job) string {
	name := j.Name()
	if name == "" {
		name = j.Object().GetGenerateName() + "*"
	}
	return j.Namespace() + "/" + name
}

// maxWarning: the API server truncates longer admission warnings.
const maxWarning = 256

// warning is "RULE: message Fix: remediation" in at most maxWarning
// bytes: the message keeps at least half, the fix the rest.
func warning(f verdict.Finding) string {
	room := maxWarning - len(f.Rule) - len(": ") - len(" Fix: ")
	msg := clip(f.Message, max(room/2, room-len(f.Remediation)))
	return f.Rule + ": " + msg + " Fix: " + clip(f.Remediation, room-len(msg))
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - 3
	for cut > 0 && !validStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// validStart: b begins a UTF-8 sequence (cutting there keeps the text valid).
func validStart(b byte) bool { return b&0xC0 != 0x80 }
