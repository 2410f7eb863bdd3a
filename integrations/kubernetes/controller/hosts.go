package controller

import (
	"context"
	"time"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/allocations"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/jobs"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// newJobReconciler is c's job reconciler (package jobs).
func (c *Controller) newJobReconciler() *jobs.Reconciler[decision.Decision] {
	h := reconcilerHost{c}
	return &jobs.Reconciler[decision.Decision]{Jobs: h, Verdicts: h, Book: h, Asks: h, Open: c.gangs, Pending: c.wd,
		Alloc: c.newAllocations(), Clock: c.clock(), Log: c.log}
}

// reconcilerHost is what the job reconcilers (package jobs), the
// allocations reconcilers (package allocations) and the leader's writes
// (leader.Host, leaderwrites.go) ask of c; each package
// sees it through its own narrow ports.
type reconcilerHost struct{ c *Controller }

func (h reconcilerHost) VerdictsLoaded() bool { return h.c.verdictsLoaded() }

func (h reconcilerHost) CachedJob(ctx context.Context, k kubeflow.Kind, key types.NamespacedName) (client.Object, error) {
	return h.c.cachedJob(ctx, k, key)
}

func (h reconcilerHost) OptedIn(ctx context.Context, o client.Object) (bool, error) {
	return h.c.optedIn(ctx, o)
}

func (h reconcilerHost) ResumedAfterFail(ctx context.Context, o client.Object) (bool, error) {
	return h.c.w.ResumedAfterFail(ctx, o)
}

// Carried is the verdict o carries, as applied (it is on the job).
func (h reconcilerHost) Carried(o client.Object) (*decision.Decision, bool) {
	d, ok := decision.FromJob(o)
	if ok {
		d.Applied = true
	}
	return d, ok
}

func (h reconcilerHost) Unrecorded(d *decision.Decision) bool { return d.Unrecorded }

func (h reconcilerHost) Applying(uid types.UID) bool {
	_, ok := h.c.w.Book().Pending(uid)
	return ok
}

// FirstReported: a rank of the job's current attempt reported, as its
// Gang (loaded when this replica took the lead) or, from earlier
// releases, its rankgate.io/first-report-at says.
func (h reconcilerHost) FirstReported(o client.Object) bool {
	if _, ok := o.GetAnnotations()[contract.AnnotationFirstReport]; ok {
		return true
	}
	res := h.c.w.Book().Lookup(o.GetUID())
	if res == nil || res.Attempt() != contract.Attempt(o.GetAnnotations()) {
		return false
	}
	obj := res.Current()
	return obj != nil && obj.Status.FirstReportAt != nil
}

// Keep asks for the Gang of o when the book holds none yet.
func (h reconcilerHost) Keep(o client.Object, kind string) {
	if res := h.c.w.Book().ForJob(o, kind, h.c.opts.GangTimeout); res.Current() == nil {
		h.c.touchProgress(o.GetUID(), true)
	}
}

func (h reconcilerHost) Drop(key string) { h.c.w.Book().Drop(key) }

func (h reconcilerHost) EnsureJobCA(ctx context.Context, o client.Object) { h.c.ensureJobCA(ctx, o) }
func (h reconcilerHost) AskRegate(o client.Object, kind string)           { h.c.askRegate(o, kind) }
func (h reconcilerHost) EnsureGang(j job) *gang                           { return h.c.ensureGang(j) }

// FailUnplaceable asks for g to be decided at once when a missing rank
// can never be placed.
func (h reconcilerHost) FailUnplaceable(ctx context.Context, g *gang) {
	if m := h.c.missingRanks(ctx, g, g.Reported(), true); len(m) > 0 {
		h.c.askDecide(g, decision.Ask{Why: decision.OnUnplaceable, Missing: m})
	}
}

// The allocations reconcilers' own asks.

// newAllocations is c's allocations reconciler.
func (c *Controller) newAllocations() *allocations.Reconciler[decision.Decision] {
	h := reconcilerHost{c}
	return &allocations.Reconciler[decision.Decision]{Jobs: h, Gangs: h, Source: c.draSource, Clock: c.clock(), Log: c.log}
}

func (h reconcilerHost) Decided(o client.Object) bool { _, ok := decision.FromJob(o); return ok }

func (h reconcilerHost) JobPods(ctx context.Context, o client.Object) ([]*corev1.Pod, error) {
	return h.c.jobPods(ctx, o)
}

func (h reconcilerHost) OpenGang(uid types.UID) *gang     { return h.c.openGang(uid) }
func (h reconcilerHost) StartClock(g *gang, at time.Time) { h.c.startClock(g, at) }
func (h reconcilerHost) TouchProgress(uid types.UID)      { h.c.touchProgress(uid, false) }
func (h reconcilerHost) Decide(g *gang, r gangstore.Ready) {
	if why, ok := decision.ReadyTrigger(r); ok {
		h.c.askDecide(g, decision.Ask{Why: why})
	}
}
