package watchdog

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

var t0 = time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)

// fakeHost answers the watchdog with one job's pods and a judgement, and
// records what it is asked.
type fakeHost struct {
	mu       sync.Mutex
	pods     []*corev1.Pod
	result   schedule.Result
	workload schedule.Workload
	gone     bool // the job was deleted: FullJob finds nothing
	judgeErr error
	lasts    []*Judgement // the last judgement each JudgeLive was handed
	waiting  []*verdict.Finding
	failed   []verdict.Report
	hopeless bool // the model's judge
}

func (h *fakeHost) JobPods(context.Context, client.Object) ([]*corev1.Pod, error) {
	return h.pods, nil
}

func (h *fakeHost) FullJob(_ context.Context, _ kubeflow.Kind, o client.Object) (client.Object, error) {
	if h.gone {
		return nil, nil
	}
	return o, nil
}

func (h *fakeHost) JudgeLive(_ context.Context, _ kubeflow.Job, _ []*corev1.Pod, last *Judgement) (*Judgement, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lasts = append(h.lasts, last)
	if h.judgeErr != nil {
		return nil, h.judgeErr
	}
	return &Judgement{Result: h.result, Workload: h.workload, Sig: "sig"}, nil
}

func (h *fakeHost) ModelJudge() func(*Judgement) bool {
	return func(*Judgement) bool { return h.hopeless }
}

func (h *fakeHost) WantWaitingFor(_ client.Object, _ string, cause *verdict.Finding) {
	h.waiting = append(h.waiting, cause)
}

func (h *fakeHost) Fail(_ kubeflow.Job, rep verdict.Report) { h.failed = append(h.failed, rep) }

// pendingJob is a PyTorchJob "j" with one worker pod unschedulable since
// t0.
func pendingJob(annotations map[string]string) (client.Object, []*corev1.Pod) {
	pj := &kubeflowv1.PyTorchJob{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ml", UID: "j-uid", Annotations: annotations},
		Spec: kubeflowv1.PyTorchJobSpec{PyTorchReplicaSpecs: map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{
			kubeflowv1.PyTorchJobReplicaTypeWorker: {Replicas: ptr.To(int32(1))}}}}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "j-worker-0", Namespace: "ml"},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.NewTime(t0)}}}}
	return pj, []*corev1.Pod{p}
}

func pytorch(t *testing.T) kubeflow.Kind {
	k, ok := kubeflow.ByName("PyTorchJob")
	require.True(t, ok)
	return k
}

func hopelessResult() schedule.Result {
	return schedule.Result{Hopeless: true, Report: verdict.NewReport("ml/j", []verdict.Finding{{Rule: verdict.RuleShapeMismatch, Severity: verdict.SeverityFail, Message: "no node offers mig-7g.80gb"}})}
}

func waitingResult(msg string) schedule.Result {
	return schedule.Result{Rule: verdict.RuleWaitCapacity, Report: verdict.NewReport("ml/j", []verdict.Finding{{Rule: verdict.RuleWaitCapacity, Severity: verdict.SeverityWarn, Message: msg}})}
}

// A job is left alone for its grace, then judged once: hopeless fails it
// and it is no longer watched.
func TestStepGraceThenHopeless(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0.Add(4 * time.Second))
	obj, pods := pendingJob(nil)
	h := &fakeHost{pods: pods, result: hopelessResult()}
	wd := New(h, clk, logr.Discard(), Settings{Grace: 10 * time.Second, Kinds: []string{"PyTorchJob"}})
	key := "ml/PyTorchJob/j"

	again, failed := wd.Step(context.Background(), pytorch(t), obj)
	require.False(t, failed)
	require.Equal(t, 6*time.Second, again, "looked at again when its grace ends")
	last, watched := wd.Watching(key)
	require.True(t, watched)
	require.Nil(t, last)
	require.Empty(t, h.lasts, "not judged within its grace")

	clk.Step(6 * time.Second)
	_, failed = wd.Step(context.Background(), pytorch(t), obj)
	require.True(t, failed)
	require.Len(t, h.failed, 1)
	require.Equal(t, []string{verdict.RuleShapeMismatch}, h.failed[0].RuleIDs())
	_, watched = wd.Watching(key)
	require.False(t, watched, "a failed job is no longer watched")
}

// The per-job grace annotation wins over the default; a bad one is
// ignored.
func TestStepJobGrace(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0.Add(4 * time.Second))
	for ann, want := range map[string]time.Duration{"1m": 56 * time.Second, "soon": 6 * time.Second} {
		obj, pods := pendingJob(map[string]string{contract.AnnotationPendingGrace: ann})
		wd := New(&fakeHost{pods: pods}, clk, logr.Discard(), Settings{Grace: 10 * time.Second})
		again, _ := wd.Step(context.Background(), pytorch(t), obj)
		require.Equal(t, want, again, ann)
	}
}

// A waiting job is told what it waits for once per cause, re-judged every
// Recheck, and failed with PENDING_TIMEOUT and its last cause at its
// pending timeout; each judgement is handed the last one.
func TestStepWaitingThenTimeout(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0.Add(10 * time.Second))
	obj, pods := pendingJob(nil)
	h := &fakeHost{pods: pods, result: waitingResult("every 1g.10gb device is held")}
	wd := New(h, clk, logr.Discard(), Settings{Grace: 10 * time.Second, Timeout: time.Minute})

	again, failed := wd.Step(context.Background(), pytorch(t), obj)
	require.False(t, failed)
	require.Equal(t, Recheck, again)
	require.Len(t, h.waiting, 1)
	require.Equal(t, verdict.RuleWaitCapacity, h.waiting[0].Rule)

	clk.Step(Recheck)
	again, failed = wd.Step(context.Background(), pytorch(t), obj)
	require.False(t, failed)
	require.Equal(t, 20*time.Second, again, "looked at again at its pending timeout")
	require.Len(t, h.waiting, 1, "the same cause is written once")
	require.Len(t, h.lasts, 2)
	require.NotNil(t, h.lasts[1], "the second judgement is handed the first")

	clk.Step(20 * time.Second)
	_, failed = wd.Step(context.Background(), pytorch(t), obj)
	require.True(t, failed)
	require.Equal(t, []string{verdict.RulePendingTimeout, verdict.RuleWaitCapacity}, h.failed[0].RuleIDs())
	require.Contains(t, h.failed[0].Findings[0].Message, "every 1g.10gb device is held")
	require.True(t, Ours(h.failed[0]))
}

// A job whose pods are placed again (or that was suspended) is no longer
// watched, and what it waited for is removed.
func TestStepScheduledClearsWaitingFor(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0.Add(time.Minute))
	obj, pods := pendingJob(map[string]string{contract.AnnotationWaitingFor: "WAIT_CAPACITY: busy"})
	h := &fakeHost{pods: pods, result: waitingResult("busy")}
	wd := New(h, clk, logr.Discard(), Settings{Grace: 10 * time.Second})
	wd.Step(context.Background(), pytorch(t), obj)
	pods[0].Spec.NodeName = "node-0"
	again, failed := wd.Step(context.Background(), pytorch(t), obj)
	require.False(t, failed)
	require.Zero(t, again)
	require.Equal(t, []*verdict.Finding{nil}, h.waiting, "removed, never rewritten (it was already on the job)")
	_, watched := wd.Watching("ml/PyTorchJob/j")
	require.False(t, watched)
}

// A judgement that fails is looked at again later, and the job counts as
// not judged for node events; a job deleted meanwhile is left alone.
func TestStepJudgeErrorAndGone(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0.Add(time.Minute))
	obj, pods := pendingJob(nil)
	h := &fakeHost{pods: pods, judgeErr: context.DeadlineExceeded}
	wd := New(h, clk, logr.Discard(), Settings{Grace: 10 * time.Second, Kinds: []string{"PyTorchJob"}})
	again, failed := wd.Step(context.Background(), pytorch(t), obj)
	require.False(t, failed)
	require.Equal(t, Recheck, again)
	require.Len(t, wd.AffectedByNode("PyTorchJob"), 1, "a job not judged is reconciled on the next node event")

	h.gone = true
	again, failed = wd.Step(context.Background(), pytorch(t), obj)
	require.False(t, failed)
	require.Zero(t, again)
	require.Empty(t, h.failed)
}

// A node event reconciles the watched jobs past their grace that the
// model now finds hopeless, and those whose pods changed since their
// last judgement; not the others.
func TestAffectedByNode(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0.Add(time.Minute))
	obj, pods := pendingJob(nil)
	h := &fakeHost{pods: pods, result: waitingResult("busy")}
	wd := New(h, clk, logr.Discard(), Settings{Grace: 10 * time.Second, Kinds: []string{"PyTorchJob", "MPIJob"}})
	wd.Step(context.Background(), pytorch(t), obj)
	require.Empty(t, wd.AffectedByNode("PyTorchJob"), "judged waiting; the model agrees")
	require.Empty(t, wd.AffectedByNode("MPIJob"))
	h.hopeless = true
	require.Equal(t, "ml/j", wd.AffectedByNode("PyTorchJob")[0].String())
	h.hopeless = false
	wd.PodsChanged("ml", "j")
	require.Len(t, wd.AffectedByNode("PyTorchJob"), 1, "its pods changed: reconciled in full")
	wd.Step(context.Background(), pytorch(t), obj)
	require.Empty(t, wd.AffectedByNode("PyTorchJob"), "judged again")
}

// A ResourceSlice change re-judges the watched jobs past their grace that
// read the slices: those with a DRA pod set, and those not judged since
// their pods changed; not jobs in their grace, jobs judged without DRA,
// or jobs of another kind.
func TestAffectedByDevices(t *testing.T) {
	wd := New(nil, clocktesting.NewFakeClock(t0), logr.Discard(), Settings{})
	dra := &Judgement{Workload: schedule.Workload{PodSets: []schedule.PodSet{{Name: "Worker", Count: 2, DRA: "resource claims gpu"}}}}
	plain := &Judgement{Workload: schedule.Workload{PodSets: []schedule.PodSet{{Name: "Worker", Count: 2, Requests: schedule.Resources{"nvidia.com/gpu": 1}}}}}
	watch := func(kind, name string, due time.Time, j *Judgement) {
		wd.jobs["ns/"+kind+"/"+name] = &watched{kind: kind, ns: "ns", name: name, due: due, last: j, stale: j == nil}
	}
	watch("PyTorchJob", "dra", t0.Add(-time.Second), dra)
	watch("PyTorchJob", "changed", t0, nil)
	watch("PyTorchJob", "plain", t0.Add(-time.Second), plain)
	watch("PyTorchJob", "in-grace", t0.Add(time.Second), dra)
	watch("MPIJob", "other-kind", t0.Add(-time.Second), dra)
	var names []string
	for _, r := range wd.AffectedByDevices("PyTorchJob") {
		require.Equal(t, "ns", r.Namespace)
		names = append(names, r.Name)
	}
	require.Equal(t, []string{"changed", "dra"}, names)
	var other []types.NamespacedName
	for _, r := range wd.AffectedByDevices("MPIJob") {
		other = append(other, r.NamespacedName)
	}
	require.Equal(t, []types.NamespacedName{{Namespace: "ns", Name: "other-kind"}}, other)
}

func transientNode(gpus string, ready corev1.ConditionStatus) *corev1.Node {
	n := &corev1.Node{}
	n.Name = "n1"
	n.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(gpus), corev1.ResourceCPU: resource.MustParse("96")}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
	return n
}

// A device plugin re-registering (GPU allocatable drops) or a node
// changing readiness holds every hopeless verdict back for
// TransientSettle; more devices, or other changes, do not.
func TestTransientNodeChangesHoldHopelessVerdicts(t *testing.T) {
	hopeless := hopelessResult().Report
	for _, tc := range []struct {
		name   string
		o, n   *corev1.Node
		settle bool
	}{
		{"device plugin re-registers", transientNode("8", corev1.ConditionTrue), transientNode("0", corev1.ConditionTrue), true},
		{"GPU resource gone", transientNode("8", corev1.ConditionTrue), func() *corev1.Node {
			n := transientNode("8", corev1.ConditionTrue)
			n.Status.Allocatable = nil
			return n
		}(), true},
		{"node restarts", transientNode("8", corev1.ConditionTrue), transientNode("8", corev1.ConditionFalse), true},
		{"more devices", transientNode("4", corev1.ConditionTrue), transientNode("8", corev1.ConditionTrue), false},
		{"nothing GPU changes", transientNode("8", corev1.ConditionTrue), transientNode("8", corev1.ConditionTrue), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			wd := New(nil, clk, logr.Discard(), Settings{})
			wd.NoteNodeChange(tc.o, tc.n)
			left, ok := wd.Settling(hopeless)
			require.Equal(t, tc.settle, ok)
			if tc.settle {
				require.Equal(t, TransientSettle, left)
				clk.Step(TransientSettle)
				_, ok = wd.Settling(hopeless)
				require.False(t, ok, "settled")
			}
		})
	}
}

// MIG_LAYOUT_INVALID about a node whose MIG labels just changed waits
// for MIGSettle; about another node, or another fail finding, it does not.
func TestMIGLayoutChangeSettles(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	wd := New(nil, clk, logr.Discard(), Settings{})
	o := transientNode("8", corev1.ConditionTrue)
	n := o.DeepCopy()
	n.Labels = map[string]string{"nvidia.com/mig.config.state": "pending"}
	wd.NoteNodeChange(o, n)
	invalid := func(node string) verdict.Report {
		return verdict.NewReport("ml/j", []verdict.Finding{{Rule: verdict.RuleMIGLayoutInvalid, Severity: verdict.SeverityFail, Nodes: []string{node}}})
	}
	clk.Step(10 * time.Second)
	left, ok := wd.Settling(invalid("n1"))
	require.True(t, ok)
	require.Equal(t, MIGSettle-10*time.Second, left)
	_, ok = wd.Settling(invalid("n2"))
	require.False(t, ok)
	_, ok = wd.Settling(hopelessResult().Report)
	require.False(t, ok)
	clk.Step(MIGSettle)
	_, ok = wd.Settling(invalid("n1"))
	require.False(t, ok)
}

// With MIG layouts changing on demand, a job that only a layout change
// would cure waits (RECONFIGURABLE); any other fail finding stays
// hopeless.
func TestCauseOnDemand(t *testing.T) {
	reconf := schedule.Result{Hopeless: true, Report: verdict.NewReport("ml/j", []verdict.Finding{
		{Rule: verdict.RuleShapeMismatch, Severity: verdict.SeverityFail, Pods: []string{"ml/p"}},
		{Rule: verdict.RuleReconfigurable, Severity: verdict.SeverityWarn, Pods: []string{"ml/p"}, Message: "a layout change would offer it"},
	})}
	hopeless, _ := Cause(reconf, false)
	require.True(t, hopeless)
	hopeless, cause := Cause(reconf, true)
	require.False(t, hopeless)
	require.Equal(t, verdict.RuleReconfigurable, cause.Rule)
	require.Equal(t, "RECONFIGURABLE: a layout change would offer it", WaitingFor(cause))

	other := reconf
	other.Report = verdict.NewReport("ml/j", append(reconf.Report.Findings, verdict.Finding{Rule: verdict.RuleDriverKnownBad, Severity: verdict.SeverityFail}))
	hopeless, _ = Cause(other, true)
	require.True(t, hopeless)

	hopeless, cause = Cause(schedule.Result{Rule: verdict.RuleWaitCapacity}, false)
	require.False(t, hopeless)
	require.Equal(t, verdict.RuleWaitCapacity, cause.Rule, "a waiting job without its finding still says what it waits for")
}
