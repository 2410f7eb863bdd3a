package controller

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// quadraticGang is the early-fail check as it was before GangCheck, kept
// to compare with: on every new rank, the gang rules over all the ranks
// reported so far (a sort and every rule over the whole partial gang).
type quadraticGang struct {
	key      string
	expected int
	multi    bool
	reports  map[int]preflight.RankReport
}

func (q *quadraticGang) add(rr preflight.RankReport) (decide bool, why decision.Trigger) {
	_, had := q.reports[rr.Rank]
	q.reports[rr.Rank] = rr
	if len(q.reports) >= q.expected {
		return true, decision.OnComplete
	}
	if rr.Report.Failed() {
		return true, decision.OnEarlyFail
	}
	if !had && len(q.reports) > 1 && preflight.GangRules(preflight.GangInput{Job: q.key, Ranks: q.rankList(), ExpectMultiNodeNVLink: q.multi}).Failed() {
		return true, decision.OnEarlyFail
	}
	return false, 0
}

func (q *quadraticGang) rankList() []preflight.RankReport {
	out := make([]preflight.RankReport, 0, len(q.reports))
	for _, r := range q.reports {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out
}

// gangRank is rank i of a job of 8-GPU pods, one per node. With odd > 0,
// each of its traits departs from the other ranks' with that probability
// (another GPU model, a MIG device, a device another rank holds, another
// NVLink domain, a failing health finding), so that a random job passes
// for a while, then fails early.
func gangRank(rng *rand.Rand, i int, odd float64) preflight.RankReport {
	pick := func() bool { return rng != nil && rng.Float64() < odd }
	node := fmt.Sprintf("node-%04d", i)
	r := preflight.RankReport{Rank: i, Pod: fmt.Sprintf("train-worker-%d", i), Node: node, DriverVersion: "580.65.06", CUDADriverVersion: "13.0",
		Report: verdict.Report{Verdict: verdict.VerdictPass, Subject: "node " + node, Findings: []verdict.Finding{}}}
	for g := 0; g < 8; g++ {
		id := fmt.Sprintf("GPU-%s-%d", node, g)
		d := verdict.DeviceSummary{ID: id, Kind: "gpu", GPU: g, GPUUUID: id, Profile: "H100 80GB HBM3", SMs: 132, MemoryMiB: 81559}
		switch {
		case pick():
			d.SMs = 114
		case pick():
			d.Kind, d.Profile, d.SMs = "mig", "3g.40gb", 60
		case pick():
			d.ID = "GPU-shared"
			r.Node = "node-shared"
		case pick():
			d.FabricCluster = fmt.Sprintf("cluster-%d", rng.IntN(2))
		}
		r.Report.Devices = append(r.Report.Devices, d)
	}
	if pick() {
		r.Report.Findings = append(r.Report.Findings, verdict.Finding{Rule: verdict.RuleGPURemapPending, Severity: verdict.SeverityFail})
	}
	return r
}

// TestGangEarlyFailIncremental: over random jobs whose ranks report one
// by one, gang.add decides exactly when, and for the same reason as, the
// gang rules over the ranks so far would (quadraticGang).
func TestGangEarlyFailIncremental(t *testing.T) {
	rng := rand.New(rand.NewPCG(4096, 15))
	early, complete := 0, 0
	for job := 0; job < 300; job++ {
		n := 2 + rng.IntN(30)
		odd := []float64{0.001, 0.005, 0.02}[job%3]
		g := newTestGang(kubeflow.MustFromObject(ptJob(true, int32(n-1))), time.Minute, job%4 == 0)
		ref := &quadraticGang{key: g.Key(), expected: n, multi: g.MultiNodeNVLink(), reports: map[int]preflight.RankReport{}}
		for _, i := range rng.Perm(n) {
			rr := gangRank(rng, i, odd)
			isNew, decide, why, h := addRank(g, rr, fmt.Sprintf("uid-%d", i), time.Now())
			require.Nil(t, h)
			require.True(t, isNew)
			wantDecide, wantWhy := ref.add(rr)
			require.Equal(t, wantDecide, decide, "job %d after rank %d (%d reported)", job, i, len(ref.reports))
			require.Equal(t, wantWhy, why)
			if decide {
				if why == decision.OnEarlyFail {
					early++
				} else {
					complete++
				}
				break
			}
		}
	}
	require.Greater(t, early, 30)
	require.Greater(t, complete, 30)
}

// A rank whose report is replaced, or released, no longer counts in the
// early-fail check: a rank that re-sends a report on other devices fails
// the gang at once; once that rank's pod is gone, the others do not.
func TestGangEarlyFailReplacedAndReleased(t *testing.T) {
	g := newTestGang(kubeflow.MustFromObject(ptJob(true, 3)), time.Minute, false)
	for i := 0; i < 2; i++ {
		_, decide, _, _ := addRank(g, gangRank(nil, i, 0), fmt.Sprintf("uid-%d", i), time.Now())
		require.False(t, decide)
	}
	// Rank 1 re-sends: now on another rank's GPU.
	dup := gangRank(nil, 1, 0)
	dup.Node, dup.Report.Devices[0].ID = "node-0000", "GPU-node-0000-0"
	isNew, decide, why, _ := addRank(g, dup, "uid-1", time.Now())
	require.False(t, isNew)
	require.True(t, decide)
	require.Equal(t, decision.OnEarlyFail, why)
	require.True(t, g.Release(1, "uid-1"))
	_, decide, _, _ = addRank(g, gangRank(nil, 2, 0), "uid-2", time.Now())
	require.False(t, decide, "the released rank's devices still count")
}

// BenchmarkGangAdd: a gang of N ranks (8 GPUs each) reporting one by one,
// then its decision (the gang rules over all N), in one op:
//
//	incremental: gang.add as the controller runs it (GangCheck);
//	quadratic:   the gang rules over the ranks so far on every report, as
//	             before (quadraticGang); 4,096 ranks take about 30 s that
//	             way, so that size runs only with RANKGATE_BENCH_QUADRATIC=1.
//
//	go test ./integrations/kubernetes/controller -run '^$' -bench GangAdd
func BenchmarkGangAdd(b *testing.B) {
	for _, n := range []int{256, 1024, 4096} {
		ranks := make([]preflight.RankReport, n)
		uids := make([]string, n)
		for i := range ranks {
			ranks[i], uids[i] = gangRank(nil, i, 0), fmt.Sprintf("uid-%d", i)
		}
		decideAll := func(rs []preflight.RankReport) {
			if preflight.GangRules(preflight.GangInput{Job: "ml/pytorchjob/pt", Expected: n, Ranks: rs}).Failed() {
				b.Fatal("the gang fails")
			}
		}
		b.Run(fmt.Sprintf("incremental/ranks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for k := 0; k < b.N; k++ {
				g := newTestGang(kubeflow.MustFromObject(ptJob(true, int32(n-1))), time.Minute, false)
				now := time.Now()
				for i, rr := range ranks {
					if _, decide, why, _ := addRank(g, rr, uids[i], now); decide != (i == n-1) || (decide && why != decision.OnComplete) {
						b.Fatalf("rank %d: decide %v (%s)", i, decide, why)
					}
				}
				decideAll(g.Ranks())
			}
		})
		b.Run(fmt.Sprintf("quadratic/ranks=%d", n), func(b *testing.B) {
			if n > 1024 && !quadraticBig() {
				b.Skip("about 30 s per op; RANKGATE_BENCH_QUADRATIC=1 runs it")
			}
			b.ReportAllocs()
			for k := 0; k < b.N; k++ {
				q := &quadraticGang{key: "ml/pytorchjob/pt", expected: n, reports: map[int]preflight.RankReport{}}
				for i, rr := range ranks {
					if decide, _ := q.add(rr); decide != (i == n-1) {
						b.Fatalf("rank %d: decide %v", i, decide)
					}
				}
				decideAll(q.rankList())
			}
		})
	}
}

func quadraticBig() bool { return os.Getenv("RANKGATE_BENCH_QUADRATIC") == "1" }
