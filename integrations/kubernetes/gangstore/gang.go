// Package gangstore holds the leader's open gangs: every gated job's rank
// reports until its verdict, and the verdict every rank is answered with.
// Reports go in (Add, Release), the decision takes them out (Begin), the
// answer goes back (Answer) and wakes every waiting rank (Wait). Nothing
// outside the package reads or writes a gang's fields: everything is
// behind these methods, under the gang's own lock.
//
// D is the verdict's type (the controller's decision): the store only
// keeps it and hands it out.
package gangstore

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/rankgate/rankgate/preflight"
)

// Spec is what a gang is for: its job (attempt) and how many ranks it
// waits for.
type Spec struct {
	UID                   types.UID
	Key                   string // namespace/kind/name
	Kind, Namespace, Name string
	Attempt               int32 // the job's gated attempt (rankgate.io/attempt)
	Expected              int
	Timeout               time.Duration
	MultiNodeNVLink       bool // the job says it expects multi-node NVLink
}

// Gauges the store keeps current (either may be nil): open gangs, and
// ranks waiting in them.
type Gauges struct {
	Gangs, Waiting prometheus.Gauge
}

func (g Gauges) add(gangs, waiting float64) {
	if g.Gangs != nil && gangs != 0 {
		g.Gangs.Add(gangs)
	}
	if g.Waiting != nil && waiting != 0 {
		g.Waiting.Add(waiting)
	}
}

// Store is the open gangs by job UID and by job key.
type Store[D any] struct {
	gauges Gauges
	open   atomic.Int64

	mu     sync.Mutex
	gangs  map[types.UID]*Gang[D]
	byName map[string]types.UID
}

// New is an empty store that keeps gauges current.
func New[D any](gauges Gauges) *Store[D] {
	return &Store[D]{gauges: gauges, gangs: map[types.UID]*Gang[D]{}, byName: map[string]types.UID{}}
}

// Get is job uid's gang (nil: none).
func (s *Store[D]) Get(uid types.UID) *Gang[D] {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gangs[uid]
}

// Open is how many of the store's gangs are open (neither answered nor
// forgotten).
func (s *Store[D]) Open() int { return int(s.open.Load()) }

// UIDOf is the UID of the job whose gang is held under key.
func (s *Store[D]) UIDOf(key string) (types.UID, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	uid, ok := s.byName[key]
	return uid, ok
}

// Ensure returns spec.UID's gang, made from spec if there is none
// (created says so).
func (s *Store[D]) Ensure(spec Spec) (g *Gang[D], created bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.gangs[spec.UID]; g != nil {
		return g, false
	}
	s.open.Add(1)
	g = &Gang[D]{spec: spec, attempt: spec.Attempt, gauges: s.gauges, open: &s.open,
		reports: map[int]heldReport{}, check: preflight.NewGangCheck(spec.MultiNodeNVLink),
		podUIDs: map[int]string{}, done: make(chan struct{})}
	s.gangs[spec.UID] = g
	s.byName[spec.Key] = spec.UID
	s.gauges.add(1, 0)
	return g, true
}

// Forget drops the gang held under key (job deleted, opted out, or
// re-gated), and takes it out of the gauges.
func (s *Store[D]) Forget(key string) {
	s.mu.Lock()
	uid, ok := s.byName[key]
	var g *Gang[D]
	if ok {
		g = s.gangs[uid]
		delete(s.gangs, uid)
		delete(s.byName, key)
	}
	s.mu.Unlock()
	if g != nil {
		g.Close()
	}
}

// ForgetGang drops g if it is still its job's gang.
func (s *Store[D]) ForgetGang(g *Gang[D]) {
	if s.Get(g.spec.UID) == g {
		s.Forget(g.spec.Key)
	}
}

// Gang is one job attempt's ranks until its verdict.
type Gang[D any] struct {
	spec   Spec
	gauges Gauges
	open   *atomic.Int64 // the store's count of open gangs

	mu      sync.Mutex
	attempt int32
	reports map[int]heldReport
	// check holds what the reports contribute to the early-fail check.
	check    *preflight.GangCheck
	podUIDs  map[int]string
	firstAt  time.Time // the gang's first report, possibly from an earlier leader
	lastAt   time.Time // the report that completed the gang, or the latest one
	deadline time.Time
	deciding bool
	verdict  *D
	done     chan struct{}
	// answeredAt: when this replica answered with verdict.
	answeredAt time.Time
	// firstAdopted: the recorded first report last adopted.
	firstAdopted string
	// closed: decided or forgotten, no longer counted as open.
	closed bool
	// refused: pods refused for a rank another pod holds (one Event each).
	refused map[types.UID]bool
}

// UID, Key, Kind, Namespace, Name, Expected, Timeout and MultiNodeNVLink
// are the gang's Spec.
func (g *Gang[D]) UID() types.UID         { return g.spec.UID }
func (g *Gang[D]) Key() string            { return g.spec.Key }
func (g *Gang[D]) Kind() string           { return g.spec.Kind }
func (g *Gang[D]) Namespace() string      { return g.spec.Namespace }
func (g *Gang[D]) Name() string           { return g.spec.Name }
func (g *Gang[D]) Expected() int          { return g.spec.Expected }
func (g *Gang[D]) Timeout() time.Duration { return g.spec.Timeout }
func (g *Gang[D]) MultiNodeNVLink() bool  { return g.spec.MultiNodeNVLink }

// Attempt is the job's gated attempt the gang's verdict is recorded for.
func (g *Gang[D]) Attempt() int32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.attempt
}

// SetAttempt moves the gang to attempt a (its verdict is recorded there).
func (g *Gang[D]) SetAttempt(a int32) {
	g.mu.Lock()
	g.attempt = a
	g.mu.Unlock()
}

// Close takes the gang out of the gauges, once.
func (g *Gang[D]) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closeLocked()
}

func (g *Gang[D]) closeLocked() {
	if g.closed {
		return
	}
	g.closed = true
	g.open.Add(-1)
	g.gauges.add(-1, -float64(len(g.reports)))
}

// Ready says whether a gang should be decided after a report.
type Ready int

const (
	NotReady  Ready = iota
	Complete        // every expected rank reported
	EarlyFail       // the ranks so far already fail together
)

// Holder is the pod that holds a rank, and the source of the report it
// holds the rank with (devicesource: empty for the rank's own report).
type Holder struct{ Pod, UID, Source string }

// Add records a rank's report. It says whether the rank is new to the gang
// and whether the gang should now be decided. A rank is held by the first
// pod that reported it: a report from another pod is not added, and
// heldBy names the holder.
func (g *Gang[D]) Add(rr preflight.RankReport, podUID string, now time.Time) (isNew bool, ready Ready, heldBy *Holder) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.verdict != nil || g.deciding || g.closed {
		return false, NotReady, nil
	}
	if uid, ok := g.podUIDs[rr.Rank]; ok && uid != podUID {
		return false, NotReady, &Holder{Pod: g.reports[rr.Rank].pod, UID: uid, Source: g.reports[rr.Rank].source}
	}
	_, had := g.reports[rr.Rank]
	g.reports[rr.Rank] = holdReport(rr, g.spec.Expected)
	g.check.Add(rr)
	g.podUIDs[rr.Rank] = podUID
	if !had {
		g.lastAt = now
		g.gauges.add(0, 1)
	}
	switch {
	case len(g.reports) >= g.spec.Expected:
		return !had, Complete, nil
	case rr.Report.Failed():
		return !had, EarlyFail, nil
	// Gang rules that fail on a subset fail on the whole gang too (mixed
	// kinds, MIG on several GPUs, shape mismatch, duplicate devices, an
	// NVLink domain split): decide now and free the GPUs the other ranks
	// hold. The check keeps up with each report (its cost is that rank's
	// devices, not the gang's) and answers as the gang rules would over
	// the ranks so far; the decision runs the rules themselves.
	case len(g.reports) > 1 && g.check.Failed():
		return !had, EarlyFail, nil
	}
	return !had, NotReady, nil
}

// Release drops rank's report if pod uid still holds it (the holder is
// gone); it says whether it did.
func (g *Gang[D]) Release(rank int, uid string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.verdict != nil || g.deciding || g.closed || g.podUIDs[rank] != uid {
		return false
	}
	delete(g.reports, rank)
	g.check.Remove(rank)
	delete(g.podUIDs, rank)
	g.gauges.add(0, -1)
	return true
}

// HolderOf is the pod holding rank, if one reported it.
func (g *Gang[D]) HolderOf(rank int) (Holder, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	uid, ok := g.podUIDs[rank]
	if !ok {
		return Holder{}, false
	}
	return Holder{Pod: g.reports[rank].pod, UID: uid, Source: g.reports[rank].source}, true
}

// FirstRefusal says whether pod uid is refused for the first time.
func (g *Gang[D]) FirstRefusal(uid types.UID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refused[uid] {
		return false
	}
	if g.refused == nil {
		g.refused = map[types.UID]bool{}
	}
	g.refused[uid] = true
	return true
}

// Start sets the gang's first report to at if it is the earliest known,
// and its deadline to the timeout after it, but not before notBefore. It
// returns the deadline when it moved (zero otherwise: undecided gangs
// only).
func (g *Gang[D]) Start(at, notBefore time.Time) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.verdict != nil || (!g.firstAt.IsZero() && !at.Before(g.firstAt)) {
		return time.Time{}
	}
	g.firstAt = at
	deadline := at.Add(g.spec.Timeout)
	if deadline.Before(notBefore) {
		deadline = notBefore
	}
	g.deadline = deadline
	return deadline
}

// Started says whether the gang has a first report.
func (g *Gang[D]) Started() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.firstAt.IsZero()
}

// AdoptFirst notes s, a recorded first-report time, and says whether it
// is new (not adopted already).
func (g *Gang[D]) AdoptFirst(s string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.firstAdopted == s {
		return false
	}
	g.firstAdopted = s
	return true
}

// Deadline is when the missing ranks fail the gang (zero: not started).
func (g *Gang[D]) Deadline() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.deadline
}

// Taken is what Begin hands the decision.
type Taken struct {
	Ranks           []preflight.RankReport // every report held, in rank order
	Expected        int
	First, Last     time.Time // the first report, and the one that completed the gang
	MultiNodeNVLink bool
}

// Begin takes the reports out for a decision: no report is added while it
// runs, and it ends with Answer or Abort. ok is false when the gang is
// decided or forgotten.
func (g *Gang[D]) Begin() (t Taken, ok bool) {
	g.mu.Lock()
	if g.verdict != nil || g.closed {
		g.mu.Unlock()
		return Taken{}, false
	}
	g.deciding = true
	held := g.heldLocked()
	t = Taken{Expected: g.spec.Expected, First: g.firstAt, Last: g.lastAt, MultiNodeNVLink: g.spec.MultiNodeNVLink}
	g.mu.Unlock()
	t.Ranks = unpackAll(held) // without the gang's lock: a large gang takes a while
	return t, true
}

// Abort ends a decision that decided nothing: reports are taken again.
func (g *Gang[D]) Abort() {
	g.mu.Lock()
	g.deciding = false
	g.mu.Unlock()
}

// Answer closes the gang with d: every waiting rank is answered with it
// now, and every later call of Verdict returns it.
func (g *Gang[D]) Answer(d *D, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.verdict != nil {
		return
	}
	g.verdict = d
	g.deciding = false
	g.answeredAt = now
	close(g.done)
	g.closeLocked()
}

// Verdict is the gang's answer (nil: none yet).
func (g *Gang[D]) Verdict() *D {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.verdict
}

// AnsweredAt is when the gang was answered, on the store user's clock.
func (g *Gang[D]) AnsweredAt() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.answeredAt
}

// Open says the gang is neither decided, being decided nor forgotten.
func (g *Gang[D]) Open() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.verdict == nil && !g.deciding && !g.closed
}

// Snapshot is an open gang's progress.
type Snapshot struct {
	Expected          int
	Ranks             []preflight.RankReport // as a Gang's status shows them
	FirstAt, Deadline time.Time
}

// Snapshot is the gang's progress now.
func (g *Gang[D]) Snapshot() Snapshot {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]preflight.RankReport, 0, len(g.reports))
	for rank, h := range g.reports {
		out = append(out, h.summary(rank))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return Snapshot{Expected: g.spec.Expected, Ranks: out, FirstAt: g.firstAt, Deadline: g.deadline}
}

// Reported lists the ranks that reported and their pods, without their
// reports.
func (g *Gang[D]) Reported() []preflight.RankReport {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]preflight.RankReport, 0, len(g.reports))
	for rank, r := range g.reports {
		out = append(out, preflight.RankReport{Rank: rank, Pod: r.pod})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out
}

// Progress is what a rank is answered while it waits: how many ranks
// reported, the deadline, and the verdict once there is one.
func (g *Gang[D]) Progress() (reported int, deadline time.Time, verdict *D) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.reports), g.deadline, g.verdict
}

// Ranks unpacks every report held, in rank order.
func (g *Gang[D]) Ranks() []preflight.RankReport {
	g.mu.Lock()
	held := g.heldLocked()
	g.mu.Unlock()
	return unpackAll(held)
}

// heldLocked lists the reports held, in rank order, still packed: the
// caller unpacks them (unpackAll) without holding the gang's lock.
func (g *Gang[D]) heldLocked() []heldRank {
	out := make([]heldRank, 0, len(g.reports))
	for rank, h := range g.reports {
		out = append(out, heldRank{rank, h})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rank < out[j].rank })
	return out
}

// Wait blocks until the verdict, ctx's end, or d on clk.
func (g *Gang[D]) Wait(ctx context.Context, clk clock.Clock, d time.Duration) {
	if d <= 0 {
		return
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-g.done:
	case <-ctx.Done():
	case <-t.C():
	}
}
