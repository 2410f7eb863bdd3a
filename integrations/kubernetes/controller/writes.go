package controller

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"

	"github.com/go-logr/logr"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/preflight/ncclenv"
	"github.com/rankgate/rankgate/verdict"
)

// The leader's writes about a gated job go through two work queues keyed
// by the job's UID, one per kind of waiter, worked by one reconcile each:
// they are the only code that writes a Gang (create, progress, verdict,
// Applied) and the only code that puts a verdict on a job (annotations,
// the fail action, the Event).
//
//   - decisions (reconcileDecide): run the gang rules and record the
//     verdict in the Gang, then answer the ranks. Every rank of the gang
//     waits for it. Many workers (deciders): at the end of a burst many
//     gangs complete within a second, and none may wait for a worker
//     behind another's write.
//   - the rest (reconcileBook), through controller-runtime's priority
//     queue, most urgent first: a fail verdict onto its job (its action
//     frees the GPUs the other ranks hold), a pass or warn verdict, then
//     progress and the Applied condition. Nobody waits for these: a few
//     workers (bookkeepers) write them one after another, so that they
//     never crowd the API server while it records the verdicts ranks wait
//     for.
//
// A job's UID is never worked on by two workers of one queue at once. A
// decision and a progress write of one Gang may meet at the API server:
// the Gang's resourceVersion settles it (the verdict write re-reads and
// writes again; a progress write that finds a verdict stops).
//
// Deadlines, delays and retries are the queues' too: a gang's deadline, the
// Applied delay, the progress interval and a failed write's backoff are
// requeues of the job's UID after that time, and each pass works out from
// the job's state what is due and when the next thing will be.
const (
	prioBook  = 0
	prioApply = 10
	prioFail  = 20
	// prioDecide marks a decision's work (the decisions queue).
	prioDecide = 30
)

// writes are the leader's writes (above): the one writer of Gangs, of
// what rankgate puts on jobs (verdicts, the fail action, waiting-for,
// re-gates, restarts) and of Kueue Workloads, and of the verdict Events.
// Everyone else asks: askDecide, touchProgress, wantWaitingFor,
// askRegate, askRestart. It holds the queues, the decisions in flight
// and the Gang book's writes' state.
type writes struct {
	host    writesHost
	opts    *Options
	log     logr.Logger
	clk     clock.WithTickerAndDelayedExecution
	client  client.Client // cached reads; job and Workload writes
	api     client.Reader // uncached reads
	gangAPI client.Client // Gang reads and writes (see Controller.gangAPI)
	rec     events.EventRecorder
	gangs   *gangstore.Store[decision.Decision]
	book    *gangBook

	queues   atomic.Pointer[writeQueues]
	deciding decisionsInFlight // the decisions in flight, which the other writes wait for
	// decisions counts the verdicts decided.
	decisions atomic.Int64
}

// writesHost is what the writes ask of the controller: judgements the
// decision reads, and what the shipped RBAC grants.
type writesHost interface {
	// missingRanks are g's missing ranks, and why each is missing.
	missingRanks(ctx context.Context, g *gang, reported []preflight.RankReport, onlyUnplaceable bool) map[int]preflight.MissingRank
	// ncclSettings are the NCCL settings g's ranks run with.
	ncclSettings(ctx context.Context, g *gang) map[int]ncclenv.Rank
	// resumedAfterFail: a person resumed the job after a fail verdict.
	resumedAfterFail(ctx context.Context, obj client.Object) (bool, error)
	// gangsRBACHint says what RBAC on Gangs the controller needs for verbs.
	gangsRBACHint(verbs string) string
}

// newWrites are c's writes, on qs.
func (c *Controller) newWrites(qs *writeQueues) *writes {
	w := &writes{host: c, opts: &c.opts, log: c.log, clk: c.clock(), client: c.client, api: c.api, gangAPI: c.gangAPI, rec: c.rec, gangs: c.gangs, book: c.book}
	w.queues.Store(qs)
	return w
}

func (w *writes) clock() clock.WithTickerAndDelayedExecution { return w.clk }
func (w *writes) now() time.Time                             { return w.clk.Now() }
func (w *writes) since(t time.Time) time.Duration            { return w.clk.Since(t) }
func (w *writes) until(t time.Time) time.Duration            { return t.Sub(w.clk.Now()) }
func (w *writes) workloads() kueueWorkloads                  { return kueueWorkloads{api: w.api, client: w.client} }

// The asks of the reconcilers, the gate and the watchdog go to the writes.

func (c *Controller) askDecide(g *gang, a decision.Ask) { c.w.askDecide(g, a) }

func (c *Controller) touchProgress(uid types.UID, soon bool) { c.w.touchProgress(uid, soon) }

func (c *Controller) wantWaitingFor(obj client.Object, kind string, cause *verdict.Finding) {
	c.w.wantWaitingFor(obj, kind, cause)
}

func (c *Controller) askRegate(obj client.Object, kind string) { c.w.askRegate(obj, kind) }

// Bookkeepers also wait while decisions are in flight (decisionsInFlight),
// at most maxBookYield: measured side by side on a quiet 2-core machine
// (make bench-compare BASE=580383b, 200 jobs x 8 ranks), two bookkeepers
// writing alongside the verdict writes (job patches, Applied, progress)
// tripled the p99 of last report to every rank holding its verdict
// (164-288 ms against 48-116 ms for the build that held them back): the
// queue orders what it hands out, not what the API server works on at
// once, so a write nobody waits for that starts during a burst of verdict
// writes slows them all. This is the one mechanism besides the queues.
const maxBookYield = 1500 * time.Millisecond

// deciders and bookkeepers: the workers of the two queues. With one pool
// of 4 for everything, on a loaded 2-core machine, the gang latency
// benchmark's last decisions waited 2 s for a worker while each verdict
// write took 20-200 ms; with one pool of 32, the writes nobody waits for
// went to the API server alongside the verdict writes and made each of
// those several times slower (median 143 ms against 29 ms for the build
// that held them back, side by side).
const (
	deciders    = 32
	bookkeepers = 2
)

// writeQueue is the part of priorityqueue.PriorityQueue the writes use
// (unit tests run the same reconciles on queues that follow a fake clock).
type writeQueue interface {
	AddWithOpts(o priorityqueue.AddOpts, items ...types.UID)
	GetWithPriority() (item types.UID, priority int, shutdown bool)
	Forget(item types.UID)
	Done(item types.UID)
	ShutDown()
}

// writeQueues are the leader's two queues.
type writeQueues struct{ decide, book writeQueue }

// newWriteQueues are the leader's queues: a failed write is retried after
// 200 ms, doubling up to 30 s.
func newWriteQueues() writeQueues {
	q := func(name string) writeQueue {
		return priorityqueue.New(name, func(o *priorityqueue.Opts[types.UID]) {
			o.RateLimiter = workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](200*time.Millisecond, 30*time.Second)
		})
	}
	return writeQueues{decide: q("rankgate-decisions"), book: q("rankgate-writes")}
}

// queueFor is the queue of work of priority prio (nil: no queues).
func (w *writes) queueFor(prio int) writeQueue {
	qs := w.queues.Load()
	if qs == nil {
		return nil
	}
	if prio >= prioDecide {
		return qs.decide
	}
	return qs.book
}

// enqueue asks for job uid's work of priority prio to be looked at after
// after (a queue keeps the highest priority and the earliest time asked
// for).
func (w *writes) enqueue(uid types.UID, prio int, after time.Duration) {
	if q := w.queueFor(prio); q != nil {
		q.AddWithOpts(priorityqueue.AddOpts{After: max(after, 0), Priority: ptr.To(prio)}, uid)
	}
}

// retryLater retries job uid's work of priority prio with the queue's
// backoff; succeeded ends the backoff once the work is done.
func (w *writes) retryLater(uid types.UID, prio int) {
	if q := w.queueFor(prio); q != nil {
		q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true, Priority: ptr.To(prio)}, uid)
	}
}

func (w *writes) succeeded(uid types.UID, prio int) {
	if q := w.queueFor(prio); q != nil {
		q.Forget(uid)
	}
}

// runWriters works the queues while this replica leads (qs, when given,
// replaces the ones New made). What was queued before, by a reconciler
// that started first, is worked then. A replica that stops leading shuts
// its queues down: it exits (controller-runtime gives up a lost lease that
// way) and the next leader starts from the Gangs and the jobs.
func (w *writes) runWriters(ctx context.Context, qs *writeQueues) {
	if qs != nil {
		w.queues.Store(qs)
	}
	qs = w.queues.Load()
	go func() {
		<-ctx.Done()
		qs.decide.ShutDown()
		qs.book.ShutDown()
	}()
	work := func(q writeQueue, n int, reconcile func(context.Context, types.UID)) {
		for i := 0; i < n; i++ {
			go func() {
				for {
					uid, _, shut := q.GetWithPriority()
					if shut {
						return
					}
					if ctx.Err() == nil {
						reconcile(ctx, uid)
					}
					q.Done(uid)
				}
			}()
		}
	}
	work(qs.decide, deciders, func(ctx context.Context, uid types.UID) {
		w.deciding.begin()
		defer w.deciding.end()
		w.reconcileDecide(ctx, uid)
	})
	work(qs.book, bookkeepers, func(ctx context.Context, uid types.UID) {
		w.deciding.wait(ctx, w.clock(), maxBookYield)
		w.reconcileBook(ctx, uid)
	})
}

// decisionsInFlight counts the decisions being worked on; wait blocks
// while there are any.
type decisionsInFlight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil while n is 0
}

func (f *decisionsInFlight) begin() {
	f.mu.Lock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
	f.mu.Unlock()
}

func (f *decisionsInFlight) end() {
	f.mu.Lock()
	f.n--
	if f.n == 0 {
		close(f.idle)
		f.idle = nil
	}
	f.mu.Unlock()
}

// wait returns once no decision is in flight, after most on clk, or when
// ctx ends.
func (f *decisionsInFlight) wait(ctx context.Context, clk clock.Clock, most time.Duration) {
	f.mu.Lock()
	ch := f.idle
	f.mu.Unlock()
	if ch == nil {
		return
	}
	t := clk.NewTimer(most)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C():
	case <-ctx.Done():
	}
}

// askDecide asks for gang g to be decided (why, with the missing ranks or
// the watchdog's report) ahead of every other write. A complete gang's
// ask replaces an earlier one (it sees every rank), except the watchdog's.
func (w *writes) askDecide(g *gang, a decision.Ask) {
	r := w.book.lookup(g.UID())
	if r == nil || !g.Open() {
		return // ensureGang made r; none: the job is no longer gated
	}
	r.mu.Lock()
	if r.ask == nil || (a.Why == decision.OnComplete && r.ask.Why != decision.OnPending) {
		r.ask = &a
	}
	r.mu.Unlock()
	w.enqueue(g.UID(), prioDecide, 0)
}

// reconcileDecide decides job uid's gang if it was asked to or its
// deadline has come (a restart asked for comes first: restart.go), and
// requeues it for its deadline otherwise.
func (w *writes) reconcileDecide(ctx context.Context, uid types.UID) {
	if w.restartStep(ctx, uid) {
		return // the job's next attempt: the old gang is gone
	}
	if g := w.gangs.Get(uid); g != nil {
		w.decideStep(ctx, g)
	}
}

// reconcileBook does the writes nobody waits for, for job uid: put its
// verdict on the job, mark the Gang Applied, write progress; forget a
// decided gang in time; and requeues uid for what is due later.
func (w *writes) reconcileBook(ctx context.Context, uid types.UID) {
	g := w.gangs.Get(uid)
	if g != nil {
		// A decided gang is forgotten later (requeued for then; an
		// earlier requeue keeps its time).
		defer w.forgetStep(g)
	}
	r := w.book.lookup(uid)
	if r == nil {
		return
	}
	if busy := w.applyStep(ctx, r); busy {
		return
	}
	if busy := w.regateStep(ctx, r); busy {
		return
	}
	if busy := w.waitingStep(ctx, r); busy {
		return
	}
	if busy := w.markStep(ctx, r); busy {
		return
	}
	w.progressStep(ctx, r, g)
}

// decideStep decides g if it was asked to, or its deadline has come, and
// requeues g for its deadline otherwise. A verdict recorded goes to the
// other queue to be put on its job.
func (w *writes) decideStep(ctx context.Context, g *gang) {
	if g.Verdict() != nil {
		return
	}
	var a *decision.Ask
	r := w.book.lookup(g.UID())
	if r != nil {
		r.mu.Lock()
		a = r.ask
		r.mu.Unlock()
	}
	deadline := g.Deadline()
	if a == nil && !deadline.IsZero() && !w.now().Before(deadline) {
		a = &decision.Ask{Why: decision.OnDeadline}
	}
	if a == nil {
		w.armDeadline(g.UID(), deadline)
		return
	}
	out := w.decideWith(ctx, g, *a)
	if out == decideRetry {
		w.retryLater(g.UID(), prioDecide)
		return
	}
	if r != nil {
		r.mu.Lock()
		if r.ask == a {
			r.ask = nil
		}
		r.mu.Unlock()
	}
	if out == decideWaiting {
		w.armDeadline(g.UID(), deadline)
		return
	}
	w.succeeded(g.UID(), prioDecide)
	// Put on its job by the other queue (setPending asked for it), and the
	// gang forgotten in time.
	w.enqueue(g.UID(), prioBook, decidedGangTTL)
}

// applyPriority: a fail verdict's action frees GPUs; a pass only says so.
func applyPriority(d *decision.Decision) int {
	if d.Report.Failed() {
		return prioFail
	}
	return prioApply
}

// armDeadline requeues job uid's decision for its gang's deadline (none
// when zero).
func (w *writes) armDeadline(uid types.UID, deadline time.Time) {
	if !deadline.IsZero() {
		w.enqueue(uid, prioDecide, w.until(deadline))
	}
}

// forgetStep drops a decided gang decidedGangTTL after its verdict (late
// polls are answered from it until then, from the job after), and
// requeues it for then.
func (w *writes) forgetStep(g *gang) {
	if g.Verdict() == nil {
		return
	}
	if left := decidedGangTTL - w.since(g.AnsweredAt()); left > 0 {
		w.enqueue(g.UID(), prioBook, left)
		return
	}
	w.gangs.ForgetGang(g)
}
