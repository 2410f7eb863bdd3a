package preflight

import (
	"fmt"
	"testing"

	"github.com/rankgate/rankgate/verdict"
)

// bigGang is a job of n ranks, one pod of 8 devices per node, as shape
// says: "full" (H100s, passes), "mig-no-uuid" (one MIG instance per rank
// whose GPU UUID is unknown, so that GANG_MIG_SPANS_GPUS names GPUs by
// node), "health-mixed" (every other rank reports a health finding),
// "duplicates" (every device held by two ranks).
func bigGang(n int, shape string) []RankReport {
	ranks := make([]RankReport, n)
	for i := range ranks {
		node := fmt.Sprintf("node-%04d", i)
		r := RankReport{Rank: i, Node: node, Pod: fmt.Sprintf("ml/j-worker-%d", i), DriverVersion: "580.65.06", CUDADriverVersion: "13.0",
			Report: verdict.Report{Verdict: verdict.VerdictPass, Findings: []verdict.Finding{}}}
		switch shape {
		case "mig-no-uuid":
			r.Report.Devices = []verdict.DeviceSummary{{ID: fmt.Sprintf("MIG-%d", i), Kind: "mig", GPU: 0, Profile: "3g.40gb", SMs: 60}}
		default:
			for g := 0; g < 8; g++ {
				id := fmt.Sprintf("GPU-%04d-%d", i, g)
				if shape == "duplicates" {
					id = fmt.Sprintf("GPU-%04d-%d", i/2, g)
					r.Node = fmt.Sprintf("node-%04d", i/2)
				}
				r.Report.Devices = append(r.Report.Devices, verdict.DeviceSummary{ID: id, Kind: "gpu", GPU: g, GPUUUID: id, Profile: "H100 80GB HBM3", SMs: 132})
			}
		}
		if shape == "health-mixed" && i%2 == 1 {
			r.Report.Findings = append(r.Report.Findings, verdict.Finding{Rule: verdict.RuleClocksThrottled, Severity: verdict.SeverityWarn})
		}
		ranks[i] = r
	}
	return ranks
}

// BenchmarkGangRules4096: the gang rules over a whole gang of 4,096 ranks
// (the decision once every rank reported), for gangs that pass and gangs
// that fail on rules whose findings group ranks.
//
//	go test -run '^$' -bench GangRules4096 ./preflight/
func BenchmarkGangRules4096(b *testing.B) {
	for _, shape := range []string{"full", "mig-no-uuid", "health-mixed", "duplicates"} {
		ranks := bigGang(4096, shape)
		b.Run(shape, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				GangRules(GangInput{Job: "ml/j", Expected: len(ranks), Ranks: ranks})
			}
		})
	}
}

// BenchmarkGangCheckAdd: one rank of 8 devices added to a check holding
// 4,095 others (the early-fail check of one report).
func BenchmarkGangCheckAdd(b *testing.B) {
	ranks := bigGang(4096, "full")
	c := NewGangCheck(false)
	for _, r := range ranks[:4095] {
		c.Add(r)
	}
	last := ranks[4095]
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Add(last)
		if c.Failed() {
			b.Fatal("fails")
		}
	}
}
