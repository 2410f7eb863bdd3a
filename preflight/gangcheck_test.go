package preflight

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

// failRules is what GangRules fails on for ranks, as GangCheck answers it.
func failRules(ranks []RankReport, expectMNNVL bool) (rules []string, failed bool) {
	rep := GangRules(GangInput{Job: "ml/j", Ranks: ranks, ExpectMultiNodeNVLink: expectMNNVL})
	for _, f := range rep.Findings {
		if f.Severity == verdict.SeverityFail && !slices.Contains(rules, f.Rule) {
			rules = append(rules, f.Rule)
		}
	}
	sort.Strings(rules)
	return rules, rep.Failed()
}

// randomRank is a rank of a job whose ranks are mostly alike; with
// probability odd each of its traits departs from the others' (another
// kind, shape, GPU, node, driver, fabric, a health finding, a failed own
// preflight), so that prefixes of a random job pass for a while and then
// fail for one reason or several.
func randomRank(rng *rand.Rand, i int, odd float64) RankReport {
	pick := func() bool { return rng.Float64() < odd }
	node := fmt.Sprintf("n%d", i/4)
	if pick() {
		node = fmt.Sprintf("n%d", rng.IntN(4))
	}
	pod := fmt.Sprintf("ml/j-%d", i)
	if pick() {
		pod = fmt.Sprintf("ml/j-%d", rng.IntN(3))
	}
	r := RankReport{Rank: i, Node: node, Pod: pod, DriverVersion: "580.65.06",
		Report: verdict.Report{Verdict: verdict.VerdictPass, Findings: []verdict.Finding{}}}
	if pick() {
		r.DriverVersion = "570.172.08"
	}
	migRank := pick()
	for k := 0; k < 1+rng.IntN(2); k++ {
		d := verdict.DeviceSummary{ID: fmt.Sprintf("GPU-%d-%d", i, k), Kind: "gpu", GPU: k, GPUUUID: fmt.Sprintf("GPU-%d-%d", i, k), Profile: "full", SMs: 132}
		if pick() {
			d.ID = fmt.Sprintf("GPU-%d", rng.IntN(3)) // shared with another rank
		}
		if pick() {
			d.SMs = 108
		}
		if migRank {
			d.Kind, d.Profile, d.SMs, d.GPU = "mig", "3g.40gb", 60, rng.IntN(2)
			d.GPUUUID = "GPU-shared"
			if pick() {
				d.GPUUUID = ""
			}
			d.ID = fmt.Sprintf("MIG-%d-%d", i, k)
		}
		if pick() {
			d.FabricCluster = fmt.Sprintf("cluster-%d", rng.IntN(2))
			if rng.IntN(2) == 0 {
				d.FabricClique = new(uint32)
				*d.FabricClique = uint32(rng.IntN(2))
			}
		}
		r.Report.Devices = append(r.Report.Devices, d)
	}
	if pick() {
		sev := verdict.SeverityWarn
		if rng.IntN(3) == 0 {
			sev = verdict.SeverityFail
		}
		rule := HealthRules[rng.IntN(len(HealthRules))]
		r.Report.Findings = append(r.Report.Findings, verdict.Finding{Rule: rule, Severity: sev})
	}
	if pick() {
		r.Report.Verdict = verdict.VerdictFail
	}
	return r
}

// TestGangCheckMatchesGangRules: over random jobs, after every rank added
// (sometimes a rank re-sent or dropped), GangCheck's answer is GangRules'
// on the ranks held, with and without the job's multi-node NVLink
// expectation.
func TestGangCheckMatchesGangRules(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 4096))
	steps, failing, passing := 0, 0, 0
	seen := map[string]bool{}
	for job := 0; job < 400; job++ {
		mnnvl := job%5 == 0
		odd := []float64{0.005, 0.02, 0.05, 0.15}[job%4]
		n := 2 + rng.IntN(40)
		c := NewGangCheck(mnnvl)
		held := map[int]RankReport{}
		for i := 0; i < n; i++ {
			switch x := rng.IntN(20); {
			case x == 0 && len(held) > 0: // a rank re-sends another report
				k := rng.IntN(i)
				r := randomRank(rng, k, odd)
				c.Add(r)
				held[k] = r
			case x == 1 && len(held) > 0: // a rank's pod is gone
				k := rng.IntN(i)
				c.Remove(k)
				delete(held, k)
			}
			r := randomRank(rng, i, odd)
			c.Add(r)
			held[i] = r
			var ranks []RankReport
			for _, r := range held {
				ranks = append(ranks, r)
			}
			want, wantFailed := failRules(ranks, mnnvl)
			require.Equal(t, want, c.FailingRules(), "job %d after rank %d: %d ranks held", job, i, len(held))
			require.Equal(t, wantFailed, c.Failed(), "job %d after rank %d", job, i)
			require.Equal(t, len(held), c.Len())
			steps++
			if wantFailed {
				failing++
			} else {
				passing++
			}
			for _, r := range want {
				seen[r] = true
			}
		}
	}
	// The random jobs reach every rule the check answers for, and both
	// answers, so that the comparison is not vacuous.
	for _, r := range []string{verdict.RuleRankFailed, verdict.RuleGangMIGMixedWithFull, verdict.RuleGangMIGSpansGPUs, verdict.RuleGangProfileMismatch,
		verdict.RuleGangDuplicateDevice, verdict.RuleGangNVLinkDomainSplit, verdict.RuleGangHealthMixed} {
		require.True(t, seen[r], "no random job failed %s", r)
	}
	require.Greater(t, passing, steps/10)
	require.Greater(t, failing, steps/10)
	t.Logf("%d prefixes: %d fail, %d pass", steps, failing, passing)
}

// TestGangCheckRemoveRestores: dropping every rank leaves the check as
// empty as a new one (no key left counted).
func TestGangCheckRemoveRestores(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := NewGangCheck(true)
	for i := 0; i < 200; i++ {
		c.Add(randomRank(rng, i, 0.3))
	}
	for i := 0; i < 200; i++ {
		c.Remove(i)
	}
	require.Equal(t, NewGangCheck(true), c)
	require.False(t, c.Failed())
}
