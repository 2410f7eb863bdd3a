package ncclenv

import (
	"fmt"
	"sort"
	"strings"

	"github.com/rankgate/rankgate/verdict"
)

// Check runs every rule over in; the findings come in rule order.
func Check(in Input) []verdict.Finding {
	var out []verdict.Finding
	for _, rule := range rules {
		out = append(out, rule(in)...)
	}
	return out
}

// rules are evaluated in this order.
var rules = []func(Input) []verdict.Finding{
	ruleMIGVersion,
	ruleMultiRankGPU,
	ruleNVLSOnMIG,
	ruleNVLSNoNVSwitch,
	ruleMNNVLNoDomain,
	ruleSHMDisabledMIG,
	ruleP2PDisabledNVLink,
	ruleIgnoreNetMismatch,
	ruleSettingsDiffer,
	ruleSocketIfname,
	ruleIBHCA,
	ruleVisibleDevices,
}

// Merge adds findings to a report, keeping its subject, mode and devices,
// with the verdict and order verdict.NewReport gives.
func Merge(r verdict.Report, fs []verdict.Finding) verdict.Report {
	if len(fs) == 0 {
		return r
	}
	all := append(append([]verdict.Finding(nil), r.Findings...), fs...)
	out := verdict.NewReport(r.Subject, all)
	out.Mode, out.Devices = r.Mode, r.Devices
	return out
}

// finding builds a finding about rs.
func finding(rule string, sev verdict.Severity, rs []Rank, msg, fix string) verdict.Finding {
	f := verdict.Finding{Rule: rule, Severity: sev, Message: msg, Remediation: fix, Ranks: rankList(rs)}
	seenPod, seenNode := map[string]bool{}, map[string]bool{}
	for _, r := range rs {
		if r.Pod != "" && !seenPod[r.Pod] {
			seenPod[r.Pod] = true
			f.Pods = append(f.Pods, r.Pod)
		}
		if r.Node != "" && !seenNode[r.Node] {
			seenNode[r.Node] = true
			f.Nodes = append(f.Nodes, r.Node)
		}
	}
	return f
}

// withSetting keeps the ranks whose env NCCL reads as name=1.
func withSetting(rs []Rank, name string) []Rank {
	var out []Rank
	for _, r := range rs {
		if r.Env.IsOne(name) {
			out = append(out, r)
		}
	}
	return out
}

// reads says how NCCL reads name in e: "unset", "set to 1", or a value it
// reads as something else ("\"true\", which NCCL reads as 0").
func reads(e *Env, name string) string {
	s, set, known := e.String(name)
	switch {
	case !known:
		return "set from a source rankgate cannot read"
	case !set:
		return "unset"
	}
	v, _, _ := e.Int(name)
	if strings.TrimSpace(s) == fmt.Sprint(v) {
		return "set to " + s
	}
	return fmt.Sprintf("set to %q, which NCCL reads as %d (it parses an integer, not true/yes)", s, v)
}

// joinLabels lists at most 8 labels.
func joinLabels(rs []Rank) string {
	l := names(rs)
	if len(l) > 8 {
		return strings.Join(l[:8], ", ") + fmt.Sprintf(" and %d more", len(l)-8)
	}
	return strings.Join(l, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
