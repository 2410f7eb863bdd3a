package controller

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/rankgate/rankgate/verdict"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Keys under rankgate.io/ on jobs and namespaces: a public contract
// (the README (The cluster gate)).
const (
	// KeyGate opts a job in ("enabled"; label or annotation on the job, or
	// label on its namespace). "disabled" on the job opts it out of a
	// namespace that is opted in.
	KeyGate = "rankgate.io/gate"
	// KeyOnFail overrides the controller's --on-fail for one job.
	KeyOnFail = "rankgate.io/on-fail"
	// KeyGangTimeout overrides --gang-timeout for one job ("15m").
	KeyGangTimeout = "rankgate.io/gang-timeout"

	// Written by the controller.
	KeyVerdict      = "rankgate.io/verdict"    // pass | warn | fail
	KeyReason       = "rankgate.io/reason"     // the failing findings in words
	KeyRules        = "rankgate.io/rules"      // rule IDs of fail and warn findings, comma-separated
	KeyDecidedAt    = "rankgate.io/decided-at" // RFC 3339
	KeyDecidedBy    = "rankgate.io/decided-by" // the controller replica
	KeyReport       = "rankgate.io/report"     // the gang report, JSON
	KeyAction       = "rankgate.io/action"     // suspend | delete | annotate (fail only)
	KeyFirstReport  = "rankgate.io/first-report-at"
	KeyPreviousGate = "rankgate.io/previous-verdict" // "<verdict> <decided-at> <rules>" of a re-gated attempt
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

// Bounds on what the controller writes (annotations total 256 KiB).
const (
	maxReasonLen = 2048
	maxReportLen = 64 << 10
)

// decision is a recorded verdict.
type decision struct {
	Report    verdict.Report
	DecidedAt time.Time
	DecidedBy string // the replica that decided
	Action    string
	// adopted: read from the job or a verdict record, not decided by this
	// call.
	adopted bool
	// applied: the job carries it already.
	applied bool
	// unrecorded: the job is gone or replaced; answered, never recorded.
	unrecorded bool
}

// recordedDecision reads the verdict the job carries, if any.
func recordedDecision(o client.Object) (*decision, bool) {
	a := o.GetAnnotations()
	v := verdict.Verdict(a[KeyVerdict])
	if v != verdict.VerdictPass && v != verdict.VerdictWarn && v != verdict.VerdictFail {
		return nil, false
	}
	d := &decision{Action: a[KeyAction], DecidedBy: a[KeyDecidedBy], adopted: true}
	d.DecidedAt, _ = time.Parse(time.RFC3339Nano, a[KeyDecidedAt])
	if err := json.Unmarshal([]byte(a[KeyReport]), &d.Report); err != nil || d.Report.Verdict != v {
		// Edited by hand or truncated: the verdict and reason still stand.
		d.Report = verdict.Report{Verdict: v, Subject: a[KeyReason], Findings: []verdict.Finding{}}
	}
	return d, true
}

// decisionAnnotations renders a decision for the job and its record.
func decisionAnnotations(d *decision) map[string]string {
	var rules []string
	seen := map[string]bool{}
	for _, f := range d.Report.Findings {
		if f.Severity != verdict.SeverityInfo && !seen[f.Rule] {
			seen[f.Rule] = true
			rules = append(rules, f.Rule)
		}
	}
	m := map[string]string{
		KeyVerdict:   string(d.Report.Verdict),
		KeyRules:     strings.Join(rules, ","),
		KeyDecidedAt: d.DecidedAt.UTC().Format(time.RFC3339Nano),
		KeyDecidedBy: d.DecidedBy,
		KeyReport:    compactReport(d.Report),
	}
	if d.Report.Failed() {
		m[KeyReason] = d.Report.Reason(maxReasonLen)
		m[KeyAction] = d.Action
	} else {
		m[KeyReason] = summary(d.Report)
	}
	return m
}

// summary is the reason text of a pass or warn verdict.
func summary(r verdict.Report) string {
	var warn []string
	for _, f := range r.Findings {
		if f.Severity == verdict.SeverityWarn {
			warn = append(warn, f.Rule+": "+f.Message)
		}
	}
	if len(warn) == 0 {
		return "all ranks passed"
	}
	s := "passed with warnings: " + strings.Join(warn, "\n")
	if len(s) > maxReasonLen {
		s = s[:maxReasonLen-3] + "..."
	}
	return s
}

// compactReport is the report as JSON within maxReportLen: remediations,
// then findings beyond the first, are dropped when it is too long.
func compactReport(r verdict.Report) string {
	b, _ := json.Marshal(r)
	if len(b) <= maxReportLen {
		return string(b)
	}
	r.Findings = append([]verdict.Finding(nil), r.Findings...)
	for i := range r.Findings {
		r.Findings[i].Remediation = ""
	}
	for len(r.Findings) > 1 {
		if b, _ = json.Marshal(r); len(b) <= maxReportLen {
			return string(b)
		}
		r.Findings = r.Findings[:len(r.Findings)/2]
	}
	if len(r.Findings) == 1 && len(r.Findings[0].Message) > maxReasonLen {
		r.Findings[0].Message = r.Findings[0].Message[:maxReasonLen]
		r.Findings[0].Ranks, r.Findings[0].Pods, r.Findings[0].Nodes, r.Findings[0].Devices = nil, nil, nil, nil
	}
	b, _ = json.Marshal(r)
	return string(b)
}

// gateSetting reads the opt-in key from labels, then annotations.
func gateSetting(o client.Object) string {
	if v, ok := o.GetLabels()[KeyGate]; ok {
		return strings.ToLower(v)
	}
	return strings.ToLower(o.GetAnnotations()[KeyGate])
}

func enabled(v string) bool  { return v == "enabled" || v == "true" }
func disabled(v string) bool { return v == "disabled" || v == "false" }

// jobTimeout is the job's gang timeout: its annotation, else def.
func jobTimeout(o client.Object, def time.Duration) (time.Duration, error) {
	s := o.GetAnnotations()[KeyGangTimeout]
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return def, fmt.Errorf("annotation %s=%q is not a positive duration like 15m", KeyGangTimeout, s)
	}
	return d, nil
}

// jobAction is the job's fail policy: its annotation, else def.
func jobAction(o client.Object, def string) string {
	if s := strings.ToLower(o.GetAnnotations()[KeyOnFail]); ValidAction(s) {
		return s
	}
	return def
}
