package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	gateserver "github.com/rankgate/rankgate/integrations/kubernetes/gate/server"
	"github.com/rankgate/rankgate/verdict"
)

// The controller's timing (a gang's deadline, the applied delay, progress
// writes, the Pending watchdog's grace, a new leader's resend grace) on a
// fake clock, with controller-runtime's fake client for the API server.

// t0 is when every timing test starts.
var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// leader is one replica leading on a fake clock and a fake API server.
type leader struct {
	*Controller
	clk *armingClock
	rec *events.FakeRecorder
	cl  client.Client // the API server, without any interceptor
}

// podIndexer registers the controller's pod index (indexPodsByJob) on a
// fake client builder.
type podIndexer struct{ b *fake.ClientBuilder }

func (i podIndexer) IndexField(_ context.Context, o client.Object, field string, f client.IndexerFunc) error {
	i.b.WithIndex(o, field, f)
	return nil
}

// newFakeAPI is a fake API server holding objs, with the Gang status
// subresource and the controller's pod index.
func newFakeAPI(t *testing.T, objs ...client.Object) client.WithWatch {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(Scheme()).WithStatusSubresource(&v1alpha1.Gang{}).WithObjects(objs...)
	require.NoError(t, indexPodsByJob(context.Background(), podIndexer{b}))
	return b.Build()
}

// newLeader makes a replica that leads from t0 on the fake API server cl
// (wrapped by fns, when given), with opts defaulted as New does. It stops
// leading when the test ends.
func newLeader(t *testing.T, cl client.WithWatch, opts Options, fns *interceptor.Funcs) *leader {
	t.Helper()
	clk := &armingClock{FakeClock: clocktesting.NewFakeClock(t0)}
	opts.Config, opts.Insecure, opts.Clock, opts.Log = &rest.Config{}, true, clk, testLog(t)
	if opts.Namespace == "" {
		opts.Namespace = "rankgate-system"
	}
	if opts.Identity == "" {
		opts.Identity = "replica-a"
	}
	require.NoError(t, opts.defaults())
	c := newController(opts)
	var api client.WithWatch = cl
	if fns != nil {
		api = interceptor.NewClient(cl, *fns)
	}
	c.client, c.api, c.gangAPI = api, api, api
	rec := events.NewFakeRecorder(100)
	c.rec = rec
	c.kinds = kubeflow.All()
	c.model = newNodeModel(c.engine)
	c.model.synced = func() bool { return true }
	c.usage = newPodUsage()
	c.usage.addSource(func() bool { return true })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c.leadCtx.Store(&ctx)
	c.leader.Store(true)
	c.synced.Store(true)
	c.recovered.Store(true)
	return &leader{Controller: c, clk: clk, rec: rec, cl: cl}
}

// stop ends l's lead (its lead context).
func (l *leader) stop() {
	l.leader.Store(false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l.leadCtx.Store(&ctx)
}

// gangJob is an opted-in PyTorchJob "j" in namespace ml with n workers,
// and its n rank pods as the operator creates them (scheduled).
func gangJob(t *testing.T, n int) (*kubeflowv1.PyTorchJob, []*corev1.Pod) {
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = &corev1.Pod{Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i)}, Status: corev1.PodStatus{Phase: corev1.PodPending}}
	}
	j, pods := rankJob(t, pods...)
	pj := j.Object().(*kubeflowv1.PyTorchJob)
	pj.Labels = map[string]string{contract.KeyGate: "enabled"}
	return pj, pods
}

func objects(job client.Object, pods []*corev1.Pod) []client.Object {
	out := []client.Object{job}
	for _, p := range pods {
		out = append(out, p)
	}
	return out
}

// report sends rank i's report (pod pods[i]) to l's gate without waiting,
// and returns the answer.
func (l *leader) report(t *testing.T, pods []*corev1.Pod, i int, v verdict.Verdict) *gate.Response {
	t.Helper()
	p := pods[i]
	id := gateserver.Identity{Namespace: p.Namespace, Pod: p.Name, PodUID: string(p.UID)}
	rr := rankReport(i, v, 1)
	resp, err := l.Report(context.Background(), id, &gate.ReportRequest{Node: p.Spec.NodeName, DriverVersion: "580.65.06", Report: rr.Report}, 0)
	require.NoError(t, err)
	return resp
}

// answer is what l's gate answers rank i now, without waiting.
func (l *leader) answer(t *testing.T, pods []*corev1.Pod, i int) *gate.Response {
	t.Helper()
	p := pods[i]
	resp, err := l.Verdict(context.Background(), gateserver.Identity{Namespace: p.Namespace, Pod: p.Name, PodUID: string(p.UID)}, 0)
	require.NoError(t, err)
	return resp
}

func (l *leader) job(t *testing.T) *kubeflowv1.PyTorchJob {
	t.Helper()
	j := &kubeflowv1.PyTorchJob{}
	require.NoError(t, l.cl.Get(context.Background(), types.NamespacedName{Namespace: "ml", Name: "j"}, j))
	return j
}

// gangObj is the job's Gang (attempt 1), nil while there is none.
func (l *leader) gangObj(t *testing.T) *v1alpha1.Gang {
	t.Helper()
	g := &v1alpha1.Gang{}
	err := l.cl.Get(context.Background(), types.NamespacedName{Namespace: "ml", Name: v1alpha1.GangName("PyTorchJob", "j", 1)}, g)
	if err != nil {
		require.True(t, client.IgnoreNotFound(err) == nil, err)
		return nil
	}
	return g
}

func applied(g *v1alpha1.Gang) bool {
	return g != nil && meta.IsStatusConditionTrue(g.Status.Conditions, contract.ConditionApplied)
}

func suspended(j *kubeflowv1.PyTorchJob) bool {
	return j.Spec.RunPolicy.Suspend != nil && *j.Spec.RunPolicy.Suspend
}

// armingClock is a fake clock that tells which timers were armed: the
// controller arms some on its own goroutines, and a step before one is
// armed would not fire it.
type armingClock struct {
	*clocktesting.FakeClock
	mu    sync.Mutex
	armed []time.Duration
}

func (a *armingClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := a.FakeClock.AfterFunc(d, f)
	a.note(d)
	return t
}

func (a *armingClock) NewTimer(d time.Duration) clock.Timer {
	t := a.FakeClock.NewTimer(d)
	a.note(d)
	return t
}

func (a *armingClock) note(d time.Duration) {
	a.mu.Lock()
	a.armed = append(a.armed, d)
	a.mu.Unlock()
}

// take says whether a timer of d was armed, and forgets it.
func (a *armingClock) take(d time.Duration) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, x := range a.armed {
		if x == d {
			a.armed = append(a.armed[:i], a.armed[i+1:]...)
			return true
		}
	}
	return false
}

// armed waits until a timer of d is armed on l's clock.
func (l *leader) armed(t *testing.T, d time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return l.clk.take(d) }, eventually, tick, "a timer of %s armed", d)
}

const eventually, tick = 5 * time.Second, 2 * time.Millisecond

// A gang with a rank missing is decided at its deadline, not a moment
// before: GANG_INCOMPLETE naming the missing rank, recorded in its Gang,
// answered to the rank that waits, and the job suspended.
func TestGangFailsAtItsDeadline(t *testing.T) {
	pj, pods := gangJob(t, 2)
	l := newLeader(t, newFakeAPI(t, objects(pj, pods)...), Options{GangTimeout: time.Minute}, nil)

	resp := l.report(t, pods, 0, verdict.VerdictPass)
	require.Equal(t, gate.StateWaiting, resp.State)
	require.NotNil(t, resp.Deadline)
	require.Equal(t, t0.Add(time.Minute), *resp.Deadline, "the deadline is the gang timeout after the first report")

	l.armed(t, time.Minute)
	l.clk.Step(time.Minute - time.Millisecond)
	require.Never(t, func() bool { return l.answer(t, pods, 0).State == gate.StateDecided }, 100*time.Millisecond, tick, "decided before its deadline")
	require.False(t, suspended(l.job(t)))

	l.clk.Step(time.Millisecond)
	require.Eventually(t, func() bool { return l.answer(t, pods, 0).State == gate.StateDecided }, eventually, tick)
	got := l.answer(t, pods, 0)
	require.Equal(t, verdict.VerdictFail, got.Verdict.Verdict)
	require.Contains(t, got.Verdict.RuleIDs(), verdict.RuleGangIncomplete)
	require.Equal(t, ActionSuspend, got.Action)
	require.Equal(t, t0.Add(time.Minute), *got.DecidedAt, "decided at the deadline, on the controller's clock")

	g := l.gangObj(t)
	require.NotNil(t, g)
	require.Equal(t, string(verdict.VerdictFail), g.Status.Verdict, "recorded in the Gang")
	require.Contains(t, g.Status.Rules, verdict.RuleGangIncomplete)
	l.clk.Step(recordQuiet) // the job's patch yields to verdict writes
	require.Eventually(t, func() bool { return suspended(l.job(t)) }, eventually, tick, "the fail action")
	require.Equal(t, string(verdict.VerdictFail), l.job(t).Annotations[contract.AnnotationVerdict])
}

// A gang is decided when its last rank reports, without any time passing,
// and its deadline no longer fires.
func TestGangDecidedWhenTheLastRankReports(t *testing.T) {
	pj, pods := gangJob(t, 3)
	l := newLeader(t, newFakeAPI(t, objects(pj, pods)...), Options{GangTimeout: time.Minute}, nil)

	l.report(t, pods, 0, verdict.VerdictPass)
	l.report(t, pods, 2, verdict.VerdictPass)
	require.Equal(t, gate.StateWaiting, l.answer(t, pods, 1).State)
	l.report(t, pods, 1, verdict.VerdictPass)
	require.Eventually(t, func() bool { return l.answer(t, pods, 1).State == gate.StateDecided }, eventually, tick)
	got := l.answer(t, pods, 0)
	require.Equal(t, verdict.VerdictPass, got.Verdict.Verdict)
	require.Equal(t, t0, *got.DecidedAt, "no time passed")
	require.Equal(t, string(verdict.VerdictPass), l.gangObj(t).Status.Verdict)
	l.clk.Step(recordQuiet) // the job's patch yields to verdict writes
	require.Eventually(t, func() bool { return l.job(t).Annotations[contract.AnnotationVerdict] == string(verdict.VerdictPass) }, eventually, tick)

	// Past the deadline nothing is decided again: its timer was stopped.
	l.clk.Step(2 * time.Minute)
	require.Never(t, func() bool { return l.answer(t, pods, 0).Verdict.Verdict != verdict.VerdictPass }, 100*time.Millisecond, tick)
	require.Equal(t, int64(1), l.Decisions())
	require.False(t, suspended(l.job(t)))
}

// A verdict goes onto its job (annotations, the fail action, the Event)
// once no verdict write has started for recordQuiet, and its Gang is
// marked Applied AppliedDelay after that, not before.
func TestVerdictAppliedThenMarkedAfterTheDelay(t *testing.T) {
	pj, pods := gangJob(t, 2)
	delay := 5 * time.Second
	l := newLeader(t, newFakeAPI(t, objects(pj, pods)...), Options{AppliedDelay: &delay}, nil)

	l.report(t, pods, 0, verdict.VerdictPass)
	l.report(t, pods, 1, verdict.VerdictFail) // the gang is complete and fails
	require.Eventually(t, func() bool { return l.answer(t, pods, 0).State == gate.StateDecided }, eventually, tick)
	g := l.gangObj(t)
	require.True(t, meta.IsStatusConditionTrue(g.Status.Conditions, contract.ConditionDecided))
	require.Contains(t, g.Status.Rules, verdict.RuleRankFailed)

	// The job's patch waits for a gap after the verdict writes ranks wait for.
	l.armed(t, recordQuiet)
	require.Never(t, func() bool { return suspended(l.job(t)) }, 100*time.Millisecond, tick, "applied before the verdict writes went quiet")
	l.clk.Step(recordQuiet)
	require.Eventually(t, func() bool { return suspended(l.job(t)) }, eventually, tick)
	a := l.job(t).Annotations
	require.Equal(t, string(verdict.VerdictFail), a[contract.AnnotationVerdict])
	require.Equal(t, ActionSuspend, a[contract.AnnotationAction])
	require.Equal(t, "replica-a", a[contract.AnnotationDecidedBy])
	require.Eventually(t, func() bool { return len(l.rec.Events) > 0 }, eventually, tick)
	require.Contains(t, <-l.rec.Events, contract.ReasonGangFailed)
	require.False(t, applied(l.gangObj(t)), "marked Applied with the job's patch")

	l.armed(t, delay)
	l.clk.Step(delay - time.Millisecond)
	require.Never(t, func() bool { return applied(l.gangObj(t)) }, 100*time.Millisecond, tick, "marked Applied before the delay")
	l.clk.Step(time.Millisecond)
	require.Eventually(t, func() bool { return applied(l.gangObj(t)) }, eventually, tick)
	cond := meta.FindStatusCondition(l.gangObj(t).Status.Conditions, contract.ConditionApplied)
	require.Equal(t, "JobSuspended", cond.Reason)
	_, pending := l.pendingDecision(pj.UID)
	require.False(t, pending, "the verdict is no longer pending once on its job")
}

func testLog(t *testing.T) logr.Logger { return testr.NewWithOptions(t, testr.Options{Verbosity: 1}) }
