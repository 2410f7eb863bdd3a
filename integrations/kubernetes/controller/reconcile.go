package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/jobs"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/router"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/watchdog"
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
	jr := c.newJobReconciler()
	for _, k := range c.kinds {
		k := k
		kind := k.GVK().Kind
		r := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			return jr.Reconcile(ctx, k, req)
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
		if err := c.setupAllocations(k, events, jr.Alloc); err != nil {
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

// newJobReconciler is c's job reconciler (package jobs).
func (c *Controller) newJobReconciler() *jobs.Reconciler[decision] {
	h := jobHost{c}
	return &jobs.Reconciler[decision]{Jobs: h, Verdicts: h, Book: h, Asks: h, Open: c.gangs, Pending: c.wd,
		Alloc: c.newAllocations(), Clock: c.clock(), Log: c.log}
}

// jobHost is what the job reconciler asks of c.
type jobHost struct{ c *Controller }

func (h jobHost) VerdictsLoaded() bool { return h.c.verdictsLoaded() }

func (h jobHost) CachedJob(ctx context.Context, k kubeflow.Kind, key types.NamespacedName) (client.Object, error) {
	return h.c.cachedJob(ctx, k, key)
}

func (h jobHost) OptedIn(ctx context.Context, o client.Object) (bool, error) {
	return h.c.optedIn(ctx, o)
}

func (h jobHost) ResumedAfterFail(ctx context.Context, o client.Object) (bool, error) {
	return h.c.resumedAfterFail(ctx, o)
}

// Carried is the verdict o carries, as applied (it is on the job).
func (h jobHost) Carried(o client.Object) (*decision, bool) {
	d, ok := recordedDecision(o)
	if ok {
		d.applied = true
	}
	return d, ok
}

func (h jobHost) Unrecorded(d *decision) bool { return d.unrecorded }

func (h jobHost) Applying(uid types.UID) bool {
	_, ok := h.c.book.pending(uid)
	return ok
}

// FirstReported: a rank of the job's current attempt reported, as its
// Gang (loaded when this replica took the lead) or, from earlier
// releases, its rankgate.io/first-report-at says.
func (h jobHost) FirstReported(o client.Object) bool {
	if _, ok := o.GetAnnotations()[contract.AnnotationFirstReport]; ok {
		return true
	}
	res := h.c.book.lookup(o.GetUID())
	if res == nil || res.t.attempt != contract.Attempt(o.GetAnnotations()) {
		return false
	}
	obj := res.current()
	return obj != nil && obj.Status.FirstReportAt != nil
}

// Keep asks for the Gang of o when the book holds none yet.
func (h jobHost) Keep(o client.Object, kind string) {
	if res := h.c.book.forJob(o, kind, h.c.opts.GangTimeout); res.current() == nil {
		h.c.touchProgress(o.GetUID(), true)
	}
}

func (h jobHost) Drop(key string) { h.c.book.drop(key, nil) }

func (h jobHost) EnsureJobCA(ctx context.Context, o client.Object) { h.c.ensureJobCA(ctx, o) }
func (h jobHost) AskRegate(o client.Object, kind string)           { h.c.askRegate(o, kind) }
func (h jobHost) EnsureGang(j job) *gang                           { return h.c.ensureGang(j) }

// FailUnplaceable asks for g to be decided at once when a missing rank
// can never be placed.
func (h jobHost) FailUnplaceable(ctx context.Context, g *gang) {
	if m := h.c.missingRanks(ctx, g, g.Reported(), true); len(m) > 0 {
		h.c.askDecide(g, ask{why: trigUnplaceable, missing: m})
	}
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
		set[contract.AnnotationAttempt] = strconv.Itoa(int(contract.Attempt(obj.GetAnnotations())) + 1)
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
