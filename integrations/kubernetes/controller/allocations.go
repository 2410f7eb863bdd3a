package controller

import (
	"context"
	"fmt"
	"sync"

	resourcev1 "k8s.io/api/resource/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/allocations"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/clusterstate"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/router"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource/dra"
	"github.com/rankgate/rankgate/preflight"
)

// The allocations reconcilers (package allocations) add to the gangs the
// ranks whose DRA claims are allocated; here are their wiring (what they
// ask of the controller: reconcilerHost, hosts.go) and the DRA device
// source over the controller's caches.
//
// A rank that reports itself after the gang was decided is answered with
// the verdict, unless its pod gets devices through DRA (its gang may have
// been decided from allocations, without its own report) and its own
// report fails or disagrees with its allocation: that rank alone is then
// answered fail (ownReportFails). The recorded verdict does not change.
// Other ranks' reports after the verdict get the verdict: it was decided
// on their reports.

// poolIndex indexes the cached ResourceSlices by driver and pool.
const poolIndex = "rankgate.pool"

func poolKey(driver, pool string) string { return driver + "/" + pool }

func slicePool(obj any) ([]string, error) {
	s, ok := obj.(*resourcev1.ResourceSlice)
	if !ok {
		return nil, nil
	}
	return []string{poolKey(s.Spec.Driver, s.Spec.Pool.Name)}, nil
}

// draCacheObjects are the controller's DRA caches as the DRA device
// source reads them.
type draCacheObjects struct{ d *draCaches }

func (o draCacheObjects) Claim(ns, name string) *resourcev1.ResourceClaim {
	if o.d.claims == nil {
		return nil
	}
	obj, ok, err := o.d.claims.GetByKey(ns + "/" + name)
	if err != nil || !ok {
		return nil
	}
	c, _ := obj.(*resourcev1.ResourceClaim)
	return c
}

func (o draCacheObjects) Pool(driver, pool string) []*resourcev1.ResourceSlice {
	idx, ok := o.d.slices.(toolscache.Indexer)
	if !ok {
		return nil
	}
	items, err := idx.ByIndex(poolIndex, poolKey(driver, pool))
	if err != nil {
		return nil
	}
	out := make([]*resourcev1.ResourceSlice, 0, len(items))
	for _, i := range items {
		if s, ok := i.(*resourcev1.ResourceSlice); ok {
			out = append(out, s)
		}
	}
	return out
}

// draSource is the DRA device source over the controller's caches; nil
// where DRA is not served or the caches have not synced.
func (c *Controller) draSource() devicesource.Source {
	d := &c.dra
	if !d.served || !clusterstate.AllSynced(d.synced) || d.claims == nil || d.slices == nil {
		return nil
	}
	return &dra.Source{Objects: draCacheObjects{d}, Drivers: draDrivers(), Pools: &d.pools}
}

// draDrivers is the embedded known-bad driver table, parsed once (it is
// read only).
var draDrivers = sync.OnceValue(preflight.DefaultDriverTable)

// setupAllocations registers kind k's allocations reconciler a. Leader
// only, like the job reconcilers.
func (c *Controller) setupAllocations(k kubeflow.Kind, events *router.Router, a *allocations.Reconciler[decision.Decision]) error {
	if !c.dra.served {
		return nil
	}
	r := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		return a.Reconcile(ctx, k, req)
	})
	err := builder.ControllerManagedBy(c.mgr).Named(k.GVK().Kind + "Allocations").
		WatchesRawSource(events.Source(k.GVK().Kind, router.ToAllocations)).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: 8, SkipNameValidation: ptr.To(true)}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("controller: %s allocations reconciler: %w", k.GVK().Kind, err)
	}
	return nil
}

// joinLimited joins the first n of s with "; " and says how many more.
func joinLimited(s []string, n int) string {
	out := ""
	for i, x := range s {
		if i == n {
			return out + fmt.Sprintf("; and %d more", len(s)-n)
		}
		if i > 0 {
			out += "; "
		}
		out += x
	}
	return out
}
