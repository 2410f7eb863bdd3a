package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/clusterstate"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/leader"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/watchdog"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	gateserver "github.com/rankgate/rankgate/integrations/kubernetes/gate/server"
	"github.com/rankgate/rankgate/verdict"
)

// The controller's timing (a gang's deadline, the applied delay, progress
// writes, the Pending watchdog's grace, a new leader's resend grace) on a
// fake clock, with controller-runtime's fake client for the API server.

// t0 is when every timing test starts.
var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// replica is one replica leading on a fake clock and a fake API server.
type replica struct {
	*Controller
	clk    *armingClock
	rec    *events.FakeRecorder
	cl     client.Client // the API server, without any interceptor
	ctx    context.Context
	cancel context.CancelFunc // ends its lead
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
func newLeader(t *testing.T, cl client.WithWatch, opts Options, fns *interceptor.Funcs) *replica {
	t.Helper()
	return newLeaderAt(t, cl, opts, t0, fns)
}

// newLeaderAt makes a replica that leads from now on cl, as newLeader,
// once it has loaded the verdicts earlier leaders recorded (Sweep).
func newLeaderAt(t *testing.T, cl client.WithWatch, opts Options, now time.Time, fns *interceptor.Funcs) *replica {
	t.Helper()
	clk := &armingClock{FakeClock: clocktesting.NewFakeClock(now)}
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
	c.state = clusterstate.New(c.engine, clk)
	c.state.Nodes.SetSynced(func() bool { return true })
	c.state.Usage.AddSource(func() bool { return true })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c.w = c.newWrites(&leader.Queues{Decide: newClockQueue(clk), Book: newClockQueue(clk)})
	c.backend = c.gateBackend()
	c.w.Run(ctx, nil)
	c.leaderSince.Store(now.UnixNano())
	c.leader.Store(true)
	c.synced.Store(true)
	require.True(t, c.w.Sweep(ctx))
	return &replica{Controller: c, clk: clk, rec: rec, cl: cl, ctx: ctx, cancel: cancel}
}

// stop ends l's lead.
func (l *replica) stop() {
	l.leader.Store(false)
	l.cancel()
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
func (l *replica) report(t *testing.T, pods []*corev1.Pod, i int, v verdict.Verdict) *gate.Response {
	t.Helper()
	p := pods[i]
	id := gateserver.Identity{Namespace: p.Namespace, Pod: p.Name, PodUID: string(p.UID)}
	var fs []verdict.Finding
	switch v {
	case verdict.VerdictFail:
		fs = []verdict.Finding{{Rule: verdict.RuleGPULost, Severity: verdict.SeverityFail}}
	case verdict.VerdictWarn:
		fs = []verdict.Finding{{Rule: verdict.RuleGangDriverMismatch, Severity: verdict.SeverityWarn}}
	}
	rep := verdict.NewReport("", fs)
	rep.Devices = []verdict.DeviceSummary{{ID: fmt.Sprintf("GPU-%d", i)}}
	resp, err := l.backend.Report(context.Background(), id, &gate.ReportRequest{Node: p.Spec.NodeName, DriverVersion: "580.65.06", Report: rep}, 0)
	require.NoError(t, err)
	return resp
}

// answer is what l's gate answers rank i now, without waiting.
func (l *replica) answer(t *testing.T, pods []*corev1.Pod, i int) *gate.Response {
	t.Helper()
	p := pods[i]
	resp, err := l.backend.Verdict(context.Background(), gateserver.Identity{Namespace: p.Namespace, Pod: p.Name, PodUID: string(p.UID)}, 0)
	require.NoError(t, err)
	return resp
}

func (l *replica) job(t *testing.T) *kubeflowv1.PyTorchJob {
	t.Helper()
	j := &kubeflowv1.PyTorchJob{}
	require.NoError(t, l.cl.Get(context.Background(), types.NamespacedName{Namespace: "ml", Name: "j"}, j))
	return j
}

// gangObj is the job's Gang (attempt 1), nil while there is none.
func (l *replica) gangObj(t *testing.T) *v1alpha1.Gang {
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
func (l *replica) armed(t *testing.T, d time.Duration) {
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
	require.Eventually(t, func() bool { return l.job(t).Annotations[contract.AnnotationVerdict] == string(verdict.VerdictPass) }, eventually, tick)

	// Past the deadline nothing is decided again: its timer was stopped.
	l.clk.Step(2 * time.Minute)
	require.Never(t, func() bool { return l.answer(t, pods, 0).Verdict.Verdict != verdict.VerdictPass }, 100*time.Millisecond, tick)
	require.Equal(t, int64(1), l.Decisions())
	require.False(t, suspended(l.job(t)))
}

// A verdict goes onto its job (annotations, the fail action, the Event)
// right after it is recorded, with no time passing, and its Gang is
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
	_, pending := l.w.Book().Pending(pj.UID)
	require.False(t, pending, "the verdict is no longer pending once on its job")
}

// testLog logs to t while the test runs, and drops what the controller's
// goroutines still log after it ended.
func testLog(t *testing.T) logr.Logger {
	var mu sync.Mutex
	done := false
	t.Cleanup(func() {
		mu.Lock()
		done = true
		mu.Unlock()
	})
	return funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			t.Log(prefix, args)
		}
	}, funcr.Options{Verbosity: 1})
}

// statusWrites counts the Gang status writes through a client.
type statusWrites struct {
	mu sync.Mutex
	n  int
}

func (w *statusWrites) funcs() *interceptor.Funcs {
	return &interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
		if _, ok := o.(*v1alpha1.Gang); ok && sub == "status" {
			w.mu.Lock()
			w.n++
			w.mu.Unlock()
		}
		return c.SubResource(sub).Update(ctx, o, opts...)
	}}
}

func (w *statusWrites) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// openGang has the reconciler note the opted-in job pj without a
// verdict: its Gang is created at once, 0/N.
func (l *replica) openGang(t *testing.T, pj *kubeflowv1.PyTorchJob) {
	t.Helper()
	reconcilerHost{l.Controller}.Keep(pj, "PyTorchJob")
	// Written with its progress, and known as written: a report before
	// then would write it again, and a verdict write would conflict.
	require.Eventually(t, func() bool {
		r := l.w.Book().Lookup(pj.UID)
		return r != nil && r.Current() != nil && r.Current().Status.Progress != ""
	}, eventually, tick)
	require.Equal(t, int32(0), l.gangObj(t).Status.ReportedRanks)
}

// Reports do not write the Gang each: the ranks reported within
// leader.ProgressEvery of the first are written together, once, leader.ProgressEvery
// after it, with the first report's time (a later leader's deadline).
func TestProgressWrittenOncePerInterval(t *testing.T) {
	pj, pods := gangJob(t, 3)
	var w statusWrites
	l := newLeader(t, newFakeAPI(t, objects(pj, pods)...), Options{}, w.funcs())
	l.openGang(t, pj)
	before := w.count()

	l.report(t, pods, 0, verdict.VerdictPass)
	l.report(t, pods, 1, verdict.VerdictPass)
	l.armed(t, leader.ProgressEvery)
	require.Never(t, func() bool { return l.gangObj(t).Status.ReportedRanks > 0 }, 100*time.Millisecond, tick, "written before leader.ProgressEvery")
	l.clk.Step(leader.ProgressEvery)
	require.Eventually(t, func() bool { return l.gangObj(t).Status.ReportedRanks == 2 }, eventually, tick)
	st := l.gangObj(t).Status
	require.Equal(t, "2/3", st.Progress)
	require.Equal(t, v1alpha1.PhaseWaitingForRanks, st.Phase)
	require.NotNil(t, st.FirstReportAt)
	require.True(t, st.FirstReportAt.Time.Equal(t0), "first report at %s", st.FirstReportAt)
	require.Never(t, func() bool { return w.count() > before+1 }, 100*time.Millisecond, tick)
	require.Equal(t, before+1, w.count(), "one write for both reports")
}

// A gang decided within leader.ProgressEvery of its reports costs no progress
// write: its verdict write carries the ranks.
func TestProgressLeftToTheVerdictWrite(t *testing.T) {
	pj, pods := gangJob(t, 2)
	var w statusWrites
	l := newLeader(t, newFakeAPI(t, objects(pj, pods)...), Options{}, w.funcs())
	l.openGang(t, pj)
	before := w.count()

	l.report(t, pods, 0, verdict.VerdictPass)
	l.report(t, pods, 1, verdict.VerdictPass)
	require.Eventually(t, func() bool { return l.answer(t, pods, 0).State == gate.StateDecided }, eventually, tick)
	require.Equal(t, before+1, w.count(), "the verdict write")
	l.clk.Step(leader.ProgressEvery)
	require.Never(t, func() bool { return w.count() > before+1 }, 200*time.Millisecond, tick, "a progress write after the verdict")
	require.Equal(t, int32(2), l.gangObj(t).Status.ReportedRanks)
}

// pendingSetup creates the opted-in job "j" with one worker whose pod
// asks for res and has been unschedulable since t0, on a fleet of one
// node with 8 full GPUs.
func (l *replica) pendingSetup(t *testing.T, res string) {
	t.Helper()
	p := pendingPod(res, 1)
	p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0)
	_, pods := rankJob(t, p)
	// The job as the API server holds it, with its pod template.
	pj := ptJob(false, 1)
	pj.Name, pj.UID, pj.Labels = "j", "job-uid", map[string]string{contract.KeyGate: "enabled"}
	pj.Spec.PyTorchReplicaSpecs[kubeflowv1.PyTorchJobReplicaTypeWorker].Template.Spec = *p.Spec.DeepCopy()
	for _, o := range objects(pj, pods) {
		require.NoError(t, l.cl.Create(context.Background(), o))
	}
	l.state.Nodes.Apply(gpuNodeObj("node-0", "nvidia.com/gpu", 8))
}

// The Pending watchdog leaves a job whose pod is unschedulable alone for
// its grace, then judges it: a pod asking for a MIG device on a fleet of
// full GPUs can never be placed, and the job fails through the gang path.
func TestPendingJudgedOnceItsGraceEnds(t *testing.T) {
	grace := 10 * time.Second
	l := newLeader(t, newFakeAPI(t), Options{PendingGrace: &grace}, nil)
	l.pendingSetup(t, "nvidia.com/mig-1g.10gb")
	k, _ := kubeflow.ByName("PyTorchJob")
	ctx := context.Background()

	l.clk.Step(4 * time.Second)
	again, failed := l.wd.Step(ctx, k, l.job(t))
	require.False(t, failed)
	require.Equal(t, 6*time.Second, again, "looked at again when its grace ends")
	last, watched := l.wd.Watching("ml/PyTorchJob/j")
	require.True(t, watched)
	require.Nil(t, last, "judged within its grace")

	l.clk.Step(6*time.Second - time.Millisecond)
	again, failed = l.wd.Step(ctx, k, l.job(t))
	require.False(t, failed)
	require.Equal(t, time.Millisecond, again)
	last, _ = l.wd.Watching("ml/PyTorchJob/j")
	require.Nil(t, last, "judged within its grace")

	l.clk.Step(time.Millisecond)
	_, failed = l.wd.Step(ctx, k, l.job(t))
	require.True(t, failed, "a pod that can never be placed fails its job once the grace ends")
	require.Eventually(t, func() bool { _, ok := l.backend.decided(kubeflow.MustFromObject(l.job(t))); return ok }, eventually, tick)
	d, _ := l.backend.decided(kubeflow.MustFromObject(l.job(t)))
	require.Equal(t, verdict.VerdictFail, d.Report.Verdict)
	require.Equal(t, t0.Add(grace), d.DecidedAt)
	require.True(t, watchdog.Ours(d.Report), "a verdict of the placement rules: %v", d.Report.RuleIDs())
	require.Eventually(t, func() bool { return suspended(l.job(t)) }, eventually, tick)
	require.Contains(t, <-l.rec.Events, contract.ReasonPendingFailed)
}

// A job whose pod waits for capacity is not failed at its grace: it is
// told what it waits for, and looked at again.
func TestPendingWaitingJobNotFailed(t *testing.T) {
	l := newLeader(t, newFakeAPI(t), Options{}, nil)
	l.pendingSetup(t, "nvidia.com/gpu")
	k, _ := kubeflow.ByName("PyTorchJob")
	l.clk.Step(DefaultPendingGrace)
	again, failed := l.wd.Step(context.Background(), k, l.job(t))
	require.False(t, failed)
	require.Equal(t, watchdog.Recheck, again)
	// The writes put it on the job (package leader).
	require.Eventually(t, func() bool { return l.job(t).Annotations[contract.AnnotationWaitingFor] != "" }, eventually, tick)
	_, decided := l.backend.decided(kubeflow.MustFromObject(l.job(t)))
	require.False(t, decided)
}

// failingJobPatches fails every patch of a job, as to a leader that lost
// the API server between recording a verdict and applying it.
var failingJobPatches = &interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
	if _, ok := o.(*kubeflowv1.PyTorchJob); ok {
		return errors.New("connection refused")
	}
	return c.Patch(ctx, o, p, opts...)
}}

// takeOver makes a second replica, replica-b, lead on cl at its clock's
// now, and loads the verdicts the first one recorded (Sweep).
func takeOver(t *testing.T, cl client.WithWatch, opts Options, now time.Time, fns *interceptor.Funcs) *replica {
	t.Helper()
	opts.Identity = "replica-b"
	return newLeaderAt(t, cl, opts, now, fns)
}

// A verdict the leader recorded in the Gang and did not apply before it
// stopped leading is answered and applied by the next leader, as it was
// recorded (never decided again), and its Gang marked Applied.
func TestTakeoverAppliesARecordedVerdict(t *testing.T) {
	pj, pods := gangJob(t, 2)
	cl := newFakeAPI(t, objects(pj, pods)...)
	a := newLeader(t, cl, Options{}, failingJobPatches)
	a.report(t, pods, 0, verdict.VerdictPass)
	a.report(t, pods, 1, verdict.VerdictFail)
	require.Eventually(t, func() bool { return a.answer(t, pods, 0).State == gate.StateDecided }, eventually, tick)
	// Its apply fails, and is retried (after 200 ms, doubling) until it
	// stops leading.
	a.armed(t, 200*time.Millisecond)
	a.clk.Step(200 * time.Millisecond)
	require.Never(t, func() bool { return suspended(a.job(t)) }, 100*time.Millisecond, tick)
	a.stop()
	g := a.gangObj(t)
	require.Equal(t, string(verdict.VerdictFail), g.Status.Verdict)
	require.False(t, applied(g))

	// The new leader's first patch of the job waits until the test has
	// asked it for the verdict.
	release := make(chan struct{})
	held := &interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
		if _, ok := o.(*kubeflowv1.PyTorchJob); ok {
			<-release
		}
		return c.Patch(ctx, o, p, opts...)
	}}
	b := takeOver(t, cl, Options{}, t0.Add(time.Minute), held)
	resp := b.answer(t, pods, 1)
	require.Equal(t, gate.StateDecided, resp.State, "answered from the recorded verdict before it is on the job")
	require.Equal(t, verdict.VerdictFail, resp.Verdict.Verdict)
	require.WithinDuration(t, t0, *resp.DecidedAt, 0, "decided by the first leader")
	require.False(t, suspended(b.job(t)))
	close(release)
	require.Eventually(t, func() bool { return suspended(b.job(t)) }, eventually, tick)
	ann := b.job(t).Annotations
	require.Equal(t, "replica-a", ann[contract.AnnotationDecidedBy], "applied as recorded")
	require.Equal(t, string(verdict.VerdictFail), ann[contract.AnnotationVerdict])
	require.Contains(t, <-b.rec.Events, contract.ReasonGangFailed)
	require.Equal(t, int64(0), b.Decisions(), "adopted, not decided again")

	b.armed(t, DefaultAppliedDelay)
	b.clk.Step(DefaultAppliedDelay)
	require.Eventually(t, func() bool { return applied(b.gangObj(t)) }, eventually, tick)
}

// A new leader gives ranks ResendGrace to re-send their reports before a
// gang whose deadline passed while no replica led is failed for missing
// ranks: the deadline an earlier leader recorded (the Gang's first
// report) stands, but never ends before that grace.
func TestTakeoverWaitsForResentReports(t *testing.T) {
	pj, pods := gangJob(t, 2)
	for _, p := range pods {
		p.CreationTimestamp = metav1.NewTime(t0.Add(-time.Minute))
	}
	cl := newFakeAPI(t, objects(pj, pods)...)
	opts := Options{GangTimeout: 10 * time.Minute}
	a := newLeader(t, cl, opts, nil)
	a.openGang(t, pj)
	a.report(t, pods, 0, verdict.VerdictPass)
	a.armed(t, leader.ProgressEvery)
	a.clk.Step(leader.ProgressEvery)
	require.Eventually(t, func() bool { return a.gangObj(t).Status.FirstReportAt != nil }, eventually, tick)
	a.stop()

	// The next leader takes over 20 minutes later: the gang's own
	// deadline (10 minutes after its first report) has passed.
	now := t0.Add(20 * time.Minute)
	b := takeOver(t, cl, opts, now, nil)
	resend := b.opts.ResendGrace
	require.Equal(t, DefaultMaxWait+5*time.Second, resend)
	resp := b.report(t, pods, 0, verdict.VerdictPass)
	require.Equal(t, gate.StateWaiting, resp.State, "failed before ranks could re-send")
	require.WithinDuration(t, now.Add(resend), *resp.Deadline, 0)

	b.armed(t, resend)
	b.clk.Step(resend - time.Millisecond)
	require.Never(t, func() bool { return b.answer(t, pods, 0).State == gate.StateDecided }, 100*time.Millisecond, tick)
	b.clk.Step(time.Millisecond)
	require.Eventually(t, func() bool { return b.answer(t, pods, 0).State == gate.StateDecided }, eventually, tick)
	got := b.answer(t, pods, 0)
	require.Contains(t, got.Verdict.RuleIDs(), verdict.RuleGangIncomplete)
	require.Equal(t, "replica-b", b.gangObj(t).Status.DecidedBy)
}
