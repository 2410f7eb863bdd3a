package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/clusterstate"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/router"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource/dra"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
	"github.com/rankgate/rankgate/preflight"
)

// A rank's devices come from one of two sources (package devicesource):
// its own report, which its init container sends to the gate, and, for a
// pod whose GPUs come through DRA, its allocation: as soon as the
// scheduler has allocated a rank pod's claims (and bound it), its job's
// allocations reconciler resolves the devices to the facts their driver
// publishes and adds the rank to the gang as a report of source "dra".
// When every rank is known, the gang is decided and the verdict recorded
// and acted on before any container or image pull of the job starts.
//
// A rank's own report stands before its allocation: it replaces the
// allocation's report while the gang is open, and where the two name
// different devices, the rank's report carries a DRA_DEVICES_DISAGREE
// finding (it fails). A rank that reports itself after the gang was
// decided is answered with the verdict, unless its pod gets devices
// through DRA (its gang may have been decided from allocations, without
// its own report) and its own report fails or disagrees with its
// allocation: that rank alone is then answered fail (ownReportFails). The
// recorded verdict does not change. Other ranks' reports after the
// verdict get the verdict: it was decided on their reports.

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

// allocations is the allocations reconciler (one controller-runtime
// controller per job kind where DRA is served, this one type): a rank pod
// bound with resource claims (the scheduler allocated them first), or a
// claim whose allocation reaches the cache after its pod's binding,
// brings its job here (the router sends it, package router). It adds to the
// job's gang the ranks whose claims are allocated, as reports of the DRA
// device source, and asks for the decision when the gang is complete or
// already fails. It writes nothing itself. The job reconciler runs its
// add step too (a job's first look, after a leader change).
type allocations struct {
	jobs   jobView
	gangs  gangAsks
	source func() devicesource.Source // nil: DRA not served, or not synced
	clk    clock.PassiveClock
	log    logr.Logger
}

// allocations is c's allocations reconciler.
func (c *Controller) allocations() *allocations {
	return &allocations{jobs: c, gangs: c, source: c.draSource, clk: c.clock(), log: c.log}
}

// setupAllocations registers kind k's allocations reconciler a. Leader
// only, like the job reconcilers.
func (c *Controller) setupAllocations(k kubeflow.Kind, events *router.Router, a *allocations) error {
	if !c.dra.served {
		return nil
	}
	r := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		return a.reconcile(ctx, k, req)
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

// reconcile adds the ranks of the job req names whose claims are
// allocated to its gang (add): an opted-in job without a recorded
// verdict, once the recorded verdicts are loaded.
func (a *allocations) reconcile(ctx context.Context, k kubeflow.Kind, req reconcile.Request) (reconcile.Result, error) {
	if !a.jobs.verdictsLoaded() {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	obj, err := a.jobs.cachedJob(ctx, k, req.NamespacedName)
	if err != nil || obj == nil {
		return reconcile.Result{}, err
	}
	if in, err := a.jobs.optedIn(ctx, obj); err != nil || !in {
		return reconcile.Result{}, err
	}
	if _, ok := recordedDecision(obj); ok {
		return reconcile.Result{}, nil
	}
	wait, err := a.add(ctx, wrap(obj))
	if err != nil || !wait {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: allocationRecheck}, nil
}

// allocationRecheck: how soon a job is looked at again while a rank pod
// is bound but the cached claims do not show its allocation yet (the
// claim and pod informers deliver apart).
const allocationRecheck = 500 * time.Millisecond

// add adds to j's gang the ranks whose pods' claims are allocated and
// that have not reported themselves, and asks for the decision when the
// gang is complete or already fails. wait: a bound rank pod's allocation
// is not in the caches yet.
func (a *allocations) add(ctx context.Context, j job) (wait bool, err error) {
	src := a.source()
	if src == nil {
		return false, nil
	}
	held := func(int) bool { return false }
	if g := a.gangs.openGang(j.Object().GetUID()); g != nil {
		if !g.Open() {
			return false, nil
		}
		held = func(rank int) bool { _, ok := g.HolderOf(rank); return ok }
	}
	known, wait, err := a.ranks(ctx, j, src, held)
	if err != nil || len(known) == 0 {
		return wait, err
	}
	g := a.gangs.ensureGang(j)
	if !g.Open() {
		return false, nil
	}
	now := a.clk.Now()
	a.gangs.startClock(g, now)
	added, ready := addAllocated(g, known, now)
	if added == 0 {
		return wait, nil
	}
	a.log.Info("ranks known from their DRA allocations", "job", g.Key(), "added", added, "expected", g.Expected())
	a.gangs.touchProgress(g.UID(), false)
	if why, decide := readyTrigger(ready); decide {
		a.gangs.askDecide(g, ask{why: why})
	}
	return wait, nil
}

// ranks are the reports src makes of j's bound rank pods whose claims
// are allocated, but for ranks held already; wait: a bound rank pod's
// allocation is not known yet.
func (a *allocations) ranks(ctx context.Context, j job, src devicesource.Source, held func(rank int) bool) (known []allocatedRank, wait bool, err error) {
	pods := &corev1.PodList{}
	o := j.Object()
	if err := a.jobs.listJobPods(ctx, pods, o.GetNamespace(), o.GetName()); err != nil {
		return nil, false, fmt.Errorf("listing the pods of %s: %w", jobKey(j), err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !dra.UsesClaims(p) || p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Annotations[annoClaimsCut] != "" {
			continue
		}
		if ref, ok, err := a.jobs.jobOf(ctx, p); err != nil || !ok || ref.uid != o.GetUID() || podFits(j, p) != nil {
			continue
		}
		rank, err := kubeflow.RankOf(j, p)
		if err != nil || held(rank) {
			continue
		}
		r, err := src.Rank(ctx, p, rank)
		if err != nil {
			return nil, false, err
		}
		if r.Known {
			known = append(known, allocatedRank{pod: p, rr: r.Report})
		}
		wait = wait || r.Waiting != ""
	}
	return known, wait, nil
}

// addAllocated adds the allocations' reports to g, each unless its rank
// is held already (by another pod, by the rank's own report, or by its
// allocation: a claim's allocation does not change); it says how many
// ranks are new and whether g is to be decided.
func addAllocated(g *gang, known []allocatedRank, now time.Time) (added int, ready gangstore.Ready) {
	for _, k := range known {
		if _, held := g.HolderOf(k.rr.Rank); held {
			// Another pod holds it, the rank reported itself, or its
			// allocation (which does not change) is known already.
			continue
		}
		isNew, rd, h := g.Add(k.rr, string(k.pod.UID), now)
		if h != nil {
			continue
		}
		if isNew {
			added++
		}
		if rd == gangstore.Complete || ready == gangstore.NotReady {
			ready = rd
		}
	}
	return added, ready
}

type allocatedRank struct {
	pod *corev1.Pod
	rr  preflight.RankReport
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

// fromDRA counts the ranks whose reports come from their DRA allocations.
func fromDRA(ranks []preflight.RankReport) int {
	n := 0
	for _, r := range ranks {
		if r.Source == devicesource.DRA {
			n++
		}
	}
	return n
}
