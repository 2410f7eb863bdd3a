package controller

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"

	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// The leader's writes about a gated job go through one work queue, keyed
// by the job's UID, and one reconcile (reconcileWrites): it is the only
// code that writes a Gang (create, progress, verdict, Applied) and the
// only code that puts a verdict on a job (annotations, the fail action,
// the Event). A job's UID is never worked on by two workers at once, so
// a Gang has one writer and no write races another of the same replica.
//
// The queue is controller-runtime's priority queue: what a rank waits for
// goes first. Workers take the most urgent item:
//
//	prioDecide  run the gang rules and record the verdict: every rank of
//	            the gang waits for it
//	prioFail    put a fail verdict on its job: its action frees the GPUs
//	            the other ranks hold
//	prioApply   put a pass or warn verdict on its job
//	prioBook    progress and the Applied condition: nobody waits for them
//
// Deadlines, delays and retries are the queue's too: a gang's deadline,
// the Applied delay, the progress interval (these three at the lowest
// priority, see armDeadline) and a failed write's backoff (at its write's
// priority) are requeues of the job's UID after that time, and each pass
// of the reconcile works out from the job's state what is due and when
// the next thing will be.
const (
	prioBook   = 0
	prioApply  = 10
	prioFail   = 20
	prioDecide = 30
)

// writers: how many jobs are worked on at once. A verdict write costs the
// API server a few milliseconds when it is idle and 50-200 ms when it is
// loaded, and at the end of a burst many gangs complete within a second:
// their decisions must not wait for a free worker behind each other's
// writes. With 4 workers, on a loaded 2-core machine, the gang latency
// benchmark's last decisions waited 2 s in the queue while each write took
// 20-200 ms (p99 2.0 s against the earlier build's 0.5 s, side by side).
// The writes nobody waits for do not crowd the API server for having
// workers: each comes once per verdict (apply, Applied), or within the
// progress budget.
const writers = 32

// writeQueue is the part of priorityqueue.PriorityQueue the writes use
// (unit tests run the same reconcile on a queue that follows a fake clock).
type writeQueue interface {
	AddWithOpts(o priorityqueue.AddOpts, items ...types.UID)
	GetWithPriority() (item types.UID, priority int, shutdown bool)
	Forget(item types.UID)
	Done(item types.UID)
	ShutDown()
}

// newWriteQueue is the leader's queue: a failed write is retried after
// 200 ms, doubling up to 30 s.
func newWriteQueue() writeQueue {
	return priorityqueue.New("rankgate-writes", func(o *priorityqueue.Opts[types.UID]) {
		o.RateLimiter = workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](200*time.Millisecond, 30*time.Second)
	})
}

// enqueue asks for job uid's writes to be looked at after after, with
// priority prio (the queue keeps the highest priority and the earliest
// time asked for).
func (c *Controller) enqueue(uid types.UID, prio int, after time.Duration) {
	q := c.writeQ.Load()
	if q == nil {
		return // a Controller without writes (unit tests of other parts)
	}
	(*q).AddWithOpts(priorityqueue.AddOpts{After: max(after, 0), Priority: ptr.To(prio)}, uid)
}

// retryLater retries job uid's writes with the queue's backoff.
func (c *Controller) retryLater(uid types.UID, prio int) {
	if q := c.writeQ.Load(); q != nil {
		(*q).AddWithOpts(priorityqueue.AddOpts{RateLimited: true, Priority: ptr.To(prio)}, uid)
	}
}

// runWriters works the queue while this replica leads (q, when given,
// replaces the one New made). What was queued before, by a reconciler that
// started first, is worked then. A replica that stops leading shuts its
// queue down: it exits (controller-runtime gives up a lost lease that way)
// and the next leader starts from the Gangs and the jobs.
func (c *Controller) runWriters(ctx context.Context, q writeQueue) {
	if q != nil {
		c.writeQ.Store(&q)
	}
	q = *c.writeQ.Load()
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	for i := 0; i < writers; i++ {
		go func() {
			for {
				uid, _, shut := q.GetWithPriority()
				if shut {
					return
				}
				c.reconcileWrites(ctx, uid)
				q.Done(uid)
			}
		}()
	}
}

// ask is a request to decide a gang now, and why.
type ask struct {
	why     trigger
	missing map[int]preflight.MissingRank
	pre     *verdict.Report // the Pending watchdog's verdict, instead of the gang rules'
}

// askDecide asks for gang g to be decided (why, with the missing ranks or
// the watchdog's report) ahead of every other write. A complete gang's
// ask replaces an earlier one (it sees every rank), except the watchdog's.
func (c *Controller) askDecide(g *gang, a ask) {
	r := c.lookupRes(g.UID())
	if r == nil || !g.Open() {
		return // ensureGang made r; none: the job is no longer gated
	}
	r.mu.Lock()
	if r.ask == nil || (a.why == trigComplete && r.ask.why != trigPending) {
		r.ask = &a
	}
	r.mu.Unlock()
	c.enqueue(g.UID(), prioDecide, 0)
}

// reconcileWrites does what job uid's gang and Gang need now, in order of
// who waits: decide (a rank waits), put the verdict on the job, mark the
// Gang Applied, write progress; and requeues uid for what is due later.
func (c *Controller) reconcileWrites(ctx context.Context, uid types.UID) {
	if ctx.Err() != nil {
		return
	}
	if c.restartStep(ctx, uid) {
		return // the job's next attempt: the old gang is gone
	}
	g := c.gangs.Get(uid)
	if g != nil {
		// A decided gang is forgotten later (requeued for then; an
		// earlier requeue keeps its time).
		defer c.forgetStep(g)
		if c.decideStep(ctx, g) {
			return
		}
	}
	r := c.lookupRes(uid)
	if r != nil {
		if busy := c.applyStep(ctx, r); busy {
			return
		}
		if busy := c.markStep(ctx, r); busy {
			return
		}
		c.progressStep(ctx, r, g)
	}
}

// decideStep decides g if it was asked to, or its deadline has come, and
// requeues g for its deadline otherwise. It says whether g's writes are
// done for this pass (the queue has it again).
func (c *Controller) decideStep(ctx context.Context, g *gang) bool {
	if g.Verdict() != nil {
		return false
	}
	var a *ask
	r := c.lookupRes(g.UID())
	if r != nil {
		r.mu.Lock()
		a = r.ask
		r.mu.Unlock()
	}
	deadline := g.Deadline()
	if a == nil && !deadline.IsZero() && !c.now().Before(deadline) {
		a = &ask{why: trigDeadline}
	}
	if a == nil {
		c.armDeadline(g.UID(), deadline)
		return false
	}
	out := c.decideWith(ctx, g, *a)
	if out == decideRetry {
		c.retryLater(g.UID(), prioDecide)
		return true
	}
	if r != nil {
		r.mu.Lock()
		if r.ask == a {
			r.ask = nil
		}
		r.mu.Unlock()
	}
	if out == decideWaiting {
		c.armDeadline(g.UID(), deadline)
		return false
	}
	if q := c.writeQ.Load(); q != nil {
		(*q).Forget(g.UID())
	}
	// Its job's writes go through the queue at their own priority, behind
	// the verdicts other gangs' ranks wait for (record made a new r when
	// it started a new attempt).
	if r := c.lookupRes(g.UID()); r != nil {
		if d, _ := r.unapplied(); d != nil {
			c.enqueue(g.UID(), applyPriority(d), 0)
			return true
		}
	}
	return false
}

// applyPriority: a fail verdict's action frees GPUs; a pass only says so.
func applyPriority(d *decision) int {
	if d.Report.Failed() {
		return prioFail
	}
	return prioApply
}

// armDeadline requeues job uid's writes for its gang's deadline (none
// when zero). At the lowest priority: the queue keeps one entry per job
// with the highest priority asked for, and an entry waiting for a
// deadline minutes away must not lift the job's other writes (its
// progress, its Applied condition) ahead of the verdicts ranks wait for.
// The deadline's verdict itself is written when its pass comes; its
// ranks have waited the whole gang timeout.
func (c *Controller) armDeadline(uid types.UID, deadline time.Time) {
	if !deadline.IsZero() {
		c.enqueue(uid, prioBook, c.until(deadline))
	}
}

// forgetStep drops a decided gang decidedGangTTL after its verdict (late
// polls are answered from it until then, from the job after), and
// requeues it for then.
func (c *Controller) forgetStep(g *gang) {
	if g.Verdict() == nil {
		return
	}
	if left := decidedGangTTL - c.since(g.AnsweredAt()); left > 0 {
		c.enqueue(g.UID(), prioBook, left)
		return
	}
	c.gangs.ForgetGang(g)
}
