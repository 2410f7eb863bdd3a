package controller

import (
	"context"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/preflight"
)

// gang is one job's ranks as the leader sees them, until its verdict.
type gang struct {
	uid  types.UID
	key  string // namespace/kind/name
	kind string
	ns   string
	name string

	mu       sync.Mutex
	expected int
	timeout  time.Duration
	reports  map[int]preflight.RankReport
	podUIDs  map[int]string
	firstAt  time.Time // the gang's first report, possibly from an earlier leader
	lastAt   time.Time // the report that completed the gang, or the latest one
	deadline time.Time
	timer    *time.Timer
	deciding bool
	verdict  *decision
	done     chan struct{}
	// firstRecorded: rankgate.io/first-report-at is on the job.
	firstRecorded bool
	// closed: decided or forgotten, no longer counted as open.
	closed bool
}

// close takes the gang out of the open-gang and waiting-rank gauges, once.
func (g *gang) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	g.closed = true
	metricWaiting.Sub(float64(len(g.reports)))
	metricGangs.Dec()
}

func newGang(j job, timeout time.Duration) *gang {
	o := j.Object()
	return &gang{
		uid: o.GetUID(), key: jobKey(j), kind: j.Kind(), ns: o.GetNamespace(), name: o.GetName(),
		expected: kubeflow.RankPods(j), timeout: timeout,
		reports: map[int]preflight.RankReport{}, podUIDs: map[int]string{}, done: make(chan struct{}),
	}
}

// trigger says why a gang is decided.
type trigger int

const (
	trigComplete    trigger = iota // every expected rank reported
	trigEarlyFail                  // the ranks so far already fail together
	trigDeadline                   // gang timeout with ranks missing
	trigUnplaceable                // a missing rank's pod can never be placed
)

func (t trigger) String() string {
	return [...]string{"complete", "early-fail", "deadline", "unplaceable"}[t]
}

// add records a rank's report. It says whether the rank is new to the gang
// and whether the gang should now be decided.
func (g *gang) add(rr preflight.RankReport, podUID string, now time.Time) (isNew bool, decide bool, why trigger) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.verdict != nil || g.deciding || g.closed {
		return false, false, 0
	}
	_, had := g.reports[rr.Rank]
	g.reports[rr.Rank] = rr
	g.podUIDs[rr.Rank] = podUID
	if !had {
		g.lastAt = now
	}
	if len(g.reports) >= g.expected {
		return !had, true, trigComplete
	}
	if rr.Report.Failed() {
		return !had, true, trigEarlyFail
	}
	// Gang rules that fail on a subset fail on the whole gang too (mixed
	// kinds, MIG on several GPUs, shape mismatch, duplicate devices): decide
	// now and free the GPUs the other ranks hold.
	if !had && len(g.reports) > 1 && preflight.GangRules(preflight.GangInput{Job: g.key, Ranks: g.rankListLocked()}).Failed() {
		return true, true, trigEarlyFail
	}
	return !had, false, 0
}

func (g *gang) rankListLocked() []preflight.RankReport {
	out := make([]preflight.RankReport, 0, len(g.reports))
	for _, r := range g.reports {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out
}

// wait blocks until the verdict, ctx's end, or d.
func (g *gang) wait(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-g.done:
	case <-ctx.Done():
	case <-t.C:
	}
}

// response is the gate's answer for rank.
func (g *gang) response(rank int) *gate.Response {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := &gate.Response{Job: g.key, Rank: rank, Expected: g.expected, Reported: len(g.reports), State: gate.StateWaiting}
	if !g.deadline.IsZero() {
		d := g.deadline
		r.Deadline = &d
	}
	if g.verdict != nil {
		fillDecided(r, g.verdict)
	}
	return r
}

func fillDecided(r *gate.Response, d *decision) {
	r.State = gate.StateDecided
	rep := d.Report
	r.Verdict = &rep
	if !d.DecidedAt.IsZero() {
		at := d.DecidedAt
		r.DecidedAt = &at
	}
	r.Action = d.Action
}
