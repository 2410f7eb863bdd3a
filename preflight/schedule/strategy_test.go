package schedule

import (
	"testing"

	"github.com/rankgate/rankgate/verdict"
	"github.com/stretchr/testify/require"
)

// Under mig.strategy=single the device plugin advertises MIG instances as
// nvidia.com/gpu (product <GPU>-MIG-<profile>), never as
// nvidia.com/mig-<profile>: a fix that proposes a layout must also say
// which strategy serves the pod, and a pending layout that will serve the
// pod as nvidia.com/gpu makes it wait, not fail.
func TestDiagnoseStrategySemantics(t *testing.T) {
	// Fixture 23 (NVIDIA cloud-native docs): H100, mig.strategy=single,
	// mig.config=all-disabled, one full GPU.
	h100Single := func(name string) *nodeBuilder {
		return full(name, "H100-80GB", h100Product, 1, StrategySingle)
	}
	tests := []struct {
		name  string
		nodes []Node
		job   Workload
		want  want
	}{
		{
			name:  "STRATEGY_MISMATCH mig profile asked on a single-strategy node with MIG disabled (fixture 23)",
			nodes: nodes(h100Single("s4124-0073")),
			job:   pytorchJob("train", podSet("Worker", 1, mig("1g.10gb", 1))),
			want: want{rule: verdict.RuleStrategyMismatch, hopeless: true,
				absent: []string{verdict.RuleShapeMismatch, verdict.RuleReconfigurable},
				contains: map[string][]string{verdict.RuleStrategyMismatch: {
					"mig.strategy=single", "s4124-0073",
					"nvidia.com/mig.config=all-1g.10gb", "nodeSelector nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
					"mig.strategy=mixed", `{"spec":{"mig":{"strategy":"mixed"}}}`}}},
		},
		{
			name:  "STRATEGY_MISMATCH mig profile other than the one a single-strategy node advertises",
			nodes: nodes(single("a100-s1", "A100-80GB", a100Product, 2, "1g.10gb")),
			job:   pytorchJob("train", podSet("Worker", 2, mig("2g.20gb", 1))),
			want: want{rule: verdict.RuleStrategyMismatch, hopeless: true,
				absent: []string{verdict.RuleShapeMismatch, verdict.RuleReconfigurable},
				contains: map[string][]string{verdict.RuleStrategyMismatch: {
					"a100-s1", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
					"nvidia.com/mig.config=all-2g.20gb", "nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB-MIG-2g.20gb", "mig.strategy=mixed"}}},
		},
		{
			name: "STRATEGY_MISMATCH a single-strategy node being changed to the asked profile will still advertise nvidia.com/gpu",
			nodes: nodes(h100Single("h100-1").migState("all-1g.10gb", MIGStatePending).
				label("nvidia.com/gpu.deploy.device-plugin", PausedForMIGChange).alloc(ResourceGPU, 0)),
			job: pytorchJob("train", podSet("Worker", 1, mig("1g.10gb", 1))),
			want: want{rule: verdict.RuleStrategyMismatch, hopeless: true,
				absent:   []string{verdict.RuleMIGReconfigPending, verdict.RuleShapeMismatch},
				contains: map[string][]string{verdict.RuleStrategyMismatch: {"h100-1", "mig.strategy=single", "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}}},
		},
		{
			name: "MIG_RECONFIG_PENDING nvidia.com/gpu served by the MIG slices a single-strategy node is getting",
			nodes: nodes(h100Single("h100-1").migState("all-1g.10gb", MIGStatePending).
				label("nvidia.com/gpu.deploy.device-plugin", PausedForMIGChange).alloc(ResourceGPU, 0)),
			job: pytorchJob("infer", podSet("Worker", 3, gpus(1))),
			want: want{rule: verdict.RuleMIGReconfigPending, findings: map[string]verdict.Severity{verdict.RuleMIGReconfigPending: verdict.SeverityWarn},
				absent:   []string{verdict.RuleShapeMismatch, verdict.RuleStrategyMismatch, verdict.RuleGangTooLarge},
				contains: map[string][]string{verdict.RuleMIGReconfigPending: {"h100-1", "The new layout offers nvidia.com/gpu", "mig.config=all-1g.10gb, mig.config.state=pending"}}},
		},
		{
			name:  "MIG_RECONFIG_PENDING checks the gang against the instances the single layout gives",
			nodes: nodes(h100Single("h100-1").migState("all-1g.10gb", MIGStateRebooting).alloc(ResourceGPU, 0)),
			job:   pytorchJob("infer", podSet("Worker", 8, gpus(1))),
			want: want{rule: verdict.RuleGangTooLarge, hopeless: true, findings: map[string]verdict.Severity{verdict.RuleMIGReconfigPending: verdict.SeverityWarn},
				contains: map[string][]string{verdict.RuleGangTooLarge: {"at most 7 of its 8 pods"}}},
		},
		{
			name: "a mixed-strategy node being changed to a MIG layout does not serve nvidia.com/gpu",
			nodes: nodes(full("h100-1", "H100-80GB", h100Product, 1, StrategyMixed).migState("all-1g.10gb", MIGStatePending).
				alloc(ResourceGPU, 0)),
			job:  pytorchJob("infer", podSet("Worker", 1, gpus(1))),
			want: want{rule: verdict.RuleShapeMismatch, hopeless: true, absent: []string{verdict.RuleMIGReconfigPending}},
		},
		{
			name:  "RECONFIGURABLE on a node without a MIG strategy says to switch to mixed",
			nodes: nodes(full("h100-1", "H100-80GB", h100Product, 8, StrategyNone)),
			job:   pytorchJob("train", podSet("Worker", 1, mig("3g.40gb", 1))),
			want: want{rule: verdict.RuleShapeMismatch, hopeless: true, findings: map[string]verdict.Severity{verdict.RuleReconfigurable: verdict.SeverityInfo},
				contains: map[string][]string{
					verdict.RuleReconfigurable: {"nvidia.com/mig.config=all-3g.40gb", "mig.strategy=none on node h100-1", "switch the device plugin and GFD to mig.strategy=mixed"},
					verdict.RuleShapeMismatch:  {"mig.strategy=mixed"},
				}},
		},
		{
			name:  "RECONFIGURABLE on mixed nodes names the strategy they already run",
			nodes: nodes(migMixed("a100-1", "A100-80GB", a100Product, 2, "custom-1g20", map[string]int{"1g.20gb": 4})),
			job:   pytorchJob("train", podSet("Worker", 2, mig("2g.20gb", 1))),
			want: want{rule: verdict.RuleShapeMismatch, hopeless: true,
				contains: map[string][]string{verdict.RuleReconfigurable: {"mig.strategy=mixed", "already run"}}},
		},
		{
			name: "SHAPE_MISMATCH nearest shapes say how to ask for a single-strategy MIG instance",
			nodes: nodes(
				single("a100-s1", "A100-80GB", a100Product, 1, "1g.10gb"),
				full("a100-f1", "A100-80GB", a100Product, 8, StrategySingle)),
			job: pytorchJob("train", podSet("Worker", 1, mig("1g.12gb", 1))),
			want: want{rule: verdict.RuleShapeMismatch, hopeless: true, absent: []string{verdict.RuleStrategyMismatch},
				contains: map[string][]string{verdict.RuleShapeMismatch: {
					"nvidia.com/gpu (MIG 1g.10gb", "nodeSelector nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
					"nvidia.com/gpu (108 SMs", "mig.strategy=mixed"}}},
		},
		{
			name: "SHAPE_MISMATCH when mig-manager takes the shape away says which strategy the way back needs",
			nodes: nodes(
				migMixed("a100-1", "A100-80GB", a100Product, 1, "all-1g.10gb", map[string]int{"1g.10gb": 7}).migState("all-3g.40gb", MIGStatePending)),
			job: pytorchJob("train", podSet("Worker", 1, mig("1g.10gb", 1))),
			want: want{rule: verdict.RuleShapeMismatch, hopeless: true,
				contains: map[string][]string{verdict.RuleShapeMismatch: {"nvidia.com/mig.config=all-1g.10gb", "mig.strategy=mixed"}}},
		},
		{
			name:  "WAIT_CAPACITY names what is short on a busy node: CPU, not its free GPUs",
			nodes: nodes(full("h100-1", "H100-80GB", h100Product, 8, StrategyMixed).use(ResourceCPU, 94000)),
			job:   pytorchJob("train", podSet("Worker", 1, gpus(2))),
			want: want{rule: verdict.RuleWaitCapacity,
				contains: map[string][]string{verdict.RuleWaitCapacity: {"h100-1 (94/96 cpu in use)"}}},
		},
		{
			name:  "SHAPE_MISMATCH nearest shapes on nodes without GFD labels say the GPU model is unknown",
			nodes: nodes(node("bare-1").alloc(ResourceGPU, 8)),
			job:   pytorchJob("train", podSet("Worker", 1, mig("3g.40gb", 1))),
			want: want{rule: verdict.RuleShapeMismatch, hopeless: true,
				contains: map[string][]string{verdict.RuleShapeMismatch: {"nvidia.com/gpu (GPU model unknown: the nodes carry no nvidia.com/gpu.product label) on 1 node, 8 in all"}}},
		},
	}
	e := New()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkDiagnose(t, e, tc.nodes, tc.job, tc.want)
		})
	}
}

// checkDiagnose judges job on nodes and checks the result against w.
func checkDiagnose(t *testing.T, e *Engine, ns []Node, job Workload, w want) {
	t.Helper()
	c := e.NewCluster(ns)
	require.Empty(t, c.LabelErrors)
	res := e.Diagnose(c, job)
	text := reportText(res.Report)
	t.Log(text)
	require.Equal(t, w.rule, res.Rule, text)
	require.Equal(t, w.hopeless, res.Hopeless, text)
	for rule, sev := range w.findings {
		_, ok := findRule(res.Report, rule, sev)
		require.True(t, ok, "want %s %s in\n%s", sev, rule, text)
	}
	for _, rule := range w.absent {
		_, ok := findRule(res.Report, rule, "")
		require.False(t, ok, "unexpected %s in\n%s", rule, text)
	}
	for rule, subs := range w.contains {
		f, ok := findRule(res.Report, rule, "")
		require.True(t, ok, "want %s in\n%s", rule, text)
		for _, s := range subs {
			require.Contains(t, f.Message+" "+f.Remediation, s)
		}
	}
}
