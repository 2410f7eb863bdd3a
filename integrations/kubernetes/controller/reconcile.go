package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
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
	router := c.newRouter()
	for _, k := range c.kinds {
		k := k
		kind := k.GVK().Kind
		r := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			return c.reconcile(ctx, k, req)
		})
		// Besides its own jobs' changes, a kind's reconciler gets what the
		// router sends it (router.go): its jobs with a pod becoming (un)
		// schedulable, the Pending jobs a node or device change may fail,
		// the jobs of a namespace whose opt-in changed.
		err := builder.ControllerManagedBy(c.mgr).
			Named(kind).
			For(k.New(), builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}))).
			WatchesRawSource(router.source(kind, toJob)).
			WithOptions(controllerOptions()).
			Complete(r)
		if err != nil {
			return fmt.Errorf("controller: %s reconciler: %w", kind, err)
		}
		if err := c.setupAllocations(k, router); err != nil {
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

func (c *Controller) reconcile(ctx context.Context, k kubeflow.Kind, req reconcile.Request) (reconcile.Result, error) {
	key := req.Namespace + "/" + k.GVK().Kind + "/" + req.Name
	obj := k.New()
	if err := c.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			c.forget(key)
			c.dropRes(key, nil)
			c.wd.unwatch(key)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if in, err := c.optedIn(ctx, obj); err != nil {
		return reconcile.Result{}, err
	} else if !in {
		c.forget(key)
		c.dropRes(key, nil)
		c.wd.unwatch(key)
		return reconcile.Result{}, nil
	}
	c.ensureJobCA(ctx, obj)
	if uid, ok := c.gangs.UIDOf(key); ok && uid != obj.GetUID() {
		c.forget(key) // the job was deleted and created again
		c.dropRes(key, nil)
	}
	if !c.recovered.Load() {
		// The verdicts an earlier leader recorded are not loaded yet: what
		// is pending is unknown.
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	j := wrap(obj)
	if _, ok := c.pendingDecision(obj.GetUID()); ok {
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
		return c.reconcileDecided(ctx, key, j, d)
	}
	c.noteUndecided(key, k, obj)
	// Pods the scheduler cannot place: the Pending watchdog (pending.go).
	again, failed := c.wd.step(ctx, k, obj)
	if failed {
		return reconcile.Result{}, nil
	}
	// Ranks whose DRA claims are allocated are known before they report.
	if wait, err := c.fromAllocations(ctx, j); err != nil {
		c.log.Error(err, "reading the job's DRA allocations", "job", key)
	} else if wait && (again == 0 || again > allocationRecheck) {
		again = allocationRecheck
	}
	uid, tracked := c.gangs.UIDOf(key)
	if !c.firstReported(obj) && !(tracked && uid == obj.GetUID()) {
		return reconcile.Result{RequeueAfter: again}, nil
	}
	// A gang is running (possibly started before this leader): make sure
	// its deadline is armed, and fail it now if a missing rank can never
	// be placed.
	g := c.ensureGang(j)
	if g.Open() {
		if m := c.missingRanks(ctx, g, g.Reported(), true); len(m) > 0 {
			c.askDecide(g, ask{why: trigUnplaceable, missing: m})
		}
	}
	return reconcile.Result{RequeueAfter: again}, nil
}

// reconcileDecided looks at job j, which carries verdict d: a person who
// resumed it after a fail re-gates it; a gang of that attempt still open
// here is answered with d.
func (c *Controller) reconcileDecided(ctx context.Context, key string, j job, d *decision) (reconcile.Result, error) {
	obj := j.Object()
	// A Kueue-managed job runs again when its Workload is active again;
	// until Kueue suspends it, a deactivated one is not resumed. The
	// writes re-gate it (jobwrites.go).
	resumed, err := c.resumedAfterFail(ctx, obj)
	if err != nil {
		return reconcile.Result{}, err
	}
	if resumed {
		c.askRegate(obj, j.Kind())
		return reconcile.Result{}, nil
	}
	// Decided and applied by another replica (one that led before this
	// one, or at the same moment): a gang of that attempt still open here
	// is answered with the job's verdict now, not at its ranks' next poll.
	if g := c.gangs.Get(obj.GetUID()); g != nil && g.Open() && g.Attempt() == jobAttempt(obj) {
		d.applied = true
		g.Answer(d, c.now())
		c.log.Info("verdict on the job from another replica; open gang answered with it", "job", key, "verdict", d.Report.Verdict, "decidedBy", d.DecidedBy)
	}
	c.wd.unwatch(key)
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
func (c *Controller) regate(ctx context.Context, key string, obj client.Object) (again bool, err error) {
	again, err = c.regateFor(ctx, obj, true, nil)
	if again || err != nil {
		return again, err
	}
	c.forget(key)
	c.dropRes(key, nil)
	a := obj.GetAnnotations()
	c.log.Info("job resumed after a fail verdict: gating its new pods again", "job", key, "previous", a[contract.AnnotationPreviousVerdict], "attempt", a[contract.AnnotationAttempt])
	return false, nil
}

// regateFor clears the verdict annotations from obj in one patch guarded
// by its resourceVersion, keeping the old verdict in
// rankgate.io/previous-verdict; with bump it counts one more attempt
// (rankgate.io/attempt), with restart it records the restart the new
// attempt judges (rankgate.io/restart-attempt, restart.go). again: the
// job changed meanwhile; a job that is gone needs nothing.
func (c *Controller) regateFor(ctx context.Context, obj client.Object, bump bool, restart *int32) (again bool, err error) {
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
	if err := c.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
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
func (c *Controller) firstReported(o client.Object) bool {
	if _, ok := o.GetAnnotations()[contract.AnnotationFirstReport]; ok {
		return true
	}
	r := c.lookupRes(o.GetUID())
	if r == nil || r.t.attempt != jobAttempt(o) {
		return false
	}
	obj := r.current()
	return obj != nil && obj.Status.FirstReportAt != nil
}

// noteUndecided keeps the Gang of an opted-in job without a verdict: it
// exists (0/N while no rank reported), and a decided gang whose verdict a
// person removed from the job is forgotten (the next verdict write starts
// a new attempt).
func (c *Controller) noteUndecided(key string, k kubeflow.Kind, obj client.Object) {
	if g := c.gangs.Get(obj.GetUID()); g != nil {
		if d := g.Verdict(); d != nil && !d.unrecorded {
			c.forget(key)
			c.dropRes(key, nil)
		}
	}
	if r := c.resFor(obj, k.GVK().Kind); r.current() == nil {
		c.touchProgress(obj.GetUID(), true)
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
