package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
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
		PodWakes: func(o, n *corev1.Pod) bool { return watchdog.Unschedulable(n) != watchdog.Unschedulable(o) },
		PodChanged: func(p *corev1.Pod) {
			if name := p.Labels[LabelJobName]; name != "" {
				c.wd.PodsChanged(p.Namespace, name)
			}
		},
		Pod: func(ctx context.Context, key types.NamespacedName) (*corev1.Pod, error) {
			p := &corev1.Pod{}
			return p, c.client.Get(ctx, key, p)
		},
		NodeChanged:       c.wd.NoteNodeChange,
		WatchNodes:        c.state.Nodes.Watch,
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
