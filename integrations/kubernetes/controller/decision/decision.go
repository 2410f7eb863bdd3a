// Package decision is the vocabulary of a gang's verdict as the
// controller records it: the Decision (the report, when and by whom it was
// decided, the fail action), how it is rendered onto a job's annotations
// and read back from them, why a gang is decided (Trigger) and the ask to
// decide one.
package decision

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Fail policies.
const (
	ActionSuspend  = "suspend"
	ActionDelete   = "delete"
	ActionAnnotate = "annotate"
)

// ValidAction reports whether s is a fail policy.
func ValidAction(s string) bool {
	return s == ActionSuspend || s == ActionDelete || s == ActionAnnotate
}

// Bounds on what the controller writes. The API server refuses an object
// whose annotations (keys and values) total more than 256 KiB; the job's
// own annotations count too (kubectl's last-applied-configuration of a big
// job can be tens of KiB), so the report is trimmed to what is left when it
// would not fit (applyOnce).
const (
	MaxReasonLen      = 2048
	MaxReportLen      = 64 << 10
	annotationsLimit  = 256 << 10
	annotationsMargin = 4 << 10 // the API server's own bookkeeping, rounding
	// In a trimmed report: at most this much of each finding's message and
	// this many of each list (ranks, pods, nodes, devices).
	trimmedMessageLen = 1024
	trimmedListLen    = 20
)

// Decision is a recorded verdict.
type Decision struct {
	Report    verdict.Report
	DecidedAt time.Time
	DecidedBy string // the replica that decided
	Action    string
	// Adopted: read from the job or its Gang, not decided by this
	// call.
	Adopted bool
	// Applied: the job carries it already.
	Applied bool
	// Unrecorded: the job is gone or replaced; answered, never recorded.
	Unrecorded bool
	// DeleteRefused: the fail policy was delete, but the API server refuses
	// the controller's delete (the base install grants none): the job is
	// suspended instead, and the Event says why.
	DeleteRefused string
	// Kueue: how a Kueue-managed job was stopped (its Workload
	// deactivated, or no Workload yet), for the Event; "" otherwise.
	Kueue string
}

// FromJob reads the verdict the job carries, if any.
func FromJob(o client.Object) (*Decision, bool) {
	a := o.GetAnnotations()
	v := verdict.Verdict(a[contract.AnnotationVerdict])
	if v != verdict.VerdictPass && v != verdict.VerdictWarn && v != verdict.VerdictFail {
		return nil, false
	}
	d := &Decision{Action: a[contract.AnnotationAction], DecidedBy: a[contract.AnnotationDecidedBy], Adopted: true}
	d.DecidedAt, _ = time.Parse(time.RFC3339Nano, a[contract.AnnotationDecidedAt])
	if err := json.Unmarshal([]byte(a[contract.AnnotationReport]), &d.Report); err != nil || d.Report.Verdict != v {
		// Edited by hand or truncated: the verdict and reason still stand.
		d.Report = verdict.Report{Verdict: v, Subject: a[contract.AnnotationReason], Findings: []verdict.Finding{}}
	}
	return d, true
}

// Annotations renders a decision for the job and its record.
func Annotations(d *Decision) map[string]string {
	return AnnotationsWithin(d, MaxReportLen)
}

// AnnotationsWithin renders a decision with the report bounded to
// reportMax bytes.
func AnnotationsWithin(d *Decision, reportMax int) map[string]string {
	rules := gangstore.RuleIDs(d.Report, len(d.Report.Findings))
	m := map[string]string{
		contract.AnnotationVerdict:   string(d.Report.Verdict),
		contract.AnnotationRules:     strings.Join(rules, ","),
		contract.AnnotationDecidedAt: d.DecidedAt.UTC().Format(time.RFC3339Nano),
		contract.AnnotationDecidedBy: d.DecidedBy,
		contract.AnnotationReport:    CompactReport(d.Report, reportMax),
	}
	if d.Report.Failed() {
		m[contract.AnnotationReason] = FailReason(d.Report, MaxReasonLen)
		m[contract.AnnotationAction] = d.Action
	} else {
		m[contract.AnnotationReason] = Summary(d.Report)
	}
	return m
}

// FailReason is the reason text of a fail verdict: its fail findings and,
// after them, any RECONFIGURABLE finding (the MIG layout that would create
// the shape a SHAPE_MISMATCH says no node offers: the cure, which the
// reason must name).
func FailReason(r verdict.Report, max int) string {
	s := r.Reason(0)
	for _, f := range r.Findings {
		if f.Rule == verdict.RuleReconfigurable {
			s += "\n" + f.Line()
		}
	}
	return verdict.Truncate(s, max)
}

// Summary is the reason text of a pass or warn verdict.
func Summary(r verdict.Report) string {
	var warn []string
	for _, f := range r.Findings {
		if f.Severity == verdict.SeverityWarn {
			warn = append(warn, f.Rule+": "+f.Message)
		}
	}
	if len(warn) == 0 {
		return "all ranks passed"
	}
	return verdict.Truncate("passed with warnings: "+strings.Join(warn, "\n"), MaxReasonLen)
}

// CompactReport is the report as JSON within max bytes. A report that is
// too long keeps its verdict and as many of its findings as fit, in order
// (fail first), each without its remediation (the rules reference has it),
// its message and lists shortened; the subject then says how many findings
// were left out. The reason and rules annotations, and each rank's own
// answer, still name every failing rule.
func CompactReport(r verdict.Report, max int) string {
	b, _ := json.Marshal(r)
	if len(b) <= max {
		return string(b)
	}
	total := len(r.Findings)
	short := make([]verdict.Finding, total)
	for i, f := range r.Findings {
		f.Remediation = ""
		f.Message = verdict.Truncate(f.Message, trimmedMessageLen)
		f.Ranks, f.Pods = firstN(f.Ranks, trimmedListLen), firstN(f.Pods, trimmedListLen)
		f.Nodes, f.Devices = firstN(f.Nodes, trimmedListLen), firstN(f.Devices, trimmedListLen)
		short[i] = f
	}
	subject := verdict.Truncate(r.Subject, 512)
	render := func(keep int) []byte {
		t := verdict.Report{Verdict: r.Verdict, Findings: short[:keep], Devices: firstN(r.Devices, trimmedListLen),
			Subject: fmt.Sprintf("%s [report trimmed to fit the job's annotations: %d of %d findings left out, messages and lists shortened]", subject, total-keep, total)}
		b, _ := json.Marshal(t)
		return b
	}
	// The most findings that fit (render grows with keep).
	lo, hi := 0, total
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if len(render(mid)) <= max {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return string(render(lo))
}

func firstN[T any](xs []T, n int) []T {
	if len(xs) > n {
		return xs[:n]
	}
	return xs
}

// annotationsSize is what the API server counts against its limit.
func annotationsSize(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}

// AnnotationsFor renders d for a job that already carries
// annotations: the report gets what the limit leaves beside them.
func AnnotationsFor(d *Decision, existing map[string]string) map[string]string {
	ours := Annotations(d)
	others := 0
	for k, v := range existing {
		if _, overwritten := ours[k]; !overwritten {
			others += len(k) + len(v)
		}
	}
	if others+annotationsSize(ours) <= annotationsLimit-annotationsMargin {
		return ours
	}
	left := annotationsLimit - annotationsMargin - others - (annotationsSize(ours) - len(ours[contract.AnnotationReport]))
	return AnnotationsWithin(d, max(left, 0))
}

// JobTimeout is the job's gang timeout: its annotation (at most
// gate.MaxJobDuration), else def.
func JobTimeout(o client.Object, def time.Duration) (time.Duration, error) {
	s := o.GetAnnotations()[contract.AnnotationGangTimeout]
	if s == "" {
		return def, nil
	}
	d, err := gate.ParseJobDuration(s)
	if err != nil || d <= 0 {
		return def, fmt.Errorf("annotation %s=%q is not a positive duration like 15m", contract.AnnotationGangTimeout, s)
	}
	return d, nil
}

// JobAction is the job's fail policy: its annotation, else def.
func JobAction(o client.Object, def string) string {
	if s := strings.ToLower(o.GetAnnotations()[contract.AnnotationOnFail]); ValidAction(s) {
		return s
	}
	return def
}
