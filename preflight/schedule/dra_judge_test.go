package schedule

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

// A DRA pod set with facts is judged on them; its other requests by the
// engine, and the primary rule is the worse of the two.
func TestJudgeDRAMergesWithTheEngine(t *testing.T) {
	node := Node{Name: "n0", Allocatable: Resources{ResourceCPU: 16000, ResourceMem: 64 << 30, ResourcePods: 110}}
	h100 := DRADevice{Name: "gpu-0", Node: "n0", Type: "gpu", Product: "NVIDIA H100 80GB HBM3", Memory: "81559Mi", Count: 1}
	cases := []struct {
		name     string
		cpu      int64
		facts    DRAFacts
		rule     string
		hopeless bool
	}{
		{"devices fit, cpu fits", 8000, DRAFacts{Outcome: DRAFits, FitEmpty: 2, FitNow: 2}, verdict.RuleSchedulable, false},
		{"devices held", 8000, DRAFacts{Outcome: DRAWaits, FitEmpty: 2, Holders: []string{"ResourceClaim a/b holds " + h100.String()}}, verdict.RuleWaitCapacity, false},
		{"no device", 8000, DRAFacts{Outcome: DRANoDevice, Requests: []DRARequest{{Desc: "r", Nearest: []DRADevice{h100}}}}, verdict.RuleShapeMismatch, true},
		{"gang larger than the devices", 8000, DRAFacts{Outcome: DRAGangTooLarge, FitEmpty: 1}, verdict.RuleGangTooLarge, true},
		{"matching devices tainted unhealthy", 8000, DRAFacts{Outcome: DRAUnhealthy, Requests: []DRARequest{{Desc: "r", Matching: 1,
			Tainted: []string{"gpu-0 on n0 (gpu.nvidia.com/xid=79:NoSchedule)"}}}}, verdict.RuleDRADeviceUnhealthy, false},
		// cpu no node has decides, whatever the devices say (rule "": the
		// engine's own).
		{"devices held, cpu nowhere", 32000, DRAFacts{Outcome: DRAWaits, FitEmpty: 2}, "", true},
		{"devices unhealthy, cpu nowhere", 32000, DRAFacts{Outcome: DRAUnhealthy}, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			facts := tc.facts
			w := Workload{Kind: "PyTorchJob", Namespace: "ml", Name: "j", PodSets: []PodSet{{
				Name: "Worker", Count: 2, Requests: Resources{ResourceCPU: tc.cpu, ResourcePods: 1},
				DRA: "nvidia.com/gpu from DeviceClass gpu.nvidia.com", DRAFacts: &facts,
			}}}
			e := New()
			res := e.Diagnose(e.NewCluster([]Node{node}), w)
			if tc.rule == "" {
				require.True(t, res.Hopeless)
				require.NotEqual(t, verdict.RuleWaitCapacity, res.Rule)
				return
			}
			require.Equal(t, tc.rule, res.Rule, res.Report.Reason(0))
			require.Equal(t, tc.hopeless, res.Hopeless)
			// The engine's placement ignores where the devices are.
			require.Empty(t, res.Placement)
			var dra int
			for _, f := range res.Report.Findings {
				require.NotEqual(t, verdict.RuleDRANotJudged, f.Rule)
				if f.Rule == tc.rule {
					dra++
				}
			}
			require.Positive(t, dra)
		})
	}
}

func TestJudgeDRAWithoutFactsStandsDown(t *testing.T) {
	w := Workload{Kind: "Pod", Namespace: "ml", Name: "p", PodSets: []PodSet{{Name: "p", Count: 1, DRA: "resource claims gpu"}}}
	e := New()
	res := e.Diagnose(e.NewCluster(nil), w)
	require.Equal(t, verdict.RuleDRANotJudged, res.Rule)
}

// A set that waits for held devices and one that waits for unhealthy
// ones: the health cause is the job's (free capacity does not help it
// before the repair); the message names the tainted device and the fix
// says to repair, not to tolerate.
func TestJudgeDRAUnhealthyBeforeHeld(t *testing.T) {
	node := Node{Name: "n0", Allocatable: Resources{ResourceCPU: 16000, ResourceMem: 64 << 30, ResourcePods: 110}}
	sick := DRAFacts{Outcome: DRAUnhealthy, Requests: []DRARequest{{Desc: "nvidia.com/gpu: 1 from DeviceClass gpu.nvidia.com", Matching: 2,
		Tainted: []string{"gpu-1 on n0 (gpu.nvidia.com/gpu-lost:NoSchedule)"}}},
		Holders: []string{"ResourceClaim a/b holds gpu-0 on n0"}}
	held := DRAFacts{Outcome: DRAWaits, FitEmpty: 1, Holders: []string{"ResourceClaim a/b holds gpu-0 on n0"}}
	for _, order := range [][]*DRAFacts{{&held, &sick}, {&sick, &held}} {
		w := Workload{Kind: "PyTorchJob", Namespace: "ml", Name: "j"}
		for i, f := range order {
			w.PodSets = append(w.PodSets, PodSet{Name: []string{"Master", "Worker"}[i], Count: 1, Requests: Resources{ResourceCPU: 1000, ResourcePods: 1},
				DRA: "nvidia.com/gpu from DeviceClass gpu.nvidia.com", DRAFacts: f})
		}
		e := New()
		res := e.Diagnose(e.NewCluster([]Node{node}), w)
		require.Equal(t, verdict.RuleDRADeviceUnhealthy, res.Rule, res.Report.Reason(0))
		require.False(t, res.Hopeless)
		var f verdict.Finding
		for _, x := range res.Report.Findings {
			if x.Rule == verdict.RuleDRADeviceUnhealthy {
				f = x
			}
		}
		require.Equal(t, verdict.SeverityWarn, f.Severity)
		require.Contains(t, f.Message, "nvidia.com/gpu: 1 from DeviceClass gpu.nvidia.com: 2 published devices match, 1 of them tainted: gpu-1 on n0 (gpu.nvidia.com/gpu-lost:NoSchedule).")
		require.Contains(t, f.Message, "Other allocated claims hold matching devices too: ResourceClaim a/b holds gpu-0 on n0.")
		require.Contains(t, f.Remediation, "never tolerate a health taint")
	}
}
