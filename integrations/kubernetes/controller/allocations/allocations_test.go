package allocations

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

var t0 = time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)

// world is a job of two DRA workers, its pods, what the DRA source knows
// of each, and the open gangs (verdicts of type string).
type world struct {
	job     client.Object
	pods    []*corev1.Pod
	known   map[string]devicesource.Rank // by pod name
	srcErr  error
	gone    bool // DRA not served
	loaded  bool
	decided bool
	store   *gangstore.Store[string]
	starts  []time.Time
	touched int
	decides []gangstore.Ready
}

func newWorld(t *testing.T) *world {
	t.Helper()
	pj := kubeflowtest.MakePyTorchJob("j", "ml").Workers(2).Obj()
	pj.UID = "j-uid"
	w := &world{job: pj, known: map[string]devicesource.Rank{}, loaded: true, store: gangstore.New[string](gangstore.Gauges{})}
	for i := 0; i < 2; i++ {
		w.pods = append(w.pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("j-worker-%d", i), Namespace: "ml", UID: types.UID(fmt.Sprintf("p%d", i)),
				Labels: map[string]string{"training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": fmt.Sprint(i)}},
			Spec: corev1.PodSpec{NodeName: "n1", ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptrTo("mig")}}},
		})
	}
	return w
}

func ptrTo[T any](v T) *T { return &v }

func (w *world) report(rank int, id string) devicesource.Rank {
	return devicesource.Rank{Known: true, Report: preflight.RankReport{Rank: rank, Pod: fmt.Sprintf("j-worker-%d", rank), Source: devicesource.DRA,
		Report: verdict.Report{Verdict: verdict.VerdictPass, Devices: []verdict.DeviceSummary{{ID: id, Kind: "mig", GPUUUID: "GPU-a", Profile: "1g.10gb", SMs: 16}}}}}
}

func (w *world) reconciler(clk *clocktesting.FakeClock) *Reconciler[string] {
	return &Reconciler[string]{Jobs: w, Gangs: w, Clock: clk, Log: logr.Discard(), Source: func() devicesource.Source {
		if w.gone {
			return nil
		}
		return w
	}}
}

// Jobs.
func (w *world) VerdictsLoaded() bool { return w.loaded }
func (w *world) CachedJob(_ context.Context, _ kubeflow.Kind, key types.NamespacedName) (client.Object, error) {
	if key.Name != w.job.GetName() {
		return nil, nil
	}
	return w.job, nil
}
func (w *world) OptedIn(context.Context, client.Object) (bool, error) { return true, nil }
func (w *world) Decided(client.Object) bool                           { return w.decided }
func (w *world) JobPods(context.Context, client.Object) ([]*corev1.Pod, error) {
	return w.pods, nil
}

// Gangs.
func (w *world) OpenGang(uid types.UID) *gangstore.Gang[string] { return w.store.Get(uid) }
func (w *world) EnsureGang(j kubeflow.Job) *gangstore.Gang[string] {
	g, _ := w.store.Ensure(gangstore.Spec{UID: j.Object().GetUID(), Key: "ml/PyTorchJob/j", Kind: "PyTorchJob", Namespace: "ml", Name: "j", Expected: 2, Timeout: time.Minute})
	return g
}
func (w *world) StartClock(_ *gangstore.Gang[string], at time.Time) { w.starts = append(w.starts, at) }
func (w *world) TouchProgress(types.UID)                            { w.touched++ }
func (w *world) Decide(_ *gangstore.Gang[string], r gangstore.Ready) {
	w.decides = append(w.decides, r)
}

// The DRA source.
func (w *world) Name() string { return devicesource.DRA }
func (w *world) Rank(_ context.Context, p *corev1.Pod, rank int) (devicesource.Rank, error) {
	if w.srcErr != nil {
		return devicesource.Rank{}, w.srcErr
	}
	return w.known[p.Name], nil
}

func request() reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ml", Name: "j"}}
}

func pytorch(t *testing.T) kubeflow.Kind {
	k, ok := kubeflow.ByName("PyTorchJob")
	require.True(t, ok)
	return k
}

// A job's ranks join its gang as their claims are allocated: the first
// starts the gang's clock and is looked at again while the other's
// allocation is not cached; the last completes the gang and asks for the
// decision, once.
func TestReconcileAddsRanksAsAllocated(t *testing.T) {
	w := newWorld(t)
	clk := clocktesting.NewFakeClock(t0)
	a := w.reconciler(clk)
	w.known["j-worker-0"] = w.report(0, "MIG-0")
	w.known["j-worker-1"] = devicesource.Rank{Waiting: "claim ml/j-worker-1-gpu is not allocated yet"}

	res, err := a.Reconcile(context.Background(), pytorch(t), request())
	require.NoError(t, err)
	require.Equal(t, Recheck, res.RequeueAfter, "a bound rank's allocation is not cached yet")
	g := w.store.Get("j-uid")
	require.NotNil(t, g)
	require.Equal(t, []time.Time{t0}, w.starts)
	require.Equal(t, 1, w.touched)
	require.Empty(t, w.decides)
	h, ok := g.HolderOf(0)
	require.True(t, ok)
	require.Equal(t, devicesource.DRA, h.Source)

	clk.Step(time.Second)
	w.known["j-worker-1"] = w.report(1, "MIG-1")
	res, err = a.Reconcile(context.Background(), pytorch(t), request())
	require.NoError(t, err)
	require.Zero(t, res.RequeueAfter)
	require.Equal(t, []gangstore.Ready{gangstore.Complete}, w.decides)

	_, err = a.Reconcile(context.Background(), pytorch(t), request())
	require.NoError(t, err)
	require.Len(t, w.decides, 1, "ranks held already are not added again")
	require.Equal(t, 2, w.touched)
}

// Nothing is added for a job with a recorded verdict, before the recorded
// verdicts are loaded, where DRA is not served, or for pods that are not
// bound, use no claims, are being deleted or have more claims than the
// cache keeps; a source's error is the reconcile's.
func TestReconcileSkips(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	for name, tc := range map[string]struct {
		change  func(w *world)
		requeue time.Duration
		err     bool
	}{
		"verdict recorded":   {change: func(w *world) { w.decided = true }},
		"verdicts not known": {change: func(w *world) { w.loaded = false }, requeue: time.Second},
		"DRA not served":     {change: func(w *world) { w.gone = true }},
		"pods unbound": {change: func(w *world) {
			for _, p := range w.pods {
				p.Spec.NodeName = ""
			}
		}},
		"no claims": {change: func(w *world) {
			for _, p := range w.pods {
				p.Spec.ResourceClaims = nil
			}
		}},
		"being deleted": {change: func(w *world) {
			for _, p := range w.pods {
				p.DeletionTimestamp = &metav1.Time{Time: t0}
			}
		}},
		"claims cut": {change: func(w *world) {
			for _, p := range w.pods {
				p.Annotations = map[string]string{contract.CachedAnnotationClaimsCut: "true"}
			}
		}},
		"source fails": {change: func(w *world) { w.srcErr = errors.New("slice gone") }, err: true},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			w.known["j-worker-0"], w.known["j-worker-1"] = w.report(0, "MIG-0"), w.report(1, "MIG-1")
			tc.change(w)
			res, err := w.reconciler(clk).Reconcile(context.Background(), pytorch(t), request())
			require.Equal(t, tc.err, err != nil, "%v", err)
			require.Equal(t, tc.requeue, res.RequeueAfter)
			require.Nil(t, w.store.Get("j-uid"), "no gang")
			require.Empty(t, w.decides)
		})
	}
}

// A decided gang takes no more allocations.
func TestAddToDecidedGang(t *testing.T) {
	w := newWorld(t)
	w.known["j-worker-0"], w.known["j-worker-1"] = w.report(0, "MIG-0"), w.report(1, "MIG-1")
	g := w.EnsureGang(wrapJob(t, w.job))
	d := "pass"
	g.Answer(&d, t0)
	wait, err := w.reconciler(clocktesting.NewFakeClock(t0)).Add(context.Background(), wrapJob(t, w.job))
	require.NoError(t, err)
	require.False(t, wait)
	_, held := g.HolderOf(0)
	require.False(t, held)
	require.Empty(t, w.decides)
}

// Allocations' reports join the gang unless the rank reported itself or
// another pod holds it; the last one completes the gang.
func TestAddAllocated(t *testing.T) {
	w := newWorld(t)
	g2, _ := w.store.Ensure(gangstore.Spec{UID: "k-uid", Key: "ml/PyTorchJob/k", Expected: 3, Timeout: time.Minute})
	dev := func(id string) []verdict.DeviceSummary {
		return []verdict.DeviceSummary{{ID: id, Kind: "mig", GPUUUID: "GPU-a", Profile: "1g.10gb", SMs: 16}}
	}
	alloc := func(r int, uid, id string) rank {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("p", r), UID: types.UID(uid)}}
		return rank{pod: p, rr: preflight.RankReport{Rank: r, Pod: p.Name, Source: devicesource.DRA, Report: verdict.Report{Verdict: verdict.VerdictPass, Devices: dev(id)}}}
	}
	// Rank 0 reported itself; rank 1 is held by another pod.
	_, _, h := g2.Add(preflight.RankReport{Rank: 0, Pod: "p0", Report: verdict.Report{Verdict: verdict.VerdictPass, Devices: dev("MIG-0")}}, "u0", t0)
	require.Nil(t, h)
	_, _, h = g2.Add(preflight.RankReport{Rank: 1, Pod: "other", Source: devicesource.DRA, Report: verdict.Report{Verdict: verdict.VerdictPass, Devices: dev("MIG-1")}}, "other", t0)
	require.Nil(t, h)
	added, ready := addAllocated(g2, []rank{alloc(0, "u0", "MIG-0"), alloc(1, "u1", "MIG-1")}, t0)
	require.Equal(t, 0, added)
	require.Equal(t, gangstore.NotReady, ready)
	h0, _ := g2.HolderOf(0)
	require.Equal(t, devicesource.Reported, h0.Source, "the rank's own report stands")
	added, ready = addAllocated(g2, []rank{alloc(2, "u2", "MIG-2")}, t0)
	require.Equal(t, 1, added)
	require.Equal(t, gangstore.Complete, ready)
	h2, _ := g2.HolderOf(2)
	require.Equal(t, devicesource.DRA, h2.Source)
}

func wrapJob(t *testing.T, o client.Object) kubeflow.Job {
	t.Helper()
	j, err := kubeflow.FromObject(o)
	require.NoError(t, err)
	return j
}
