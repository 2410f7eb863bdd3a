package preflight

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/smi"
	"github.com/rankgate/rankgate/verdict"
)

const sharedSMI = "../testdata/fixtures/nvidia-smi/"

func fixtureNode(t *testing.T, paths ...string) *topology.Inventory {
	t.Helper()
	var in []smi.Input
	for _, p := range paths {
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		in = append(in, smi.Input{Name: p, Data: data})
	}
	inv, err := smi.Import(in, nil)
	require.NoError(t, err)
	return inv
}

var nodeAlloc = topology.Allocation{From: topology.FromDefault, All: true}

func TestModeFor(t *testing.T) {
	require.Equal(t, ModeNode, ModeFor(nodeAlloc, true))
	require.Equal(t, ModeRank, ModeFor(nodeAlloc, false), "a live node keeps rank mode")
	require.Equal(t, ModeRank, ModeFor(topology.Allocation{From: "NVIDIA_VISIBLE_DEVICES", All: true}, true), "NVIDIA_VISIBLE_DEVICES=all is an allocation")
	require.Equal(t, ModeRank, ModeFor(topology.Allocation{From: "--devices", Refs: []string{"0"}}, true))
}

// TestNodeModeSkipsProcessRules: a pasted MIG node with no allocation is not
// one process seeing every MIG device. Rank mode (the old behaviour) fails
// it with MIG_MULTIPLE_PER_PROCESS; node mode runs the node-level rules.
func TestNodeModeSkipsProcessRules(t *testing.T) {
	run := func(inv *topology.Inventory, mode Mode, expect string) verdict.Report {
		return RankRules(RankInput{Inventory: inv, Allocation: nodeAlloc, Mode: mode, ExpectProfile: expect, Catalog: topology.DefaultCatalog(), Drivers: DefaultDriverTable()})
	}
	// Seven 1g.10gb instances of one A100 (-L, shared fixture 12).
	a100 := fixtureNode(t, sharedSMI+"12_smi-L_a100-sxm4-80gb_7x1g.10gb_datadog33120.txt")
	require.Equal(t, []string{"MIG_MULTIPLE_PER_PROCESS/fail"}, rules(run(a100, ModeRank, "")))
	r := run(a100, ModeNode, "")
	require.Empty(t, rules(r))
	require.Equal(t, "node", r.Mode)
	require.Equal(t, verdict.VerdictPass, r.Verdict)
	require.Len(t, r.Devices, 7)
	// The expected profile is still checked device by device.
	require.Equal(t, []string{"PROFILE_MISMATCH/fail"}, rules(run(a100, ModeNode, "1g.10gb+me"))[:1])

	// An H100 node with MIG and full GPUs side by side, instances of
	// several profiles on several GPUs (-L, shared fixture 01): in rank mode
	// every per-process rule fires, in node mode none does.
	h100 := fixtureNode(t, sharedSMI+"01_smi-L_h100-80gb-hbm3_mig-mixed_590.48.01.txt")
	process := map[string]bool{verdict.RuleMIGMultiplePerProcess: true, verdict.RuleMIGSpansGPUs: true, verdict.RuleMIGMixedWithFull: true, verdict.RuleProfileHeterogeneous: true}
	seen := 0
	for _, f := range run(h100, ModeRank, "").Findings {
		if process[f.Rule] {
			seen++
		}
	}
	require.Positive(t, seen, "rank mode judges the node as one process")
	for _, f := range run(h100, ModeNode, "").Findings {
		require.False(t, process[f.Rule], "node mode ran %s: %s", f.Rule, f.Message)
	}

	// Node-level rules still run: a pending MIG mode.
	pending := smiNode(t, "table_h100_mig-disabled-pending_535.104.12.txt")
	require.Equal(t, []string{"MIG_MODE_PENDING/warn"}, rules(run(pending, ModeNode, "")))
	require.Equal(t, "rank", RankRules(RankInput{Inventory: pending, Allocation: nodeAlloc}).Mode, "empty mode is rank mode")
}

// TestPathRules: a rank on several full GPUs whose inputs hold only
// `topo -m` gets P2P_UNKNOWN naming `topo -p2p rw`; NVLink for some pairs
// and SYS for others is LINK_PATHS_MIXED.
func TestPathRules(t *testing.T) {
	run := func(inv *topology.Inventory, mode Mode, refs ...string) verdict.Report {
		return RankRules(RankInput{Inventory: inv, Allocation: topology.Allocation{From: "--devices", Refs: refs}, Mode: mode})
	}
	// Three H100 NVL: GPU0-GPU1 NV12, GPU2 on the other socket (SYS).
	nvl := fixtureNode(t, sharedSMI+"15_topo_3xH100-NVL_NV12-pair-plus-SYS_nccl1608.txt")
	r := run(nvl, ModeRank, "0", "1", "2")
	require.Equal(t, []string{"LINK_PATHS_MIXED/warn", "P2P_UNKNOWN/warn"}, rules(r))
	for _, f := range r.Findings {
		switch f.Rule {
		case verdict.RuleLinkPathsMixed:
			require.Contains(t, f.Message, "GPU 0-GPU 1 NV12")
			require.Contains(t, f.Message, "GPU 0-GPU 2 SYS, GPU 1-GPU 2 SYS")
		case verdict.RuleP2PUnknown:
			require.Contains(t, f.Remediation, "`nvidia-smi topo -p2p rw`")
		}
	}
	require.Equal(t, []string{"P2P_UNKNOWN/warn"}, rules(run(nvl, ModeRank, "0", "1")), "the NVLink pair alone is not mixed")
	require.Empty(t, rules(run(nvl, ModeRank, "2")), "one GPU has no pairs")
	require.Empty(t, rules(run(nvl, ModeNode, "0", "1", "2")), "node mode: no rank to judge")

	// Four L40S on PCIe (NODE) and eight A100 on NVLink (NV12): one path
	// class each, so P2P_UNKNOWN only.
	l40s := fixtureNode(t, sharedSMI+"07_topo_g6e.12xlarge_4xL40S_pcie-NODE.txt")
	require.Equal(t, []string{"P2P_UNKNOWN/warn"}, rules(run(l40s, ModeRank, "0", "1", "2", "3")))
	p4d := fixtureNode(t, sharedSMI+"08_topo_p4d.24xlarge_8xA100_NV12.txt")
	require.Equal(t, []string{"P2P_UNKNOWN/warn"}, rules(run(p4d, ModeRank, "0", "7")))

	// With `topo -p2p rw` pasted, P2P is known: no P2P_UNKNOWN.
	sxm := smiNode(t, "session_8xh100-sxm_topo-m_p2p-rw.txt")
	for _, f := range run(sxm, ModeRank, "0", "1", "2", "3").Findings {
		require.NotEqual(t, verdict.RuleP2PUnknown, f.Rule, f.Message)
	}
}
