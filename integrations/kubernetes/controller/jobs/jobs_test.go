package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/allocations"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/watchdog"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
	"github.com/rankgate/rankgate/verdict"
)

var t0 = time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)

const key = "ml/PyTorchJob/j"

// host is a fake of everything the reconciler reads and asks, for one
// job "j" (verdicts of type string).
type host struct {
	job          client.Object // nil: gone
	optedIn      bool
	loaded       bool
	applying     bool
	resumed      bool
	firstReport  bool
	unplaceable  bool // a missing rank can never be placed
	store        *gangstore.Store[string]
	cas, regates int
	kept         []string
	dropped      []string
	ensured      int
	failed       int
}

func newHost() *host {
	j := kubeflowtest.MakePyTorchJob("j", "ml").Workers(2).Obj()
	j.UID = "uid-1"
	return &host{job: j, optedIn: true, loaded: true, store: gangstore.New[string](gangstore.Gauges{})}
}

func (h *host) VerdictsLoaded() bool { return h.loaded }
func (h *host) CachedJob(context.Context, kubeflow.Kind, types.NamespacedName) (client.Object, error) {
	return h.job, nil
}
func (h *host) OptedIn(context.Context, client.Object) (bool, error) { return h.optedIn, nil }
func (h *host) ResumedAfterFail(context.Context, client.Object) (bool, error) {
	return h.resumed, nil
}
func (h *host) Carried(o client.Object) (*string, bool) {
	v, ok := o.GetAnnotations()[contract.AnnotationVerdict]
	return &v, ok
}
func (h *host) Unrecorded(d *string) bool                  { return *d == "unrecorded" }
func (h *host) Applying(types.UID) bool                    { return h.applying }
func (h *host) FirstReported(client.Object) bool           { return h.firstReport }
func (h *host) Keep(o client.Object, kind string)          { h.kept = append(h.kept, kind+"/"+o.GetName()) }
func (h *host) Drop(key string)                            { h.dropped = append(h.dropped, key) }
func (h *host) EnsureJobCA(context.Context, client.Object) { h.cas++ }
func (h *host) AskRegate(client.Object, string)            { h.regates++ }
func (h *host) FailUnplaceable(context.Context, *gangstore.Gang[string]) {
	if h.unplaceable {
		h.failed++
	}
}
func (h *host) EnsureGang(j kubeflow.Job) *gangstore.Gang[string] {
	h.ensured++
	g, _ := h.store.Ensure(gangstore.Spec{UID: j.Object().GetUID(), Key: key, Kind: "PyTorchJob", Namespace: "ml", Name: "j",
		Attempt: contract.Attempt(j.Object().GetAnnotations()), Expected: 2, Timeout: time.Minute})
	return g
}

// noPods is a watchdog host for a job none of whose pods is unschedulable.
type noPods struct{}

func (noPods) JobPods(context.Context, client.Object) ([]*corev1.Pod, error) { return nil, nil }
func (noPods) FullJob(context.Context, kubeflow.Kind, client.Object) (client.Object, error) {
	return nil, nil
}
func (noPods) JudgeLive(context.Context, kubeflow.Job, []*corev1.Pod, *watchdog.Judgement) (*watchdog.Judgement, error) {
	return nil, nil
}
func (noPods) ModelJudge() func(*watchdog.Judgement) bool             { return nil }
func (noPods) WantWaitingFor(client.Object, string, *verdict.Finding) {}
func (noPods) Fail(kubeflow.Job, verdict.Report)                      {}

func (h *host) reconciler() *Reconciler[string] {
	clk := clocktesting.NewFakeClock(t0)
	return &Reconciler[string]{Jobs: h, Verdicts: h, Book: h, Asks: h, Open: h.store,
		Pending: watchdog.New(noPods{}, clk, logr.Discard(), watchdog.Settings{Kinds: []string{"PyTorchJob"}}),
		Alloc:   &allocations.Reconciler[string]{Source: func() devicesource.Source { return nil }, Clock: clk, Log: logr.Discard()},
		Clock:   clk, Log: logr.Discard()}
}

func (h *host) reconcile(t *testing.T, r *Reconciler[string]) reconcile.Result {
	t.Helper()
	k, ok := kubeflow.ByName("PyTorchJob")
	require.True(t, ok)
	res, err := r.Reconcile(context.Background(), k, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ml", Name: "j"}})
	require.NoError(t, err)
	return res
}

func (h *host) annotate(kv ...string) {
	a := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		a[kv[i]] = kv[i+1]
	}
	h.job.SetAnnotations(a)
}

// A job that is gone or opted out loses its gang and its Gang.
func TestReconcileForgetsGoneAndOptedOut(t *testing.T) {
	for name, change := range map[string]func(h *host){
		"gone":      func(h *host) { h.job = nil },
		"opted out": func(h *host) { h.optedIn = false },
	} {
		t.Run(name, func(t *testing.T) {
			h := newHost()
			r := h.reconciler()
			h.EnsureGang(kubeflow.MustFromObject(h.job))
			change(h)
			require.Zero(t, h.reconcile(t, r).RequeueAfter)
			require.Nil(t, h.store.Get("uid-1"))
			require.Equal(t, []string{key}, h.dropped)
			require.Zero(t, h.cas)
		})
	}
}

// Until the recorded verdicts are loaded, and while a verdict is being
// applied, the job is looked at again a second later and nothing else is
// done; a job created again under its name drops the old one's gang.
func TestReconcileWaits(t *testing.T) {
	h := newHost()
	r := h.reconciler()
	old := h.job.DeepCopyObject().(client.Object)
	old.SetUID("uid-0")
	h.EnsureGang(kubeflow.MustFromObject(old))
	h.loaded = false
	require.Equal(t, time.Second, h.reconcile(t, r).RequeueAfter)
	require.Nil(t, h.store.Get("uid-0"), "the job was deleted and created again")
	require.Equal(t, 1, h.cas, "the namespace gets the CA bundle")
	require.Empty(t, h.kept)

	h.loaded, h.applying = true, true
	require.Equal(t, time.Second, h.reconcile(t, r).RequeueAfter)
	require.Empty(t, h.kept)
}

// A job without a verdict keeps its Gang; its gang is made sure of once a
// rank reported (an earlier leader's gang: its deadline armed), and fails
// at once when a missing rank can never be placed.
func TestReconcileUndecided(t *testing.T) {
	h := newHost()
	r := h.reconciler()
	h.reconcile(t, r)
	require.Equal(t, []string{"PyTorchJob/j"}, h.kept)
	require.Zero(t, h.ensured, "no rank reported: no gang")

	h.firstReport, h.unplaceable = true, true
	h.reconcile(t, r)
	require.Equal(t, 1, h.ensured)
	require.Equal(t, 1, h.failed)
	require.NotNil(t, h.store.Get("uid-1"))

	// A decided gang whose verdict a person removed from the job is
	// forgotten (the next verdict starts a new attempt); one answered but
	// never recorded is kept.
	d := "fail"
	h.store.Get("uid-1").Answer(&d, t0)
	h.firstReport = false
	h.reconcile(t, r)
	require.Nil(t, h.store.Get("uid-1"))
	g := h.EnsureGang(kubeflow.MustFromObject(h.job))
	u := "unrecorded"
	g.Answer(&u, t0)
	h.reconcile(t, r)
	require.Same(t, g, h.store.Get("uid-1"))
}

// A job carrying a verdict: resumed by a person after a fail, it is
// re-gated; otherwise an open gang of its attempt is answered with it.
func TestReconcileDecided(t *testing.T) {
	h := newHost()
	r := h.reconciler()
	g := h.EnsureGang(kubeflow.MustFromObject(h.job))
	h.annotate(contract.AnnotationVerdict, "pass", contract.AnnotationAttempt, "2")
	h.reconcile(t, r)
	require.True(t, g.Open(), "a verdict of another attempt does not answer the gang")

	h.annotate(contract.AnnotationVerdict, "pass")
	h.reconcile(t, r)
	require.False(t, g.Open())
	require.Equal(t, "pass", *g.Verdict())
	require.Empty(t, h.kept, "a decided job's Gang is the writes' business")

	h.resumed = true
	h.reconcile(t, r)
	require.Equal(t, 1, h.regates)
}
