package schedule

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

// A cluster whose GPUs come through DRA advertises no nvidia.com/gpu in
// node allocatable: judged from allocatable, a job asking nvidia.com/gpu
// through a DeviceClass looks as if its shape existed nowhere.
func TestDiagnoseStandsDownForDRA(t *testing.T) {
	e := New()
	// The DRA node: GPU labels may be there, allocatable has no GPU.
	draNode := gpuNode("h100-dra-0", "H100-80GB", h100Product, 2)
	c := e.NewCluster(nodes(draNode, migMixed("a100-0", "A100-80GB", a100Product, 8, "all-1g.10gb", map[string]int{"1g.10gb": 7})))
	job := func(dra string) Workload {
		w := pytorchJob("llm", podSet("Master", 1, gpus(1)), podSet("Worker", 1, gpus(1)))
		for i := range w.PodSets {
			w.PodSets[i].DRA = dra
			w.PodSets[i].Pods = []string{"ml/llm-" + w.PodSets[i].Name}
			w.PodSets[i].SchedulerMessage = "0/2 nodes are available: 2 cannot allocate all claims."
		}
		return w
	}

	// Without the DRA mark the engine calls it hopeless: what the stand-down
	// exists to prevent.
	res := e.Diagnose(c, job(""))
	require.True(t, res.Hopeless, reportText(res.Report))

	res = e.Diagnose(c, job("nvidia.com/gpu from DeviceClass gpu.nvidia.com"))
	require.False(t, res.Hopeless)
	require.Equal(t, verdict.RuleDRANotJudged, res.Rule)
	require.Equal(t, verdict.ExitPass, res.ExitCode())
	require.Equal(t, verdict.VerdictWarn, res.Report.Verdict)
	require.Equal(t, []string{verdict.RuleDRANotJudged}, res.Report.RuleIDs())
	f := res.Report.Findings[0]
	require.Equal(t, verdict.SeverityWarn, f.Severity)
	require.Contains(t, f.Message, "come through DRA (Master (1 pod): nvidia.com/gpu from DeviceClass gpu.nvidia.com; Worker (1 pod): nvidia.com/gpu from DeviceClass gpu.nvidia.com)")
	require.Contains(t, f.Message, `The scheduler said: "0/2 nodes are available: 2 cannot allocate all claims."`)
	require.Equal(t, []string{"ml/llm-Master", "ml/llm-Worker"}, f.Pods)
	require.NotEmpty(t, f.Remediation)
	require.Empty(t, res.Placement)
}

// One pod set through DRA is enough: the job is judged as a whole, and
// its devices are not all in node allocatable.
func TestDiagnoseStandsDownForOneDRAPodSet(t *testing.T) {
	e := New()
	c := e.NewCluster(nodes(full("h100-0", "H100-80GB", h100Product, 8, StrategyNone)))
	w := pytorchJob("mixed", podSet("Master", 1, nil), podSet("Worker", 4, gpus(8)))
	w.PodSets[1].DRA = "resource claims gpu"
	res := e.Diagnose(c, w)
	require.Equal(t, verdict.RuleDRANotJudged, res.Rule)
	require.False(t, res.Hopeless)
	require.Contains(t, res.Report.Findings[0].Message, "Worker (4 pods): resource claims gpu")
	require.NotContains(t, res.Report.Findings[0].Message, "Master")

	// Without it, the same job is too large for the cluster.
	w.PodSets[1].DRA = ""
	require.Equal(t, verdict.RuleGangTooLarge, e.Diagnose(c, w).Rule)
}
