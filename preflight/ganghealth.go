package preflight

import (
	"fmt"
	"strings"

	"github.com/rankgate/rankgate/verdict"
)

// gangNVLinkDomainSplit: ranks that expect multi-node NVLink (the job says
// so, or their GPUs report a fabric cluster) must share one NVLink domain,
// a fabric cluster and clique. A GPU with no cluster is a domain of its
// own node. Ranks split across domains reach each other over the network
// only: NCCL's MNNVL transport fails or falls back.
func gangNVLinkDomainSplit(g *gang) []verdict.Finding {
	domains := map[string][]int{}
	var expecting []int
	for _, r := range g.ranks {
		if len(r.Report.Devices) == 0 {
			continue
		}
		multi := g.in.ExpectMultiNodeNVLink
		for _, d := range r.Report.Devices {
			multi = multi || d.FabricCluster != ""
		}
		if !multi {
			continue
		}
		expecting = append(expecting, r.Rank)
		for _, d := range r.Report.Devices {
			domains[nvlinkDomain(r, d)] = append(domains[nvlinkDomain(r, d)], r.Rank)
		}
	}
	if len(domains) <= 1 {
		return nil
	}
	for k, rs := range domains {
		domains[k] = dedupe(rs)
	}
	why := "their GPUs report a multi-node NVLink cluster"
	if g.in.ExpectMultiNodeNVLink {
		why = "the job expects multi-node NVLink"
	}
	return []verdict.Finding{{
		Rule: verdict.RuleGangNVLinkDomainSplit, Severity: verdict.SeverityFail, Ranks: dedupe(expecting),
		Message: fmt.Sprintf("ranks %s expect one NVLink domain (%s) but sit in %d: %s; GPUs reach each other over NVLink only within one cluster and clique, so NCCL's multi-node NVLink transport fails or falls back to the network",
			firstRanks(dedupe(expecting)), why, len(domains), rankGroups(domains)),
		Remediation: "place every rank in one NVLink domain: schedule the job onto the nodes of one clique (GPU Feature Discovery labels nodes with nvidia.com/gpu.clique), or drop the multi-node NVLink expectation",
	}}
}

func nvlinkDomain(r RankReport, d verdict.DeviceSummary) string {
	if d.FabricCluster == "" {
		return fmt.Sprintf("node %s (no multi-node NVLink)", r.Node)
	}
	k := "cluster " + d.FabricCluster
	if d.FabricClique != nil {
		k += fmt.Sprintf(" clique %d", *d.FabricClique)
	}
	return k
}

// gangHealthMixed: some ranks report GPU health findings and others none;
// the job runs at the pace of its sickest rank, or not at all. Names the
// sick ranks by rule. A gang whose ranks all report the same kind of
// trouble is left to the ranks' own findings.
func gangHealthMixed(g *gang) []verdict.Finding {
	byRule := map[string][]int{}
	var sick []int
	var nodes []string
	seenNode := map[string]bool{}
	sev := verdict.SeverityWarn
	for _, r := range g.ranks {
		found := false
		for _, f := range r.Report.Findings {
			if !IsHealthRule(f.Rule) {
				continue
			}
			found = true
			byRule[f.Rule] = append(byRule[f.Rule], r.Rank)
			if f.Severity == verdict.SeverityFail {
				sev = verdict.SeverityFail
			}
		}
		if found {
			sick = append(sick, r.Rank)
			if r.Node != "" && !seenNode[r.Node] {
				seenNode[r.Node] = true
				nodes = append(nodes, r.Node)
			}
		}
	}
	if len(sick) == 0 || len(sick) == len(g.ranks) {
		return nil
	}
	for k, rs := range byRule {
		byRule[k] = dedupe(rs)
	}
	if len(nodes) > MaxListedRanks {
		nodes = nodes[:MaxListedRanks]
	}
	shown := sick[:min(len(sick), MaxListedRanks)]
	return []verdict.Finding{{
		Rule: verdict.RuleGangHealthMixed, Severity: sev, Ranks: shown, Nodes: nodes,
		Message: fmt.Sprintf("ranks %s report GPU health findings and the other %d ranks none: %s; the job runs at the pace of its sickest rank",
			firstRanks(sick), len(g.ranks)-len(sick), rankGroups(byRule)),
		Remediation: "fix the named ranks' GPUs (each rank's report names the fix) or keep the job off their nodes (" + strings.Join(nodes, ", ") + ")",
	}}
}
