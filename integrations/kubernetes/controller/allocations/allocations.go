// Package allocations is the allocations reconciler: a rank's devices come
// from one of two sources (package devicesource): its own report, which its
// init container sends to the gate, and, for a pod whose GPUs come through
// DRA, its allocation. As soon as the scheduler has allocated a rank pod's
// claims (and bound it), its job's allocations reconciler resolves the
// devices to the facts their driver publishes and adds the rank to the
// gang as a report of source "dra". When every rank is known, the gang is
// decided and the verdict recorded and acted on before any container or
// image pull of the job starts.
//
// A rank's own report stands before its allocation: it replaces the
// allocation's report while the gang is open (the gate does that), and a
// rank held already (by its own report, by another pod, by its allocation,
// which does not change) is never replaced here.
//
// The reconciler writes nothing: it reads the jobs and their pods (Jobs)
// and adds to the open gangs and asks for their decision (Gangs).
package allocations

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource/dra"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
	"github.com/rankgate/rankgate/preflight"
)

// Recheck: how soon a job is looked at again while a rank pod is bound
// but the cached claims do not show its allocation yet (the claim and pod
// informers deliver apart).
const Recheck = 500 * time.Millisecond

// Jobs is what the reconciler reads of jobs and their pods.
type Jobs interface {
	// VerdictsLoaded: the verdicts earlier leaders recorded are loaded
	// (until then what is pending is unknown).
	VerdictsLoaded() bool
	// CachedJob is the cached job of kind k at key; nil when there is none.
	CachedJob(ctx context.Context, k kubeflow.Kind, key types.NamespacedName) (client.Object, error)
	// OptedIn: the job is gated (its own setting, else its namespace's).
	OptedIn(ctx context.Context, o client.Object) (bool, error)
	// Decided: the job carries a recorded verdict.
	Decided(o client.Object) bool
	// JobPods are the cached pods of o's job that are its own and fit its
	// spec.
	JobPods(ctx context.Context, o client.Object) ([]*corev1.Pod, error)
}

// Gangs are the open gangs (their verdicts of type D), and what the
// reconciler asks of the writes about them.
type Gangs[D any] interface {
	// OpenGang is the gang of the job with uid, nil when none is held.
	OpenGang(uid types.UID) *gangstore.Gang[D]
	// EnsureGang is j's gang, created (with its Gang asked for) if needed.
	EnsureGang(j kubeflow.Job) *gangstore.Gang[D]
	// StartClock sets g's first report at (the earliest known) and arms
	// its deadline.
	StartClock(g *gangstore.Gang[D], at time.Time)
	// TouchProgress asks for the gang's progress to be written.
	TouchProgress(uid types.UID)
	// Decide asks for g to be decided: ready says why (every rank known,
	// or the ranks known fail already).
	Decide(g *gangstore.Gang[D], ready gangstore.Ready)
}

// Reconciler is the allocations reconciler (one controller-runtime
// controller per job kind where DRA is served, this one type): a rank pod
// bound with resource claims, or a claim whose allocation reaches the
// cache after its pod's binding, brings its job here. It adds to the
// job's gang the ranks whose claims are allocated, as reports of the DRA
// device source, and asks for the decision when the gang is complete or
// already fails. The job reconciler runs its Add step too (a job's first
// look, after a leader change).
type Reconciler[D any] struct {
	Jobs  Jobs
	Gangs Gangs[D]
	// Source is the DRA device source; nil: DRA not served, or its caches
	// not synced.
	Source func() devicesource.Source
	Clock  clock.PassiveClock
	Log    logr.Logger
}

// Reconcile adds the ranks of the job req names whose claims are
// allocated to its gang (Add): an opted-in job without a recorded
// verdict, once the recorded verdicts are loaded.
func (a *Reconciler[D]) Reconcile(ctx context.Context, k kubeflow.Kind, req reconcile.Request) (reconcile.Result, error) {
	if !a.Jobs.VerdictsLoaded() {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	obj, err := a.Jobs.CachedJob(ctx, k, req.NamespacedName)
	if err != nil || obj == nil {
		return reconcile.Result{}, err
	}
	if in, err := a.Jobs.OptedIn(ctx, obj); err != nil || !in {
		return reconcile.Result{}, err
	}
	if a.Jobs.Decided(obj) {
		return reconcile.Result{}, nil
	}
	j, err := k.Wrap(obj)
	if err != nil {
		return reconcile.Result{}, err
	}
	wait, err := a.Add(ctx, j)
	if err != nil || !wait {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: Recheck}, nil
}

// Add adds to j's gang the ranks whose pods' claims are allocated and
// that are not held yet, and asks for the decision when the gang is
// complete or already fails. wait: a bound rank pod's allocation is not
// in the caches yet.
func (a *Reconciler[D]) Add(ctx context.Context, j kubeflow.Job) (wait bool, err error) {
	src := a.Source()
	if src == nil {
		return false, nil
	}
	held := func(int) bool { return false }
	if g := a.Gangs.OpenGang(j.Object().GetUID()); g != nil {
		if !g.Open() {
			return false, nil
		}
		held = func(rank int) bool { _, ok := g.HolderOf(rank); return ok }
	}
	known, wait, err := a.ranks(ctx, j, src, held)
	if err != nil || len(known) == 0 {
		return wait, err
	}
	g := a.Gangs.EnsureGang(j)
	if !g.Open() {
		return false, nil
	}
	now := a.Clock.Now()
	a.Gangs.StartClock(g, now)
	added, ready := addAllocated(g, known, now)
	if added == 0 {
		return wait, nil
	}
	a.Log.Info("ranks known from their DRA allocations", "job", g.Key(), "added", added, "expected", g.Expected())
	a.Gangs.TouchProgress(g.UID())
	if ready != gangstore.NotReady {
		a.Gangs.Decide(g, ready)
	}
	return wait, nil
}

// rank is a rank pod whose allocation is known, with its report.
type rank struct {
	pod *corev1.Pod
	rr  preflight.RankReport
}

// ranks are the reports src makes of j's bound rank pods whose claims
// are allocated, but for ranks held already; wait: a bound rank pod's
// allocation is not known yet. A pod with more claims than the cache
// keeps is not judged from its allocation (its own report still comes).
func (a *Reconciler[D]) ranks(ctx context.Context, j kubeflow.Job, src devicesource.Source, held func(rank int) bool) (known []rank, wait bool, err error) {
	pods, err := a.Jobs.JobPods(ctx, j.Object())
	if err != nil {
		return nil, false, fmt.Errorf("listing the pods of %s/%s: %w", j.Object().GetNamespace(), j.Name(), err)
	}
	for _, p := range pods {
		if !dra.UsesClaims(p) || p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Annotations[contract.CachedAnnotationClaimsCut] != "" {
			continue
		}
		n, err := kubeflow.RankOf(j, p)
		if err != nil || held(n) {
			continue
		}
		r, err := src.Rank(ctx, p, n)
		if err != nil {
			return nil, false, err
		}
		if r.Known {
			known = append(known, rank{pod: p, rr: r.Report})
		}
		wait = wait || r.Waiting != ""
	}
	return known, wait, nil
}

// addAllocated adds the allocations' reports to g, each unless its rank
// is held already (by another pod, by the rank's own report, or by its
// allocation: a claim's allocation does not change); it says how many
// ranks are new and whether g is to be decided.
func addAllocated[D any](g *gangstore.Gang[D], known []rank, now time.Time) (added int, ready gangstore.Ready) {
	for _, k := range known {
		if _, held := g.HolderOf(k.rr.Rank); held {
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
