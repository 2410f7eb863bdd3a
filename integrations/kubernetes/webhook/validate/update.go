package validate

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/verdict"
)

// An UPDATE is judged as a change, never as the object: the webhook must
// not stand between a job and the writes that stop it or describe it (the
// controller's verdict patch, a suspend, Kueue's suspend, a person's
// `kubectl label`), even when the job as it stands would be refused now (a
// pool retired since it was admitted; a job created while the webhook was
// down or before its namespace was opted in).
//
//   - The controller's own writes are allowed without a look (TrustedUsers):
//     the shipped ValidatingAdmissionPolicy rankgate-controller-job-writes
//     already limits them to rankgate.io/ annotations and
//     spec.runPolicy.suspend.
//   - An update that opts the job out (rankgate.io/gate: disabled) is
//     allowed: the opt-out is the job owner's to make.
//   - An update that leaves the judged view (judgedView) as it was is
//     allowed, whoever makes it.
//   - Otherwise both the old and the new job are judged, and only the
//     findings the update brings (not present in the old job) count; an
//     update that suspends the job is never refused (its findings become
//     warnings): stopping a job must always be possible.

// judgedView is what the checks read from a job: its replica types, their
// counts and pod specs (requests and limits, containers' command lines and
// environment, scheduling constraints), and the per-pod process count the spec sets (a PyTorchJob's
// nprocPerNode).
// Labels, annotations, the run policy and the status are not in it.
type judgedView struct {
	replicas []replicaView
	nproc    *string
}

type replicaView struct {
	typ       string
	n         int32
	runsRanks bool
	spec      *corev1.PodSpec
}

func viewOf(j kubeflow.Job) judgedView {
	var v judgedView
	for _, rs := range j.ReplicaSpecs() {
		r := replicaView{typ: rs.Type, n: rs.Replicas, runsRanks: rs.RunsRanks}
		if rs.Template != nil {
			r.spec = &rs.Template.Spec
		}
		v.replicas = append(v.replicas, r)
	}
	slices.SortFunc(v.replicas, func(a, b replicaView) int { return strings.Compare(a.typ, b.typ) })
	v.nproc = j.NprocPerNode()
	return v
}

func (v judgedView) equal(o judgedView) bool {
	if len(v.replicas) != len(o.replicas) || !equality.Semantic.DeepEqual(v.nproc, o.nproc) {
		return false
	}
	for i, r := range v.replicas {
		q := o.replicas[i]
		if r.typ != q.typ || r.n != q.n || r.runsRanks != q.runsRanks || !equality.Semantic.DeepEqual(r.spec, q.spec) {
			return false
		}
	}
	return true
}

// optedOut: the job's own rankgate.io/gate setting turns the gate off.
func optedOut(j kubeflow.Job) bool {
	o := j.Object()
	return contract.GateDisabled(contract.GateSetting(o.GetLabels(), o.GetAnnotations()))
}

// handleUpdate judges an UPDATE as a change (see above).
func (h *handler) handleUpdate(ctx context.Context, req admission.Request, j kubeflow.Job) admission.Response {
	if slices.Contains(h.trusted, req.UserInfo.Username) {
		return admission.Allowed("")
	}
	if optedOut(j) {
		return admission.Allowed("")
	}
	old, err := decodeObject(req, req.OldObject.Raw)
	if err != nil || old == nil {
		// An old object the webhook cannot read is not one it admitted;
		// the new one is judged as a create would be.
		fs, notes := h.judge(ctx, j)
		return h.respond(j, fs, notes)
	}
	if viewOf(j).equal(viewOf(old)) {
		return admission.Allowed("")
	}
	fs, notes := h.judge(ctx, j)
	if len(fs) == 0 {
		return h.respond(j, nil, notes)
	}
	before, _ := h.judge(ctx, old)
	fs = newFindings(fs, before)
	if j.Suspended() && !old.Suspended() {
		return h.warnOnly(fs, notes)
	}
	return h.respond(j, fs, notes)
}

// newFindings are the findings of fs that before does not have (same rule
// and message: both were judged against the same cluster).
func newFindings(fs, before []verdict.Finding) []verdict.Finding {
	had := make(map[string]bool, len(before))
	for _, f := range before {
		had[f.Rule+"\x00"+f.Message] = true
	}
	out := fs[:0:0]
	for _, f := range fs {
		if !had[f.Rule+"\x00"+f.Message] {
			out = append(out, f)
		}
	}
	return out
}

// warnOnly admits with every finding that is not off as a warning.
func (h *handler) warnOnly(fs []verdict.Finding, notes []string) admission.Response {
	var warn []string
	for _, f := range fs {
		if h.policy[f.Rule] != Off {
			warn = append(warn, warning(f))
		}
	}
	return admission.Allowed("").WithWarnings(append(warn, notes...)...)
}
