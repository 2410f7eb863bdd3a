// Package jobs is the job reconciler (one controller-runtime controller
// per job kind, this one type, on the leader). It keeps the gang of each
// opted-in job in step with the job: drops the gangs of deleted and
// opted-out jobs, keeps a Gang for every gated job, runs the Pending
// watchdog's and the allocations' steps, arms the deadline of a gang an
// earlier leader started, fails a gang at once when a missing rank can
// never be placed, and asks for a re-gate when a person resumed a failed
// job.
//
// It writes nothing itself: it reads jobs (Jobs) and the verdicts they
// carry (Verdicts), asks the Gang book what it holds (Book), and asks the
// leader's writes for everything to be written (Asks).
package jobs

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/allocations"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/watchdog"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
)

// Jobs is what the reconciler reads of jobs.
type Jobs interface {
	// VerdictsLoaded: the verdicts earlier leaders recorded are loaded
	// (until then what is pending is unknown).
	VerdictsLoaded() bool
	// CachedJob is the cached job of kind k at key; nil when there is none.
	CachedJob(ctx context.Context, k kubeflow.Kind, key types.NamespacedName) (client.Object, error)
	// OptedIn: the job is gated (its own setting, else its namespace's).
	OptedIn(ctx context.Context, o client.Object) (bool, error)
	// ResumedAfterFail: a person resumed the job after a fail verdict.
	ResumedAfterFail(ctx context.Context, o client.Object) (bool, error)
}

// Verdicts read the verdicts (of type D) jobs carry.
type Verdicts[D any] interface {
	// Carried is the verdict job o carries (marked as on its job); false:
	// none.
	Carried(o client.Object) (*D, bool)
	// Unrecorded: d was answered to a gang but never recorded (its job
	// was gone or replaced).
	Unrecorded(d *D) bool
}

// Book is what the reconciler asks of the Gang book (the Gangs of the
// gated jobs, written by the leader's writes alone).
type Book interface {
	// Applying: a verdict of the job with uid is recorded in its Gang and
	// not yet on the job.
	Applying(uid types.UID) bool
	// FirstReported: a rank of o's current attempt reported (o's Gang, or
	// from earlier releases its rankgate.io/first-report-at, says so).
	FirstReported(o client.Object) bool
	// Keep keeps the Gang of o, a gated job of kind without a verdict: it
	// exists (0/N while no rank reported).
	Keep(o client.Object, kind string)
	// Drop forgets the Gang held for the job at key.
	Drop(key string)
}

// Asks are what the reconciler asks of the leader's writes.
type Asks[D any] interface {
	// EnsureJobCA gives the job's namespace the gate's CA bundle.
	EnsureJobCA(ctx context.Context, o client.Object)
	// AskRegate asks for the job of kind to be gated again.
	AskRegate(o client.Object, kind string)
	// EnsureGang is j's gang, created (with its Gang asked for) if needed.
	EnsureGang(j kubeflow.Job) *gangstore.Gang[D]
	// FailUnplaceable asks for g to be decided at once when a missing rank
	// can never be placed.
	FailUnplaceable(ctx context.Context, g *gangstore.Gang[D])
}

// Reconciler is the job reconciler (see the package comment); D is the
// type of the gangs' verdicts.
type Reconciler[D any] struct {
	Jobs     Jobs
	Verdicts Verdicts[D]
	Book     Book
	Asks     Asks[D]
	// Open are the open gangs (package gangstore).
	Open *gangstore.Store[D]
	// Pending is the Pending watchdog; its Step runs for every gated job
	// without a verdict.
	Pending *watchdog.Watchdog
	// Alloc adds the ranks whose DRA claims are allocated.
	Alloc *allocations.Reconciler[D]
	Clock clock.PassiveClock
	Log   logr.Logger
}

// forget drops what is held for the job at key: its gang, its Gang
// resource and, with unwatch, its Pending watch.
func (r *Reconciler[D]) forget(key string, unwatch bool) {
	r.Open.Forget(key)
	r.Book.Drop(key)
	if unwatch {
		r.Pending.Unwatch(key)
	}
}

// Reconcile looks at the job of kind k that req names.
func (r *Reconciler[D]) Reconcile(ctx context.Context, k kubeflow.Kind, req reconcile.Request) (reconcile.Result, error) {
	key := req.Namespace + "/" + k.GVK().Kind + "/" + req.Name
	obj, err := r.Jobs.CachedJob(ctx, k, req.NamespacedName)
	if err != nil {
		return reconcile.Result{}, err
	}
	if obj == nil {
		r.forget(key, true)
		return reconcile.Result{}, nil
	}
	if in, err := r.Jobs.OptedIn(ctx, obj); err != nil {
		return reconcile.Result{}, err
	} else if !in {
		r.forget(key, true)
		return reconcile.Result{}, nil
	}
	r.Asks.EnsureJobCA(ctx, obj)
	if uid, ok := r.Open.UIDOf(key); ok && uid != obj.GetUID() {
		r.forget(key, false) // the job was deleted and created again
	}
	if !r.Jobs.VerdictsLoaded() {
		// The verdicts an earlier leader recorded are not loaded yet: what
		// is pending is unknown.
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	j, err := k.Wrap(obj)
	if err != nil {
		return reconcile.Result{}, err
	}
	if r.Book.Applying(obj.GetUID()) {
		// Decided; being applied to the job. Looked at again once it is
		// (a person may resume the job right after, and that change may
		// have been the event that brought it here).
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	// The job's rankgate.io/ annotations are a report for people, and
	// anyone who may patch the job may write them: they are never an
	// instruction. A fail verdict is acted on (suspend, delete) only by
	// the writes, from the verdict this controller decided or recorded in
	// the job's Gang. Here they only tell that a person resumed a
	// suspended job, which re-gates it (clearing them; nothing more).
	if d, ok := r.Verdicts.Carried(obj); ok {
		return r.decided(ctx, key, j, d)
	}
	r.undecided(key, k, obj)
	// Pods the scheduler cannot place: the Pending watchdog.
	again, failed := r.Pending.Step(ctx, k, obj)
	if failed {
		return reconcile.Result{}, nil
	}
	// Ranks whose DRA claims are allocated are known before they report.
	if wait, err := r.Alloc.Add(ctx, j); err != nil {
		r.Log.Error(err, "reading the job's DRA allocations", "job", key)
	} else if wait && (again == 0 || again > allocations.Recheck) {
		again = allocations.Recheck
	}
	uid, tracked := r.Open.UIDOf(key)
	if !r.Book.FirstReported(obj) && !(tracked && uid == obj.GetUID()) {
		return reconcile.Result{RequeueAfter: again}, nil
	}
	// A gang is running (possibly started before this leader): make sure
	// its deadline is armed, and fail it now if a missing rank can never
	// be placed.
	if g := r.Asks.EnsureGang(j); g.Open() {
		r.Asks.FailUnplaceable(ctx, g)
	}
	return reconcile.Result{RequeueAfter: again}, nil
}

// decided looks at job j, which carries verdict d: a person who resumed
// it after a fail re-gates it; a gang of that attempt still open here is
// answered with d.
func (r *Reconciler[D]) decided(ctx context.Context, key string, j kubeflow.Job, d *D) (reconcile.Result, error) {
	obj := j.Object()
	// A Kueue-managed job runs again when its Workload is active again;
	// until Kueue suspends it, a deactivated one is not resumed. The
	// writes re-gate it.
	resumed, err := r.Jobs.ResumedAfterFail(ctx, obj)
	if err != nil {
		return reconcile.Result{}, err
	}
	if resumed {
		r.Asks.AskRegate(obj, j.Kind())
		return reconcile.Result{}, nil
	}
	// Decided and applied by another replica (one that led before this
	// one, or at the same moment): a gang of that attempt still open here
	// is answered with the job's verdict now, not at its ranks' next poll.
	if g := r.Open.Get(obj.GetUID()); g != nil && g.Open() && g.Attempt() == contract.Attempt(obj.GetAnnotations()) {
		g.Answer(d, r.Clock.Now())
		a := obj.GetAnnotations()
		r.Log.Info("verdict on the job from another replica; open gang answered with it", "job", key,
			"verdict", a[contract.AnnotationVerdict], "decidedBy", a[contract.AnnotationDecidedBy])
	}
	r.Pending.Unwatch(key)
	return reconcile.Result{}, nil
}

// undecided keeps the Gang of an opted-in job without a verdict: it
// exists (0/N while no rank reported), and a decided gang whose verdict a
// person removed from the job is forgotten (the next verdict write starts
// a new attempt).
func (r *Reconciler[D]) undecided(key string, k kubeflow.Kind, obj client.Object) {
	if g := r.Open.Get(obj.GetUID()); g != nil {
		if d := g.Verdict(); d != nil && !r.Verdicts.Unrecorded(d) {
			r.forget(key, false)
		}
	}
	r.Book.Keep(obj, k.GVK().Kind)
}
