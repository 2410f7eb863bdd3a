// Package preflight holds rankgate's rules: rank rules over one node's
// inventory and a rank's devices, gang rules over all ranks of a job, and the
// report format every face of the binary prints. It knows nothing of
// client-go.
package preflight

import (
	"fmt"
	"sort"
)

// Severity of a finding.
type Severity string

// Severities, in increasing order of weight.
const (
	SeverityInfo Severity = "info"
	SeverityWarn Severity = "warn"
	SeverityFail Severity = "fail"
)

func (s Severity) weight() int {
	switch s {
	case SeverityFail:
		return 2
	case SeverityWarn:
		return 1
	}
	return 0
}

// Verdict of a whole report.
type Verdict string

// Verdicts.
const (
	VerdictPass Verdict = "pass"
	VerdictWarn Verdict = "warn"
	VerdictFail Verdict = "fail"
)

// Finding is one rule's result. Rule is a stable public ID.
type Finding struct {
	Rule        string   `json:"rule"`
	Severity    Severity `json:"severity"`
	Message     string   `json:"message"`
	Remediation string   `json:"remediation,omitempty"`
	Devices     []string `json:"devices,omitempty"`
	Ranks       []int    `json:"ranks,omitempty"`
	Nodes       []string `json:"nodes,omitempty"`
	Pods        []string `json:"pods,omitempty"`
}

// Report is what preflight, init, diagnose and the controller print.
type Report struct {
	Verdict  Verdict   `json:"verdict"`
	Subject  string    `json:"subject,omitempty"`
	Findings []Finding `json:"findings"`
	// Devices lists the devices checked, for the record.
	Devices []DeviceSummary `json:"devices,omitempty"`
}

// DeviceSummary is a short description of one checked device.
type DeviceSummary struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"`
	GPU       int    `json:"gpu"`
	GPUUUID   string `json:"gpuUuid,omitempty"`
	Profile   string `json:"profile"`
	SMs       int    `json:"sms,omitempty"`
	MemoryMiB uint64 `json:"memoryMiB,omitempty"`
}

// NewReport builds a report from findings: the verdict is the heaviest
// severity; findings are ordered by severity, then rule.
func NewReport(subject string, findings []Finding) Report {
	if findings == nil {
		findings = []Finding{}
	}
	sort.SliceStable(findings, func(i, j int) bool {
		wi, wj := findings[i].Severity.weight(), findings[j].Severity.weight()
		if wi != wj {
			return wi > wj
		}
		return findings[i].Rule < findings[j].Rule
	})
	r := Report{Verdict: VerdictPass, Subject: subject, Findings: findings}
	for _, f := range findings {
		switch f.Severity {
		case SeverityFail:
			r.Verdict = VerdictFail
		case SeverityWarn:
			if r.Verdict == VerdictPass {
				r.Verdict = VerdictWarn
			}
		}
	}
	return r
}

// Failed reports whether the verdict is fail.
func (r Report) Failed() bool { return r.Verdict == VerdictFail }

// RuleIDs lists the rule of every finding, in the report's order.
func (r Report) RuleIDs() []string {
	out := make([]string, 0, len(r.Findings))
	for _, f := range r.Findings {
		out = append(out, f.Rule)
	}
	return out
}

// Reason is the one-paragraph text for a termination message or annotation:
// the first failing findings, with rule IDs, bounded in length.
func (r Report) Reason(max int) string {
	var s string
	for _, f := range r.Findings {
		if f.Severity != SeverityFail {
			continue
		}
		line := fmt.Sprintf("%s: %s", f.Rule, f.Message)
		if f.Remediation != "" {
			line += " Fix: " + f.Remediation
		}
		if s != "" {
			s += "\n"
		}
		s += line
	}
	if s == "" {
		s = fmt.Sprintf("verdict %s", r.Verdict)
	}
	if max > 0 && len(s) > max {
		s = s[:max-3] + "..."
	}
	return s
}
