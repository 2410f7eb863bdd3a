package schedule

import (
	"strings"
	"testing"

	"github.com/rankgate/rankgate/verdict"
	"github.com/stretchr/testify/require"
)

type want struct {
	rule     string
	hopeless bool
	// findings: rule -> severity that must be present.
	findings map[string]verdict.Severity
	// absent rules.
	absent []string
	// contains: substrings of the text of the finding with that rule.
	contains map[string][]string
}

func TestDiagnoseRules(t *testing.T) {
	all1g10 := map[string]int{"1g.10gb": 7}
	tests := []struct {
		name  string
		nodes []Node
		job   Workload
		want  want
	}{
		{
			name:  "SCHEDULABLE one pod with full GPUs",
			nodes: nodes(full("gpu-1", "A100-80GB", a100Product, 8, StrategyMixed)),
			job:   pytorchJob("train", podSet("Master", 1, gpus(8))),
			want: want{rule: verdict.RuleSchedulable, findings: map[string]verdict.Severity{verdict.RuleSchedulable: verdict.SeverityInfo},
				absent:   []string{verdict.RuleMIGMultiPod},
				contains: map[string][]string{verdict.RuleSchedulable: {"gpu-1 x1"}}},
		},
		{
			name: "SCHEDULABLE multi-pod MIG job warns MIG_MULTI_POD",
			nodes: nodes(
				migMixed("a100-1", "A100-80GB", a100Product, 1, "all-1g.10gb", all1g10),
				migMixed("a100-2", "A100-80GB", a100Product, 1, "all-1g.10gb", all1g10)),
			job: pytorchJob("train", podSet("Master", 1, mig("1g.10gb", 1)), podSet("Worker", 9, mig("1g.10gb", 1))),
			want: want{rule: verdict.RuleSchedulable, findings: map[string]verdict.Severity{
				verdict.RuleSchedulable: verdict.SeverityInfo, verdict.RuleMIGMultiPod: verdict.SeverityWarn},
				contains: map[string][]string{verdict.RuleMIGMultiPod: {"10 GPU pods on MIG instances", "NET"}}},
		},
		{
			name: "WAIT_CAPACITY says where the devices are busy",
			nodes: nodes(
				migMixed("a100-1", "A100-80GB", a100Product, 1, "all-1g.10gb", all1g10).use(MIGPrefix+"1g.10gb", 7),
				migMixed("a100-2", "A100-80GB", a100Product, 1, "all-1g.10gb", all1g10).use(MIGPrefix+"1g.10gb", 5)),
			job: pytorchJob("train", podSet("Worker", 4, mig("1g.10gb", 1))),
			want: want{rule: verdict.RuleWaitCapacity, findings: map[string]verdict.Severity{verdict.RuleWaitCapacity: verdict.SeverityWarn},
				contains: map[string][]string{verdict.RuleWaitCapacity: {"2 of 4 pending pods fit now", "a100-1 (7/7 nvidia.com/mig-1g.10gb in use)", "nvidia.com/mig-1g.10gb 2 free of 14"}}},
		},
		{
			name: "SHAPE_MISMATCH A100 2g.20gb vs 1g.20gb: same memory, half the SMs; RECONFIGURABLE names the layout",
			nodes: nodes(
				migMixed("a100-1", "A100-80GB", a100Product, 2, "custom-1g20", map[string]int{"1g.20gb": 4})),
			job: pytorchJob("train", podSet("Worker", 2, mig("2g.20gb", 1))),
			want: want{rule: verdict.RuleShapeMismatch, hopeless: true, findings: map[string]verdict.Severity{
				verdict.RuleShapeMismatch: verdict.SeverityFail, verdict.RuleReconfigurable: verdict.SeverityInfo},
				contains: map[string][]string{
					verdict.RuleShapeMismatch:  {"nvidia.com/mig-2g.20gb (28 SMs, 19968 MiB on A100-80GB)", "nvidia.com/mig-1g.20gb (14 SMs, 19968 MiB: same memory, 14 instead of 28 SMs"},
					verdict.RuleReconfigurable: {"a100-1", "nvidia.com/mig.config=all-2g.20gb", `{"2g.20gb": 3}`, "6 instances in all; the job needs 2", "drain"},
				}},
		},
		{
			name: "SHAPE_MISMATCH A100 2g.20gb on mig-parted's all-1g.20gb: RECONFIGURABLE names the layout",
			nodes: nodes(
				migMixed("a100-1", "A100-80GB", a100Product, 8, "all-1g.20gb", map[string]int{"1g.20gb": 4}),
				migMixed("a100-2", "A100-80GB", a100Product, 8, "all-1g.20gb", map[string]int{"1g.20gb": 4})),
			job: pytorchJob("train", podSet("Master", 1, mig("2g.20gb", 1)), podSet("Worker", 1, mig("2g.20gb", 1))),
			want: want{rule: verdict.RuleShapeMismatch, hopeless: true, findings: map[string]verdict.Severity{
				verdict.RuleShapeMismatch: verdict.SeverityFail, verdict.RuleReconfigurable: verdict.SeverityInfo},
				contains: map[string][]string{
					verdict.RuleReconfigurable: {"a100-1", "a100-2", "mig.config=all-1g.20gb", "nvidia.com/mig.config=all-2g.20gb", `{"2g.20gb": 3}`, "48 instances in all; the job needs 2"},
				}},
		},
		{
			name: "SHAPE_MISMATCH H100 1g.20gb (26 SMs) vs 2g.20gb (32 SMs)",
			nodes: nodes(
				migMixed("h100-1", "H100-80GB", h100Product, 1, "all-2g.20gb", map[string]int{"2g.20gb": 3})),
			job: pytorchJob("train", podSet("Worker", 1, mig("1g.20gb", 1))),
			want: want{rule: verdict.RuleShapeMismatch, hopeless: true,
				contains: map[string][]string{verdict.RuleShapeMismatch: {"26 SMs, 20096 MiB on H100-80GB", "nvidia.com/mig-2g.20gb (32 SMs, 20096 MiB: same memory, 32 instead of 26 SMs"}}},
		},
		{
			name:  "SHAPE_MISMATCH no GPU nodes at all",
			nodes: nodes(node("cpu-1")),
			job:   pytorchJob("train", podSet("Worker", 2, gpus(1))),
			want: want{rule: verdict.RuleShapeMismatch, hopeless: true,
				contains: map[string][]string{verdict.RuleShapeMismatch: {"offers no NVIDIA GPU resource at all"}}},
		},
		{
			name:  "SHAPE_MISMATCH pod larger than any node",
			nodes: nodes(full("gpu-1", "H100-80GB", h100Product, 8, StrategyNone), full("gpu-2", "H100-80GB", h100Product, 8, StrategyNone)),
			job:   pytorchJob("train", podSet("Worker", 1, gpus(16))),
			want: want{rule: verdict.RuleShapeMismatch, hopeless: true,
				contains: map[string][]string{verdict.RuleShapeMismatch: {"nvidia.com/gpu 8 (gpu-1)", "no node offers all of it in one node"}}},
		},
		{
			name:  "SHAPE_MISMATCH unknown non-GPU resource",
			nodes: nodes(full("gpu-1", "H100-80GB", h100Product, 8, StrategyNone)),
			job:   pytorchJob("train", podSet("Worker", 1, Resources{ResourceGPU: 8, "rdma/ib0": 1})),
			want: want{rule: verdict.RuleShapeMismatch, hopeless: true,
				contains: map[string][]string{verdict.RuleShapeMismatch: {"no node offers rdma/ib0 at all"}}},
		},
		{
			name:  "STRATEGY_MISMATCH asks mig-1g.10gb, nodes run single",
			nodes: nodes(single("a100-s1", "A100-80GB", a100Product, 1, "1g.10gb")),
			job:   pytorchJob("train", podSet("Worker", 1, mig("1g.10gb", 1))),
			want: want{rule: verdict.RuleStrategyMismatch, hopeless: true,
				absent:   []string{verdict.RuleShapeMismatch},
				contains: map[string][]string{verdict.RuleStrategyMismatch: {"mig.strategy=single", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "nodeSelector nvidia.com/gpu.product"}}},
		},
		{
			name:  "STRATEGY_MISMATCH asks nvidia.com/gpu, nodes run mixed fully partitioned",
			nodes: nodes(migMixed("h100-1", "H100-80GB", h100Product, 1, "all-balanced", map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1})),
			job:   pytorchJob("train", podSet("Worker", 1, gpus(1))),
			want: want{rule: verdict.RuleStrategyMismatch, hopeless: true,
				contains: map[string][]string{verdict.RuleStrategyMismatch: {"mig.strategy=mixed", "nvidia.com/mig-1g.10gb, nvidia.com/mig-2g.20gb, nvidia.com/mig-3g.40gb", "all-disabled"}}},
		},
		{
			name: "STRATEGY_MISMATCH warns when nvidia.com/gpu is a full GPU on some nodes and a MIG instance on others",
			nodes: nodes(
				full("full-1", "A100-80GB", a100Product, 8, StrategySingle),
				single("single-1", "A100-80GB", a100Product, 1, "1g.10gb")),
			job: pytorchJob("train", podSet("Worker", 2, gpus(1))),
			want: want{rule: verdict.RuleSchedulable, findings: map[string]verdict.Severity{
				verdict.RuleStrategyMismatch: verdict.SeverityWarn, verdict.RuleMIGMultiPod: verdict.SeverityWarn},
				contains: map[string][]string{verdict.RuleStrategyMismatch: {"a MIG 1g.10gb on node single-1", "a full GPU on node full-1"}}},
		},
		{
			name: "MIG_LAYOUT_INVALID single strategy product MIG-INVALID",
			nodes: nodes(
				gpuNode("a100-bad", "A100-40GB", "NVIDIA-A100-SXM4-40GB-MIG-INVALID", 0).
					label(LabelMIGStrategy, StrategySingle).migState("all-1g.5gb", MIGStateSuccess).alloc(ResourceGPU, 0)),
			job: pytorchJob("train", podSet("Worker", 1, gpus(1))),
			want: want{rule: verdict.RuleMIGLayoutInvalid, hopeless: true,
				contains: map[string][]string{verdict.RuleMIGLayoutInvalid: {"a100-bad", "MIG-INVALID"}}},
		},
		{
			name: "MIG_LAYOUT_INVALID layout applied but zero MIG resources",
			nodes: nodes(
				gpuNode("a100-z", "A100-80GB", a100Product, 1).label(LabelMIGStrategy, StrategyMixed).
					migState("all-1g.10gb", MIGStateSuccess).alloc(MIGPrefix+"1g.10gb", 0)),
			job: pytorchJob("train", podSet("Worker", 1, mig("1g.10gb", 1))),
			want: want{rule: verdict.RuleMIGLayoutInvalid, hopeless: true,
				contains: map[string][]string{verdict.RuleMIGLayoutInvalid: {"mig.config=all-1g.10gb applied (state success) but the node advertises nvidia.com/mig-1g.10gb 0"}}},
		},
		{
			name: "MIG_LAYOUT_INVALID warns when a node advertises fewer instances than its layout (gpu-operator#693)",
			nodes: nodes(
				migMixed("aks-a100", "A100-80GB", a100Product, 1, "all-1g.10gb", map[string]int{"1g.10gb": 1}).use(MIGPrefix+"1g.10gb", 1)),
			job: pytorchJob("train", podSet("Worker", 1, mig("1g.10gb", 1))),
			want: want{rule: verdict.RuleWaitCapacity, findings: map[string]verdict.Severity{
				verdict.RuleMIGLayoutInvalid: verdict.SeverityWarn, verdict.RuleWaitCapacity: verdict.SeverityWarn},
				contains: map[string][]string{verdict.RuleMIGLayoutInvalid: {"aks-a100 advertises 1, mig.config=all-1g.10gb gives 7 per GPU x 1 GPU = 7"}}},
		},
		{
			name: "MIG_RECONFIG_PENDING the layout that creates the shape is being applied",
			nodes: nodes(
				migMixed("a100-1", "A100-80GB", a100Product, 2, "all-1g.10gb", all1g10).
					migState("all-2g.20gb", MIGStatePending).label("nvidia.com/gpu.deploy.device-plugin", PausedForMIGChange)),
			job: pytorchJob("train", podSet("Worker", 1, mig("2g.20gb", 1))),
			want: want{rule: verdict.RuleMIGReconfigPending, findings: map[string]verdict.Severity{verdict.RuleMIGReconfigPending: verdict.SeverityWarn},
				absent:   []string{verdict.RuleShapeMismatch, verdict.RuleGangTooLarge},
				contains: map[string][]string{verdict.RuleMIGReconfigPending: {"The new layout offers nvidia.com/mig-2g.20gb", "mig.config=all-2g.20gb, mig.config.state=pending"}}},
		},
		{
			name: "MIG_RECONFIG_PENDING still checks the gang against the layout being applied",
			nodes: nodes(
				migMixed("a100-1", "A100-80GB", a100Product, 1, "all-1g.10gb", all1g10).migState("all-2g.20gb", MIGStateRebooting)),
			job: pytorchJob("train", podSet("Worker", 4, mig("2g.20gb", 1))),
			want: want{rule: verdict.RuleGangTooLarge, hopeless: true, findings: map[string]verdict.Severity{verdict.RuleMIGReconfigPending: verdict.SeverityWarn},
				contains: map[string][]string{verdict.RuleGangTooLarge: {"at most 3 of its 4 pods"}}},
		},
		{
			name: "SHAPE_MISMATCH when mig-manager is taking the shape away",
			nodes: nodes(
				migMixed("a100-1", "A100-80GB", a100Product, 1, "all-1g.10gb", all1g10).migState("all-3g.40gb", MIGStatePending)),
			job: pytorchJob("train", podSet("Worker", 1, mig("1g.10gb", 1))),
			want: want{rule: verdict.RuleShapeMismatch, hopeless: true, absent: []string{verdict.RuleMIGReconfigPending},
				contains: map[string][]string{verdict.RuleShapeMismatch: {"being changed by mig-manager to a layout without it (mig.config=all-3g.40gb"}}},
		},
		{
			name: "MIG_RECONFIG_FAILED",
			nodes: nodes(
				migMixed("a100-1", "A100-80GB", a100Product, 1, "all-1g.10gb", all1g10).migState("all-3g.40gb", MIGStateFailed)),
			job: pytorchJob("train", podSet("Worker", 1, mig("3g.40gb", 1))),
			want: want{rule: verdict.RuleMIGReconfigFailed, hopeless: true,
				contains: map[string][]string{verdict.RuleMIGReconfigFailed: {"a100-1", "state=failed", "nvidia.com/mig-3g.40gb"}}},
		},
		{
			name: "DRIVER_KNOWN_BAD only nodes that fit mix MIG and full GPUs on 570.133.20",
			nodes: nodes(
				migMixed("mixed-1", "A100-80GB", a100Product, 8, "custom-half", map[string]int{"1g.10gb": 7}).
					alloc(ResourceGPU, 4).driver("570.133.20")),
			job: pytorchJob("train", podSet("Worker", 1, gpus(1))),
			want: want{rule: verdict.RuleDriverKnownBad, hopeless: true,
				contains: map[string][]string{verdict.RuleDriverKnownBad: {"570.133.20", "MIG instances and full GPUs on one node", "570.172.08"}}},
		},
		{
			name: "DRIVER_KNOWN_BAD warns and leaves bad nodes out when others fit",
			nodes: nodes(
				migMixed("mixed-1", "A100-80GB", a100Product, 8, "custom-half", map[string]int{"1g.10gb": 7}).
					alloc(ResourceGPU, 4).driver("570.133.20"),
				full("full-1", "A100-80GB", a100Product, 8, StrategyMixed)),
			job: pytorchJob("train", podSet("Worker", 1, gpus(2))),
			want: want{rule: verdict.RuleSchedulable, findings: map[string]verdict.Severity{verdict.RuleDriverKnownBad: verdict.SeverityWarn},
				contains: map[string][]string{verdict.RuleSchedulable: {"full-1 x1"}, verdict.RuleDriverKnownBad: {"left out of the placement"}}},
		},
		{
			name: "GANG_TOO_LARGE",
			nodes: nodes(
				migMixed("a100-1", "A100-80GB", a100Product, 1, "all-1g.10gb", all1g10),
				migMixed("a100-2", "A100-80GB", a100Product, 1, "all-1g.10gb", all1g10)),
			job: pytorchJob("train", podSet("Master", 1, mig("1g.10gb", 1)), podSet("Worker", 19, mig("1g.10gb", 1))),
			want: want{rule: verdict.RuleGangTooLarge, hopeless: true,
				contains: map[string][]string{verdict.RuleGangTooLarge: {"at most 14 of its 20 pods", "nvidia.com/mig-1g.10gb 14 allocatable in all, the job needs 20"}}},
		},
		{
			name: "NODE_CONSTRAINTS taint, cordon and selector",
			nodes: nodes(
				full("gpu-1", "H100-80GB", h100Product, 8, StrategyNone).taint("nvidia.com/gpu", "present", "NoSchedule").label("pool", "train"),
				full("gpu-2", "H100-80GB", h100Product, 8, StrategyNone).cordon().label("pool", "train"),
				full("gpu-3", "H100-80GB", h100Product, 8, StrategyNone).label("pool", "infer")),
			job: func() Workload {
				ps := podSet("Worker", 1, gpus(8))
				ps.Constraints.NodeSelector = map[string]string{"pool": "train"}
				return pytorchJob("train", ps)
			}(),
			// gpu-2 is only cordoned: the job waits for it.
			want: want{rule: verdict.RuleNodeConstraints, findings: map[string]verdict.Severity{verdict.RuleNodeConstraints: verdict.SeverityWarn},
				contains: map[string][]string{verdict.RuleNodeConstraints: {
					"3 nodes offer that", "Cordoned or unhealthy nodes come back (gpu-2): the job waits for them", "taint not tolerated: nvidia.com/gpu=present:NoSchedule: 1 node (gpu-1)", "cordoned", "nodeSelector does not match: pool=train: 1 node (gpu-3)",
					"tolerate the taint nvidia.com/gpu=present:NoSchedule", "those nodes have pool=infer"}}},
		},
		{
			name: "NODE_CONSTRAINTS a condition taint asks to fix the node, not to tolerate it",
			nodes: nodes(
				full("gpu-1", "H100-80GB", h100Product, 8, StrategyNone).taint("node.kubernetes.io/not-ready", "", "NoSchedule")),
			job: pytorchJob("train", podSet("Worker", 1, gpus(8))),
			want: want{rule: verdict.RuleNodeConstraints, findings: map[string]verdict.Severity{verdict.RuleNodeConstraints: verdict.SeverityWarn},
				contains: map[string][]string{verdict.RuleNodeConstraints: {"because of the node's condition: fix the node", "the job waits for them"}}},
		},
		{
			name: "NODE_CONSTRAINTS cordoned nodes alone: the job waits, and must still fit them",
			nodes: nodes(
				full("gpu-1", "H100-80GB", h100Product, 8, StrategyNone).cordon(),
				full("gpu-2", "H100-80GB", h100Product, 8, StrategyNone).cordon()),
			job:  pytorchJob("train", podSet("Worker", 3, gpus(8))),
			want: want{rule: verdict.RuleGangTooLarge, hopeless: true, findings: map[string]verdict.Severity{verdict.RuleNodeConstraints: verdict.SeverityWarn}},
		},
		{
			name: "tolerated taint admits the node",
			nodes: nodes(
				full("gpu-1", "H100-80GB", h100Product, 8, StrategyNone).taint("nvidia.com/gpu", "present", "NoSchedule")),
			job: func() Workload {
				ps := podSet("Worker", 1, gpus(8))
				ps.Constraints.Tolerations = []Toleration{{Key: "nvidia.com/gpu", Operator: "Exists"}}
				return pytorchJob("train", ps)
			}(),
			want: want{rule: verdict.RuleSchedulable},
		},
		{
			name: "mixed-strategy node with full GPUs and MIG on a good driver serves both",
			nodes: nodes(
				migMixed("mixed-1", "A100-80GB", a100Product, 8, "custom-half", map[string]int{"1g.10gb": 7}).alloc(ResourceGPU, 4).driver("570.172.08")),
			job:  pytorchJob("train", podSet("Worker", 1, Resources{ResourceGPU: 4})),
			want: want{rule: verdict.RuleSchedulable, absent: []string{verdict.RuleDriverKnownBad, verdict.RuleStrategyMismatch}},
		},
		{
			name:  "stale zero MIG resources on a MIG-disabled node (kai#1120)",
			nodes: nodes(full("rtx-1", "A100-80GB", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", 8, StrategyMixed).alloc(MIGPrefix+"1g.24gb", 0).alloc(MIGPrefix+"2g.48gb", 0)),
			job:   pytorchJob("train", podSet("Worker", 1, mig("1g.24gb", 1))),
			want: want{rule: verdict.RuleShapeMismatch, hopeless: true, absent: []string{verdict.RuleMIGLayoutInvalid},
				contains: map[string][]string{verdict.RuleShapeMismatch: {"rtx-1 lists nvidia.com/mig-1g.24gb: 0, a stale resource", "1g.24gb (46 SMs, 24187 MiB on RTX-PRO-6000-Blackwell-96GB)"}}},
		},
		{
			name:  "a profile of another GPU model whose memory no public source gives",
			nodes: nodes(full("rtx-1", "A100-80GB", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", 8, StrategyMixed)),
			job:   pytorchJob("train", podSet("Worker", 1, mig("3g.135gb", 1))),
			want: want{rule: verdict.RuleShapeMismatch, hopeless: true,
				contains: map[string][]string{verdict.RuleShapeMismatch: {"3g.135gb (SMs unknown: no public source, memory unknown on B300-269GB; no GPU model in this cluster has that profile)"}}},
		},
	}
	e := New()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := e.NewCluster(tc.nodes)
			require.Empty(t, c.LabelErrors)
			res := e.Diagnose(c, tc.job)
			text := reportText(res.Report)
			t.Log(text)
			require.Equal(t, tc.want.rule, res.Rule, text)
			require.Equal(t, tc.want.hopeless, res.Hopeless, text)
			if tc.want.hopeless {
				require.Equal(t, verdict.ExitFail, res.ExitCode())
			} else {
				require.Equal(t, verdict.ExitPass, res.ExitCode())
			}
			for rule, sev := range tc.want.findings {
				f, ok := findRule(res.Report, rule, sev)
				require.True(t, ok, "want %s %s in\n%s", sev, rule, text)
				require.NotEmpty(t, f.Message)
			}
			for _, rule := range tc.want.absent {
				_, ok := findRule(res.Report, rule, "")
				require.False(t, ok, "unexpected %s in\n%s", rule, text)
			}
			for rule, subs := range tc.want.contains {
				f, ok := findRule(res.Report, rule, "")
				require.True(t, ok, "want %s in\n%s", rule, text)
				for _, s := range subs {
					require.Contains(t, f.Message+" "+f.Remediation, s)
				}
			}
		})
	}
}

func findRule(r verdict.Report, rule string, sev verdict.Severity) (verdict.Finding, bool) {
	for _, f := range r.Findings {
		if f.Rule == rule && (sev == "" || f.Severity == sev) {
			return f, true
		}
	}
	return verdict.Finding{}, false
}

func reportText(r verdict.Report) string {
	var b strings.Builder
	b.WriteString(string(r.Verdict) + " " + r.Subject + "\n")
	for _, f := range r.Findings {
		b.WriteString("  " + string(f.Severity) + " " + f.Rule + ": " + f.Message + "\n    fix: " + f.Remediation + "\n")
	}
	return b.String()
}

func TestDiagnoseCountsBoundPods(t *testing.T) {
	e := New()
	// Two of four workers already run on a100-1 (their devices are in
	// Used); the two pending ones fit in the free instances of a100-2.
	c := e.NewCluster(nodes(
		migMixed("a100-1", "A100-80GB", a100Product, 1, "all-1g.10gb", map[string]int{"1g.10gb": 7}).use(MIGPrefix+"1g.10gb", 7),
		migMixed("a100-2", "A100-80GB", a100Product, 1, "all-1g.10gb", map[string]int{"1g.10gb": 7}).use(MIGPrefix+"1g.10gb", 5)))
	ps := podSet("Worker", 4, mig("1g.10gb", 1))
	ps.Bound = 2
	res := e.Diagnose(c, pytorchJob("train", ps))
	require.Equal(t, verdict.RuleSchedulable, res.Rule, reportText(res.Report))
	require.Equal(t, []Assignment{{PodSet: "Worker (4 pods)", Node: "a100-2", Pods: 2}}, res.Placement)
}

func TestDiagnoseMergesEqualPodSets(t *testing.T) {
	// Master and Worker ask the same: one class, packed exactly.
	e := New()
	c := e.NewCluster(nodes(full("gpu-1", "H100-80GB", h100Product, 8, StrategyNone)))
	res := e.Diagnose(c, pytorchJob("train", podSet("Master", 1, gpus(4)), podSet("Worker", 1, gpus(4))))
	require.Equal(t, verdict.RuleSchedulable, res.Rule, reportText(res.Report))
	require.Len(t, res.Placement, 1)
	require.Equal(t, 2, res.Placement[0].Pods)
}

func TestDiagnoseSchedulerDisagrees(t *testing.T) {
	// kai-scheduler#1876: the shape exists and is free, the scheduler says
	// "No node in the default node-pool has nvidia.com/mig-1g.5gb".
	e := New()
	c := e.NewCluster(nodes(migMixed("r7525-1", "A100-40GB", "NVIDIA-A100-PCIE-40GB", 2, "all-1g.5gb", map[string]int{"1g.5gb": 7})))
	ps := podSet("qwen3-embedding-0-vllmdecodeworker-4p8dk", 1, mig("1g.5gb", 1))
	ps.SchedulerMessage = "Unable to schedule podgroup: 2 Resources were not found for pod dynamo/qwen3-embedding-0-vllmdecodeworker-4p8dk due to: ... No node in the default node-pool has nvidia.com/mig-1g.5gb resources."
	res := e.Diagnose(c, Workload{Kind: "Pod", Namespace: "dynamo", Name: ps.Name, PodSets: []PodSet{ps}})
	require.Equal(t, verdict.RuleSchedulable, res.Rule)
	f, _ := findRule(res.Report, verdict.RuleSchedulable, "")
	require.Contains(t, f.Message, "Yet the scheduler said")
	require.Contains(t, f.Remediation, "counts MIG resources wrongly")
}

func TestPackTriesClassOrders(t *testing.T) {
	// Node A: 4 GPUs 8 cpu; node B: 8 GPUs 2 cpu. Class X wants 4 GPUs + 1
	// cpu (fits A or B); class Y wants 1 GPU + 6 cpu (fits only A). Largest
	// first puts X on A and strands Y; another order fits both.
	classes := []class{
		{need: 1, req: []int64{4, 1}, nodes: []int32{0, 1}},
		{need: 1, req: []int64{1, 6}, nodes: []int32{0}},
	}
	caps := [][]int64{{4, 8}, {8, 2}}
	p, ok := pack(classes, 2, 2, func(n int32, k int) int64 { return caps[n][k] })
	require.True(t, ok)
	require.Equal(t, []int{1, 1}, p.placed)
}

func TestEmptyWorkload(t *testing.T) {
	e := New()
	res := e.Diagnose(e.NewCluster(nil), pytorchJob("none"))
	require.Equal(t, verdict.RuleSchedulable, res.Rule)
}

// One prepared cluster serves concurrent judgements (the controller's
// use); run with -race.
func TestDiagnoseConcurrent(t *testing.T) {
	e := New()
	c := e.NewCluster(benchFleet(300, 10))
	jobs := benchJobs()
	done := make(chan string)
	for i := 0; i < 8; i++ {
		go func(i int) {
			name := []string{"mig-1000x1", "gpu-125x8", "shape-2g.35gb"}[i%3]
			done <- e.Diagnose(c, jobs[name]).Rule
		}(i)
	}
	for i := 0; i < 8; i++ {
		require.NotEmpty(t, <-done)
	}
}
