package gangstore

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

type answer struct{ v string }

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func newStore() (*Store[answer], prometheus.Gauge, prometheus.Gauge) {
	gangs := prometheus.NewGauge(prometheus.GaugeOpts{Name: "gangs"})
	waiting := prometheus.NewGauge(prometheus.GaugeOpts{Name: "waiting"})
	return New[answer](Gauges{Gangs: gangs, Waiting: waiting}), gangs, waiting
}

func spec(expected int) Spec {
	return Spec{UID: "uid-1", Key: "ml/PyTorchJob/j", Kind: "PyTorchJob", Namespace: "ml", Name: "j", Attempt: 1, Expected: expected, Timeout: time.Minute}
}

func rank(i int, v verdict.Verdict) preflight.RankReport {
	return preflight.RankReport{Rank: i, Pod: "p", Node: "n", Report: verdict.Report{Verdict: v}}
}

// The gauges follow the open gangs and their waiting ranks through add,
// release, answer and forget, each counted once.
func TestStoreGauges(t *testing.T) {
	s, gangs, waiting := newStore()
	g, created := s.Ensure(spec(3))
	require.True(t, created)
	again, created := s.Ensure(spec(3))
	require.False(t, created)
	require.Same(t, g, again)
	require.Equal(t, 1.0, testutil.ToFloat64(gangs))
	require.Equal(t, 1, s.Open())

	g.Add(rank(0, verdict.VerdictPass), "a", t0)
	g.Add(rank(0, verdict.VerdictPass), "a", t0) // re-sent: not new
	g.Add(rank(1, verdict.VerdictPass), "b", t0)
	require.Equal(t, 2.0, testutil.ToFloat64(waiting))
	require.True(t, g.Release(1, "b"))
	require.Equal(t, 1.0, testutil.ToFloat64(waiting))

	g.Answer(&answer{"pass"}, t0)
	require.Zero(t, testutil.ToFloat64(gangs))
	require.Zero(t, s.Open())
	require.Zero(t, testutil.ToFloat64(waiting))
	s.Forget(g.Key()) // answered already: counted once
	require.Zero(t, testutil.ToFloat64(gangs))
	require.Zero(t, s.Open())
	require.Nil(t, s.Get("uid-1"))
	_, ok := s.UIDOf(g.Key())
	require.False(t, ok)
}

// A decision takes the reports out: while it runs no report is added; an
// aborted one gives them back; the answer wakes every waiting rank and
// stands.
func TestBeginAbortAnswer(t *testing.T) {
	s, _, _ := newStore()
	g, _ := s.Ensure(spec(2))
	_, ready, _ := g.Add(rank(0, verdict.VerdictPass), "a", t0)
	require.Equal(t, NotReady, ready)
	taken, ok := g.Begin()
	require.True(t, ok)
	require.Len(t, taken.Ranks, 1)
	require.Equal(t, 2, taken.Expected)
	require.False(t, g.Open())
	isNew, _, _ := g.Add(rank(1, verdict.VerdictPass), "b", t0)
	require.False(t, isNew, "added while being decided")
	g.Abort()
	require.True(t, g.Open())
	_, ready, _ = g.Add(rank(1, verdict.VerdictPass), "b", t0)
	require.Equal(t, Complete, ready)

	clk := clocktesting.NewFakeClock(t0)
	woke := make(chan struct{})
	go func() {
		g.Wait(context.Background(), clk, time.Hour)
		close(woke)
	}()
	g.Answer(&answer{"fail"}, t0.Add(time.Second))
	<-woke
	g.Answer(&answer{"pass"}, t0.Add(2*time.Second)) // the first answer stands
	require.Equal(t, "fail", g.Verdict().v)
	require.Equal(t, t0.Add(time.Second), g.AnsweredAt())
	_, ok = g.Begin()
	require.False(t, ok, "decided again")
}

// The deadline is the timeout after the earliest first report, never
// before notBefore (a new leader's grace for ranks to re-send); a later
// first report does not move it.
func TestStartDeadline(t *testing.T) {
	s, _, _ := newStore()
	g, _ := s.Ensure(spec(2))
	require.False(t, g.Started())
	require.Equal(t, t0.Add(time.Minute), g.Start(t0, time.Time{}))
	require.True(t, g.Started())
	require.True(t, g.Start(t0.Add(time.Second), time.Time{}).IsZero(), "a later first report moved the deadline")
	grace := t0.Add(10 * time.Minute)
	require.Equal(t, grace, g.Start(t0.Add(-time.Second), grace))
	require.Equal(t, grace, g.Deadline())
	require.True(t, g.AdoptFirst("x"))
	require.False(t, g.AdoptFirst("x"))
}

// A failing rank, or ranks that fail together, ask for an early decision.
func TestAddEarlyFail(t *testing.T) {
	s, _, _ := newStore()
	g, _ := s.Ensure(spec(4))
	_, ready, _ := g.Add(rank(0, verdict.VerdictFail), "a", t0)
	require.Equal(t, EarlyFail, ready)
	h, ok := g.HolderOf(0)
	require.True(t, ok)
	require.Equal(t, Holder{Pod: "p", UID: "a"}, h)
	_, _, by := g.Add(rank(0, verdict.VerdictPass), "other", t0)
	require.Equal(t, &Holder{Pod: "p", UID: "a"}, by)
	require.True(t, g.FirstRefusal("other"))
	require.False(t, g.FirstRefusal("other"))
}
