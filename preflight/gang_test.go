package preflight

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/rankgate/rankgate/verdict"
	"github.com/stretchr/testify/require"
)

func rank(i int, node, pod string, devs ...verdict.DeviceSummary) RankReport {
	return RankReport{Rank: i, Node: node, Pod: pod, DriverVersion: "580.65.06", CUDADriverVersion: "13.0",
		Report: verdict.Report{Verdict: verdict.VerdictPass, Findings: []verdict.Finding{}, Devices: devs}}
}

func full(gpu int, node string) verdict.DeviceSummary {
	return verdict.DeviceSummary{ID: fmt.Sprintf("GPU-%s-%d", node, gpu), Kind: "gpu", GPU: gpu, GPUUUID: fmt.Sprintf("GPU-%s-%d", node, gpu), Profile: "full", SMs: 132}
}

func migDev(gpuUUID string, i int, profile string, sms int) verdict.DeviceSummary {
	return verdict.DeviceSummary{ID: fmt.Sprintf("MIG-%s-%d", gpuUUID, i), Kind: "mig", GPUUUID: gpuUUID, Profile: profile, SMs: sms}
}

func TestGangRules(t *testing.T) {
	for _, tc := range []struct {
		name     string
		expected int
		ranks    []RankReport
		want     []string
		verdict  verdict.Verdict
	}{
		{"four full GPUs, one pod per node", 4, []RankReport{
			rank(0, "n1", "ml/j-0", full(0, "n1")), rank(1, "n2", "ml/j-1", full(0, "n2")),
			rank(2, "n3", "ml/j-2", full(0, "n3")), rank(3, "n4", "ml/j-3", full(0, "n4"))}, nil, verdict.VerdictPass},
		{"MIG ranks on one GPU", 2, []RankReport{
			rank(0, "n1", "ml/j-0", migDev("GPU-a", 0, "1g.35gb", 26)), rank(1, "n1", "ml/j-1", migDev("GPU-a", 1, "1g.35gb", 26))},
			[]string{"GANG_MIG_SHARED_GPU/info"}, verdict.VerdictPass},
		{"MIG ranks on two GPUs", 2, []RankReport{
			rank(0, "n1", "ml/j-0", migDev("GPU-a", 0, "3g.40gb", 60)), rank(1, "n1", "ml/j-1", migDev("GPU-b", 0, "3g.40gb", 60))},
			[]string{"GANG_MIG_SPANS_GPUS/fail"}, verdict.VerdictFail},
		{"MIG mixed with full", 2, []RankReport{
			rank(0, "n1", "ml/j-0", migDev("GPU-a", 0, "3g.40gb", 60)), rank(1, "n2", "ml/j-1", full(0, "n2"))},
			[]string{"GANG_MIG_MIXED_WITH_FULL/fail"}, verdict.VerdictFail},
		{"same memory different SMs", 2, []RankReport{
			rank(0, "n1", "ml/j-0", migDev("GPU-a", 0, "1g.20gb", 26)), rank(1, "n1", "ml/j-1", migDev("GPU-a", 1, "2g.20gb", 32))},
			[]string{"GANG_PROFILE_MISMATCH/fail", "GANG_MIG_SHARED_GPU/info"}, verdict.VerdictFail},
		{"missing ranks", 4, []RankReport{rank(0, "n1", "ml/j-0", full(0, "n1")), rank(2, "n2", "ml/j-2", full(0, "n2"))},
			[]string{"GANG_INCOMPLETE/fail"}, verdict.VerdictFail},
		{"split pods on one node", 2, []RankReport{rank(0, "n1", "ml/j-0", full(0, "n1")), rank(1, "n1", "ml/j-1", full(1, "n1"))},
			[]string{"GANG_SPLIT_PODS_SAME_NODE/warn"}, verdict.VerdictWarn},
		{"duplicate device", 2, []RankReport{rank(0, "n1", "ml/j-0", full(0, "n1")), rank(1, "n1", "ml/j-0", full(0, "n1"))},
			[]string{"GANG_DUPLICATE_DEVICE/fail"}, verdict.VerdictFail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := GangRules(GangInput{Job: "ml/j", Expected: tc.expected, Ranks: tc.ranks})
			if tc.want == nil {
				require.Empty(t, r.Findings)
			} else {
				require.ElementsMatch(t, tc.want, rules(r))
			}
			require.Equal(t, tc.verdict, r.Verdict)
		})
	}
}

func TestGangRankFailureAndDrivers(t *testing.T) {
	bad := rank(1, "n2", "ml/j-1", full(0, "n2"))
	bad.DriverVersion = "570.133.20"
	bad.Report = verdict.NewReport("", []verdict.Finding{{Rule: verdict.RuleNVLinkDown, Severity: verdict.SeverityFail, Message: "x"}})
	bad.Report.Devices = []verdict.DeviceSummary{full(0, "n2")}
	r := GangRules(GangInput{Job: "ml/j", Expected: 2, Ranks: []RankReport{rank(0, "n1", "ml/j-0", full(0, "n1")), bad}})
	require.ElementsMatch(t, []string{"RANK_PREFLIGHT_FAILED/fail", "GANG_DRIVER_MISMATCH/warn"}, rules(r))
	require.Contains(t, r.Findings[0].Message, "NVLINK_DOWN")
	require.Equal(t, "GANG_INCOMPLETE", GangRules(GangInput{Expected: 3}).Findings[0].Rule)
	require.Equal(t, "0-3,5,7-8", intList([]int{8, 0, 1, 2, 3, 5, 7, 3}))
}

func TestGangMissingRanks(t *testing.T) {
	in := GangInput{Job: "ml/j", Expected: 3, Ranks: []RankReport{rank(0, "n1", "ml/j-0", full(0, "n1"))},
		Missing: map[int]MissingRank{
			1: {Pod: "j-worker-0", Node: "n2", State: "Running, init container rankgate has not reported"},
			2: {Pod: "j-worker-1", State: "Pending, unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."},
		}}
	r := GangRules(in)
	require.Equal(t, []string{"GANG_INCOMPLETE/fail"}, rules(r))
	f := r.Findings[0]
	require.Equal(t, []int{1, 2}, f.Ranks)
	require.Equal(t, []string{"j-worker-0", "j-worker-1"}, f.Pods)
	require.Contains(t, f.Message, "rank 1 (pod j-worker-0 on n2): Running")
	require.Contains(t, f.Message, "rank 2 (pod j-worker-1): Pending, unschedulable: 0/3 nodes")

	// An early decision: the rank that can never be placed fails the gang
	// before the deadline, without GANG_INCOMPLETE.
	in.Expected = 0
	in.Missing = map[int]MissingRank{2: {Pod: "j-worker-1", State: "no node advertises nvidia.com/mig-3g.40gb", Unplaceable: true}}
	r = GangRules(in)
	require.Equal(t, []string{"GANG_RANK_UNPLACEABLE/fail"}, rules(r))
	require.Equal(t, []int{2}, r.Findings[0].Ranks)
	require.Contains(t, r.Findings[0].Message, "no node advertises")
}

// A gang of 5000 ranks with one reported: the finding lists the first
// MaxListedRanks missing ranks and counts the others, so the verdict stays
// small (it used to grow past a client's 1 MiB limit).
func TestGangThousandsMissing(t *testing.T) {
	missing := map[int]MissingRank{}
	for i := 1; i < 5000; i++ {
		missing[i] = MissingRank{Pod: fmt.Sprintf("train-worker-%d", i), Node: fmt.Sprintf("gpu-node-%04d", i),
			State: "Pending, unschedulable: 0/5000 nodes are available: 5000 Insufficient nvidia.com/gpu.", Unplaceable: i%2 == 0}
	}
	r := GangRules(GangInput{Job: "ml/PyTorchJob/big", Expected: 5000, Ranks: []RankReport{rank(0, "n0", "train-worker-0", full(0, "n0"))}, Missing: missing})
	require.Equal(t, verdict.VerdictFail, r.Verdict)
	b, err := json.Marshal(r)
	require.NoError(t, err)
	require.Less(t, len(b), 16<<10, "verdict of %d bytes", len(b))
	for _, f := range r.Findings {
		require.LessOrEqual(t, len(f.Ranks), MaxListedRanks, f.Rule)
		require.LessOrEqual(t, len(f.Pods), MaxListedRanks, f.Rule)
	}
	require.Equal(t, verdict.RuleGangIncomplete, r.Findings[0].Rule)
	require.Contains(t, r.Findings[0].Message, "1 of 5000 ranks reported; missing ranks 1-20 and 4979 more (4999 in all); rank 1 (pod train-worker-1 on gpu-node-0001)")
	require.Contains(t, r.Findings[1].Message, "ranks 2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32,34,36,38,40 and 2479 more (2499 in all) can never be placed")
}

// A rank judged from its DRA allocation is named so, with a fix about
// its claims, not its init container.
func TestGangRankFailedFromAllocation(t *testing.T) {
	bad := verdict.NewReport("", []verdict.Finding{{Rule: verdict.RuleMIGSpansGPUs, Severity: verdict.SeverityFail}})
	rep := GangRules(GangInput{Job: "ns/j", Expected: 1, Ranks: []RankReport{{Rank: 0, Pod: "p", Node: "n", Source: SourceDRA, Report: bad}}})
	require.Equal(t, []string{verdict.RuleRankFailed}, rep.RuleIDs())
	require.Equal(t, "rank 0 (pod p on n), judged from the devices its ResourceClaims were allocated, fails the rank rules: MIG_SPANS_GPUS", rep.Findings[0].Message)
	require.Contains(t, rep.Findings[0].Remediation, "ResourceClaims")
}
