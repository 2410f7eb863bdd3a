package leader

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

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/preflight/ncclenv"
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

// Writes are the leader's writes (above): the one writer of Gangs, of
// what rankgate puts on jobs (verdicts, the fail action, waiting-for,
// re-gates, restarts) and of Kueue Workloads, and of the verdict Events.
// Everyone else asks: AskDecide, TouchProgress, WantWaitingFor,
// AskRegate, AskRestart. It holds the queues, the decisions in flight,
// the Gang book and what a new leader loaded from the Gangs (Sweep).
type Writes struct {
	host Host
	// The settings of Config.
	gangTimeout, appliedDelay time.Duration
	onFail, identity          string

	log     logr.Logger
	clk     clock.WithTickerAndDelayedExecution
	client  client.Client // cached reads; job and Workload writes
	api     client.Reader // uncached reads
	gangAPI client.Client // Gang reads and writes
	rec     events.EventRecorder
	gangs   *gangstore.Store[decision.Decision]
	book    *Book

	queues   atomic.Pointer[Queues]
	deciding decisionsInFlight // the decisions in flight, which the other writes wait for
	// decisions counts the verdicts decided.
	decisions atomic.Int64
	// recovered: the Gangs an earlier leader left were loaded (Sweep);
	// sweepErr is why they could not be, meanwhile.
	recovered atomic.Bool
	sweepErr  atomic.Pointer[string]
}

// Host is what the writes ask of the controller: the judgements a
// decision reads, and what the controller watches and gates.
type Host interface {
	// MissingRanks are g's missing ranks, and why each is missing.
	MissingRanks(ctx context.Context, g *decision.Gang, reported []preflight.RankReport, onlyUnplaceable bool) map[int]preflight.MissingRank
	// NCCLSettings are the NCCL settings g's ranks run with.
	NCCLSettings(ctx context.Context, g *decision.Gang) map[int]ncclenv.Rank
	// Watches: the controller gates jobs of kind k.
	Watches(k kubeflow.Kind) bool
	// OptedIn: the job is gated (its own setting, else its namespace's).
	OptedIn(ctx context.Context, o client.Object) (bool, error)
}

// Config is what the writes are made of.
type Config struct {
	Host Host
	// GangTimeout is the default gang timeout; OnFail the default fail
	// policy; AppliedDelay how long after its verdict a Gang is marked
	// Applied at the latest; Identity names this replica in verdicts.
	GangTimeout  time.Duration
	OnFail       string
	AppliedDelay time.Duration
	Identity     string
	Clock        clock.WithTickerAndDelayedExecution
	Log          logr.Logger
	// Client reads from the caches and writes jobs and Workloads; API
	// reads from the API server; GangAPI reads and writes Gangs.
	Client   client.Client
	API      client.Reader
	GangAPI  client.Client
	Recorder events.EventRecorder
	// Gangs are the open gangs (the gate's store).
	Gangs *gangstore.Store[decision.Decision]
}

// New are the writes of cfg, on qs until Run is given others.
func New(cfg Config, qs *Queues) *Writes {
	w := &Writes{host: cfg.Host, gangTimeout: cfg.GangTimeout, appliedDelay: cfg.AppliedDelay, onFail: cfg.OnFail, identity: cfg.Identity, log: cfg.Log, clk: cfg.Clock, client: cfg.Client, api: cfg.API, gangAPI: cfg.GangAPI,
		rec: cfg.Recorder, gangs: cfg.Gangs, book: newBook()}
	w.queues.Store(qs)
	return w
}

// Book is the Gang book (the Gang resources of the gated jobs).
func (w *Writes) Book() *Book { return w.book }

// Decisions counts the verdicts decided.
func (w *Writes) Decisions() int64 { return w.decisions.Load() }

// Recovered: the Gangs an earlier leader left are loaded (Sweep).
func (w *Writes) Recovered() bool { return w.recovered.Load() }

// SweepError is why the Gangs could not be loaded yet ("" when none).
func (w *Writes) SweepError() string {
	if p := w.sweepErr.Load(); p != nil {
		return *p
	}
	return ""
}

func (w *Writes) clock() clock.WithTickerAndDelayedExecution { return w.clk }
func (w *Writes) now() time.Time                             { return w.clk.Now() }
func (w *Writes) since(t time.Time) time.Duration            { return w.clk.Since(t) }
func (w *Writes) until(t time.Time) time.Duration            { return t.Sub(w.clk.Now()) }
func (w *Writes) workloads() kueueWorkloads                  { return kueueWorkloads{api: w.api, client: w.client} }

// The asks of the reconcilers, the gate and the watchdog go to the writes.

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

// Queue is the part of priorityqueue.PriorityQueue the writes use
// (unit tests run the same reconciles on queues that follow a fake clock).
type Queue interface {
	AddWithOpts(o priorityqueue.AddOpts, items ...types.UID)
	GetWithPriority() (item types.UID, priority int, shutdown bool)
	Forget(item types.UID)
	Done(item types.UID)
	ShutDown()
}

// Queues are the leader's two queues.
type Queues struct {
	// Decide holds the decisions ranks wait for; Book the writes nobody
	// waits for.
	Decide, Book Queue
}

// NewQueues are the leader's queues: a failed write is retried after
// 200 ms, doubling up to 30 s.
func NewQueues() Queues {
	q := func(name string) Queue {
		return priorityqueue.New(name, func(o *priorityqueue.Opts[types.UID]) {
			o.RateLimiter = workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](200*time.Millisecond, 30*time.Second)
		})
	}
	return Queues{Decide: q("rankgate-decisions"), Book: q("rankgate-writes")}
}

// queueFor is the queue of work of priority prio (nil: no queues).
func (w *Writes) queueFor(prio int) Queue {
	qs := w.queues.Load()
	if qs == nil {
		return nil
	}
	if prio >= prioDecide {
		return qs.Decide
	}
	return qs.Book
}

// enqueue asks for job uid's work of priority prio to be looked at after
// after (a queue keeps the highest priority and the earliest time asked
// for).
func (w *Writes) enqueue(uid types.UID, prio int, after time.Duration) {
	if q := w.queueFor(prio); q != nil {
		q.AddWithOpts(priorityqueue.AddOpts{After: max(after, 0), Priority: ptr.To(prio)}, uid)
	}
}

// retryLater retries job uid's work of priority prio with the queue's
// backoff; succeeded ends the backoff once the work is done.
func (w *Writes) retryLater(uid types.UID, prio int) {
	if q := w.queueFor(prio); q != nil {
		q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true, Priority: ptr.To(prio)}, uid)
	}
}

func (w *Writes) succeeded(uid types.UID, prio int) {
	if q := w.queueFor(prio); q != nil {
		q.Forget(uid)
	}
}

// runWriters works the queues while this replica leads (qs, when given,
// replaces the ones New made). What was queued before, by a reconciler
// that started first, is worked then. A replica that stops leading shuts
// its queues down: it exits (controller-runtime gives up a lost lease that
// way) and the next leader starts from the Gangs and the jobs.
func (w *Writes) Run(ctx context.Context, qs *Queues) {
	if qs != nil {
		w.queues.Store(qs)
	}
	qs = w.queues.Load()
	go func() {
		<-ctx.Done()
		qs.Decide.ShutDown()
		qs.Book.ShutDown()
	}()
	work := func(q Queue, n int, reconcile func(context.Context, types.UID)) {
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
	work(qs.Decide, deciders, func(ctx context.Context, uid types.UID) {
		w.deciding.begin()
		defer w.deciding.end()
		w.reconcileDecide(ctx, uid)
	})
	work(qs.Book, bookkeepers, func(ctx context.Context, uid types.UID) {
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
func (w *Writes) AskDecide(g *gang, a decision.Ask) {
	r := w.book.Lookup(g.UID())
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
func (w *Writes) reconcileDecide(ctx context.Context, uid types.UID) {
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
func (w *Writes) reconcileBook(ctx context.Context, uid types.UID) {
	g := w.gangs.Get(uid)
	if g != nil {
		// A decided gang is forgotten later (requeued for then; an
		// earlier requeue keeps its time).
		defer w.forgetStep(g)
	}
	r := w.book.Lookup(uid)
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
func (w *Writes) decideStep(ctx context.Context, g *gang) {
	if g.Verdict() != nil {
		return
	}
	var a *decision.Ask
	r := w.book.Lookup(g.UID())
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
		w.ArmDeadline(g.UID(), deadline)
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
		w.ArmDeadline(g.UID(), deadline)
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
func (w *Writes) ArmDeadline(uid types.UID, deadline time.Time) {
	if !deadline.IsZero() {
		w.enqueue(uid, prioDecide, w.until(deadline))
	}
}

// forgetStep drops a decided gang decidedGangTTL after its verdict (late
// polls are answered from it until then, from the job after), and
// requeues it for then.
func (w *Writes) forgetStep(g *gang) {
	if g.Verdict() == nil {
		return
	}
	if left := decidedGangTTL - w.since(g.AnsweredAt()); left > 0 {
		w.enqueue(g.UID(), prioBook, left)
		return
	}
	w.gangs.ForgetGang(g)
}
