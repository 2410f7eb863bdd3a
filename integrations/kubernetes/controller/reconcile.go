package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/allocations"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/router"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/watchdog"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
	"github.com/rankgate/rankgate/preflight"
)

// setupReconcilers registers one reconciler per installed job kind. They
// run on the leader only and keep gangs in step with their jobs: arm the
// deadline of a gang an earlier leader started, fail a gang at once when a
// missing rank can never be placed, re-gate a job a person resumed after a
// fail, drop gangs of deleted jobs.
func (c *Controller) setupReconcilers() error {
	// Whether DRA objects are served decides the ResourceSlice watch.
	if err := c.startDRA(context.Background()); err != nil {
		return err
	}
	events := c.newRouter()
	jobs := c.jobReconciler()
	for _, k := range c.kinds {
		k := k
		kind := k.GVK().Kind
		r := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			return jobs.reconcile(ctx, k, req)
		})
		// Besides its own jobs' changes, a kind's reconciler gets what the
		// router sends it (package router): its jobs with a pod becoming (un)
		// schedulable, the Pending jobs a node or device change may fail,
		// the jobs of a namespace whose opt-in changed.
		err := builder.ControllerManagedBy(c.mgr).
			Named(kind).
			For(k.New(), builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
			WatchesRawSource(events.Source(kind, router.ToJob)).
			WithOptions(controllerOptions()).
			Complete(r)
		if err != nil {
			return fmt.Errorf("controller: %s reconciler: %w", kind, err)
		}
		if err := c.setupAllocations(k, events, jobs.alloc); err != nil {
			return err
		}
	}
	// The pod, node and namespace informers start with the manager, not on
	// the first gate request.
	if err := c.startModel(context.Background()); err != nil {
		return err
	}
	for _, o := range []client.Object{&corev1.Node{}, &corev1.Namespace{}} {
		if _, err := c.mgr.GetCache().GetInformer(context.Background(), o); err != nil {
			return err
		}
	}
	return nil
}

// jobReconciler is the job reconciler (one controller-runtime controller
// per job kind, this one type). It keeps the gang of each opted-in job in
// step with the job: drops the gangs of deleted and opted-out jobs, keeps
// a Gang for every gated job, runs the Pending watchdog's and the
// allocations' steps, arms the deadline of a gang an earlier leader
// started, fails a gang at once when a missing rank can never be placed,
// and asks for a re-gate when a person resumed a failed job. It writes
// nothing itself: it asks the writes.
type jobReconciler struct {
	jobs    jobView
	gangs   gangAsks
	host    jobHost
	open    *gangstore.Store[decision] // the open gangs
	book    *gangBook                  // the Gangs of the gated jobs
	pending *watchdog.Watchdog
	alloc   *allocations.Reconciler[decision]
	clk     clock.PassiveClock
	log     logr.Logger
	// gangTimeout: a gang's timeout unless its job sets its own.
	gangTimeout time.Duration
}

// jobReconciler is c's job reconciler.
func (c *Controller) jobReconciler() *jobReconciler {
	return &jobReconciler{jobs: c, gangs: c, host: c, open: c.gangs, book: c.book, pending: c.wd, alloc: c.newAllocations(),
		clk: c.clock(), log: c.log, gangTimeout: c.opts.GangTimeout}
}

// jobHost is what the job reconciler asks besides the gangs.
type jobHost interface {
	// ensureJobCA gives the job's namespace the gate's CA bundle.
	ensureJobCA(ctx context.Context, o client.Object)
	// resumedAfterFail: a person resumed the job after a fail verdict.
	resumedAfterFail(ctx context.Context, obj client.Object) (bool, error)
	// askRegate asks the writes to re-gate the job.
	askRegate(obj client.Object, kind string)
	// missingRanks are g's missing ranks (only those that can never be
	// placed, with onlyUnplaceable).
	missingRanks(ctx context.Context, g *gang, reported []preflight.RankReport, onlyUnplaceable bool) map[int]preflight.MissingRank
}

// forget drops what is held for job key: its gang, its Gang resource
// and, with unwatch, its Pending watch.
func (r *jobReconciler) forget(key string, unwatch bool) {
	r.open.Forget(key)
	r.book.drop(key, nil)
	if unwatch {
		r.pending.Unwatch(key)
	}
}

func (r *jobReconciler) reconcile(ctx context.Context, k kubeflow.Kind, req reconcile.Request) (reconcile.Result, error) {
	key := req.Namespace + "/" + k.GVK().Kind + "/" + req.Name
	obj, err := r.jobs.cachedJob(ctx, k, req.NamespacedName)
	if err != nil {
		return reconcile.Result{}, err
	}
	if obj == nil {
		r.forget(key, true)
		return reconcile.Result{}, nil
	}
	if in, err := r.jobs.optedIn(ctx, obj); err != nil {
		return reconcile.Result{}, err
	} else if !in {
		r.forget(key, true)
		return reconcile.Result{}, nil
	}
	r.host.ensureJobCA(ctx, obj)
	if uid, ok := r.open.UIDOf(key); ok && uid != obj.GetUID() {
		r.forget(key, false) // the job was deleted and created again
	}
	if !r.jobs.verdictsLoaded() {
		// The verdicts an earlier leader recorded are not loaded yet: what
		// is pending is unknown.
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	j := wrap(obj)
	if _, ok := r.book.pending(obj.GetUID()); ok {
		// Decided; being applied to the job. Looked at again once it is
		// (a person may resume the job right after, and that change may
		// have been the event that brought it here).
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	// The job's rankgate.io/ annotations are a report for people, and
	// anyone who may patch the job may write them: they are never an
	// instruction. A fail verdict is acted on (suspend, delete) only by
	// apply, from the verdict this controller decided or recorded in the
	// job's Gang. Here they only tell that a person resumed a
	// suspended job, which re-gates it (clearing them; nothing more).
	if d, ok := recordedDecision(obj); ok {
		return r.decided(ctx, key, j, d)
	}
	r.undecided(key, k, obj)
	// Pods the scheduler cannot place: the Pending watchdog (package watchdog).
	again, failed := r.pending.Step(ctx, k, obj)
	if failed {
		return reconcile.Result{}, nil
	}
	// Ranks whose DRA claims are allocated are known before they report.
	if wait, err := r.alloc.Add(ctx, j); err != nil {
		r.log.Error(err, "reading the job's DRA allocations", "job", key)
	} else if wait && (again == 0 || again > allocations.Recheck) {
		again = allocations.Recheck
	}
	uid, tracked := r.open.UIDOf(key)
	if !r.firstReported(obj) && !(tracked && uid == obj.GetUID()) {
		return reconcile.Result{RequeueAfter: again}, nil
	}
	// A gang is running (possibly started before this leader): make sure
	// its deadline is armed, and fail it now if a missing rank can never
	// be placed.
	g := r.gangs.ensureGang(j)
	if g.Open() {
		if m := r.host.missingRanks(ctx, g, g.Reported(), true); len(m) > 0 {
			r.gangs.askDecide(g, ask{why: trigUnplaceable, missing: m})
		}
	}
	return reconcile.Result{RequeueAfter: again}, nil
}

// decided looks at job j, which carries verdict d: a person who resumed
// it after a fail re-gates it; a gang of that attempt still open here is
// answered with d.
func (r *jobReconciler) decided(ctx context.Context, key string, j job, d *decision) (reconcile.Result, error) {
	obj := j.Object()
	// A Kueue-managed job runs again when its Workload is active again;
	// until Kueue suspends it, a deactivated one is not resumed. The
	// writes re-gate it (jobwrites.go).
	resumed, err := r.host.resumedAfterFail(ctx, obj)
	if err != nil {
		return reconcile.Result{}, err
	}
	if resumed {
		r.host.askRegate(obj, j.Kind())
		return reconcile.Result{}, nil
	}
	// Decided and applied by another replica (one that led before this
	// one, or at the same moment): a gang of that attempt still open here
	// is answered with the job's verdict now, not at its ranks' next poll.
	if g := r.open.Get(obj.GetUID()); g != nil && g.Open() && g.Attempt() == jobAttempt(obj) {
		d.applied = true
		g.Answer(d, r.clk.Now())
		r.log.Info("verdict on the job from another replica; open gang answered with it", "job", key, "verdict", d.Report.Verdict, "decidedBy", d.DecidedBy)
	}
	r.pending.Unwatch(key)
	return reconcile.Result{}, nil
}

// regate clears a fail verdict from a job a person resumed (suspend set
// back to false): its new pods form a new gang, the job's next attempt
// (rankgate.io/attempt, one more, in the same patch), with a Gang of its
// own. The old verdict is kept in rankgate.io/previous-verdict, and in the
// earlier attempt's Gang.
//
// again: the job changed meanwhile (the patch's resourceVersion is
// stale); look at it again.
func (w *writes) regate(ctx context.Context, key string, obj client.Object) (again bool, err error) {
	again, err = w.regateFor(ctx, obj, true, nil)
	if again || err != nil {
		return again, err
	}
	w.gangs.Forget(key)
	w.book.drop(key, nil)
	a := obj.GetAnnotations()
	w.log.Info("job resumed after a fail verdict: gating its new pods again", "job", key, "previous", a[contract.AnnotationPreviousVerdict], "attempt", a[contract.AnnotationAttempt])
	return false, nil
}

// regateFor clears the verdict annotations from obj in one patch guarded
// by its resourceVersion, keeping the old verdict in
// rankgate.io/previous-verdict; with bump it counts one more attempt
// (rankgate.io/attempt), with restart it records the restart the new
// attempt judges (rankgate.io/restart-attempt, restart.go). again: the
// job changed meanwhile; a job that is gone needs nothing.
func (w *writes) regateFor(ctx context.Context, obj client.Object, bump bool, restart *int32) (again bool, err error) {
	a := obj.GetAnnotations()
	set := map[string]any{}
	for _, k := range []string{contract.AnnotationVerdict, contract.AnnotationReason, contract.AnnotationRules, contract.AnnotationDecidedAt,
		contract.AnnotationDecidedBy, contract.AnnotationReport, contract.AnnotationAction, contract.AnnotationFirstReport} {
		set[k] = nil
	}
	if v := a[contract.AnnotationVerdict]; v != "" {
		set[contract.AnnotationPreviousVerdict] = fmt.Sprintf("%s %s %s", v, a[contract.AnnotationDecidedAt], a[contract.AnnotationRules])
	}
	if bump {
		set[contract.AnnotationAttempt] = strconv.Itoa(int(jobAttempt(obj)) + 1)
	}
	if restart != nil {
		set[contract.AnnotationRestartAttempt] = strconv.Itoa(int(*restart))
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": obj.GetResourceVersion(), "annotations": set}})
	if err != nil {
		return false, err
	}
	if err := w.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		switch {
		case apierrors.IsConflict(err):
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil // the job is gone
		}
		return false, err
	}
	return false, nil
}

func controllerOptions() crcontroller.Options {
	// Several controllers may run in one process (tests, benchmarks).
	return crcontroller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: ptr.To(true)}
}

// firstReported: a rank of the job's current attempt reported, as its
// Gang (loaded when this replica took the lead) or, from earlier
// releases, its rankgate.io/first-report-at says.
func (r *jobReconciler) firstReported(o client.Object) bool {
	if _, ok := o.GetAnnotations()[contract.AnnotationFirstReport]; ok {
		return true
	}
	res := r.book.lookup(o.GetUID())
	if res == nil || res.t.attempt != jobAttempt(o) {
		return false
	}
	obj := res.current()
	return obj != nil && obj.Status.FirstReportAt != nil
}

// undecided keeps the Gang of an opted-in job without a verdict: it
// exists (0/N while no rank reported), and a decided gang whose verdict a
// person removed from the job is forgotten (the next verdict write starts
// a new attempt).
func (r *jobReconciler) undecided(key string, k kubeflow.Kind, obj client.Object) {
	if g := r.open.Get(obj.GetUID()); g != nil {
		if d := g.Verdict(); d != nil && !d.unrecorded {
			r.forget(key, false)
		}
	}
	if res := r.book.forJob(obj, k.GVK().Kind, r.gangTimeout); res.current() == nil {
		r.gangs.touchProgress(obj.GetUID(), true)
	}
}

// jobsIn lists the cached jobs of kind k in namespace ns as requests.
func (c *Controller) jobsIn(ctx context.Context, kind, ns string) []reconcile.Request {
	k, ok := kubeflow.ByName(kind)
	if !ok {
		return nil
	}
	list := k.NewList()
	if err := c.client.List(ctx, list, client.InNamespace(ns)); err != nil {
		c.log.Error(err, "listing the jobs of a namespace whose opt-in changed", "namespace", ns, "kind", kind)
		return nil
	}
	var out []reconcile.Request
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		if m, ok := o.(client.Object); ok {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: m.GetName()}})
		}
		return nil
	})
	return out
}

// newRouter is the router of c's job reconcilers.
func (c *Controller) newRouter() *router.Router {
	return router.New(router.Deps{
		JobOf: func(ctx context.Context, p *corev1.Pod) (string, string, bool, error) {
			ref, ok, err := c.jobOf(ctx, p)
			return ref.kind, ref.name, ok, err
		},
		PodWakes:    func(o, n *corev1.Pod) bool { return watchdog.Unschedulable(n) != watchdog.Unschedulable(o) },
		NodeMatters: nodeMatters,
		Pod: func(ctx context.Context, key types.NamespacedName) (*corev1.Pod, error) {
			p := &corev1.Pod{}
			return p, c.client.Get(ctx, key, p)
		},
		NodeChanged: c.wd.NoteNodeChange,
		NodeApplied: func(name string, n *corev1.Node) {
			if n == nil {
				c.state.Nodes.Remove(name)
				return
			}
			c.state.Nodes.Apply(n)
		},
		AffectedByNode:    c.wd.AffectedByNode,
		AffectedByDevices: c.wd.AffectedByDevices,
		JobsIn:            c.jobsIn,
		Informer: func(ctx context.Context, o client.Object) (crcache.Informer, error) {
			return c.mgr.GetCache().GetInformer(ctx, o)
		},
		DRA:   c.dra.served,
		Rules: c.dra.rulesServed,
		Log:   func(err error, msg string, kv ...any) { c.log.Error(err, msg, kv...) },
	})
}
