// Package verdict is rankgate's shared vocabulary: findings, reports,
// severities, verdicts, exit codes and the one classifier from errors to
// exit codes, the rendering every face prints, the termination-log writer,
// and the registry where every rule ID is declared once. It imports nothing
// of the project, so every other package may import it.
package verdict

import (
	"sort"
	"strings"
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

// Finding is one rule's result. Rule is a stable public ID, declared in the
// registry (rules.go).
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

// Report is what preflight, init, launch, diagnose and the controller print.
type Report struct {
	Verdict Verdict `json:"verdict"`
	Subject string  `json:"subject,omitempty"`
	// Mode is what a preflight report judged: "rank" (one process's
	// devices) or "node" (a pasted node with no rank allocation).
	Mode     string    `json:"mode,omitempty"`
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
	// FabricCluster and FabricClique are the NVLink domain of the device's
	// GPU on multi-node NVLink systems (GB200 NVL72 and the like): GPUs
	// reach each other over NVLink only within one cluster and clique.
	// Empty on other systems.
	FabricCluster string  `json:"fabricCluster,omitempty"`
	FabricClique  *uint32 `json:"fabricClique,omitempty"`
	// NVSwitch says whether the device's GPU sits on an NVSwitch fabric
	// (NVML's fabric state; NVLink SHARP needs one); nil when unknown.
	NVSwitch *bool `json:"nvswitch,omitempty"`
	// NVLinkPeer: the device is a full GPU with an NVLink to another full
	// GPU of the same report (MIG instances have no NVLink).
	NVLinkPeer bool `json:"nvlinkPeer,omitempty"`
	// DRA names the device as its DRA driver publishes it,
	// driver/pool/device, when the device came through a ResourceClaim.
	DRA string `json:"dra,omitempty"`
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

// ExitCode maps the report's verdict to the process exit code.
func (r Report) ExitCode() int {
	if r.Failed() {
		return ExitFail
	}
	return ExitPass
}

// RuleIDs lists the rule of every finding, in the report's order.
func (r Report) RuleIDs() []string {
	out := make([]string, 0, len(r.Findings))
	for _, f := range r.Findings {
		out = append(out, f.Rule)
	}
	return out
}

// Reason is the one-paragraph text for a termination message or annotation:
// the failing findings, with rule IDs and fixes, at most max bytes (0: no
// bound), never cut inside a UTF-8 character.
func (r Report) Reason(max int) string {
	var b strings.Builder
	for _, f := range r.Findings {
		if f.Severity != SeverityFail {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(f.Line())
	}
	s := b.String()
	if s == "" {
		s = "verdict " + string(r.Verdict)
	}
	return Truncate(s, max)
}

// Line is the finding as one paragraph: "RULE: message Fix: remediation".
func (f Finding) Line() string {
	line := f.Rule + ": " + f.Message
	if f.Remediation != "" {
		line += " Fix: " + f.Remediation
	}
	return line
}
