package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	mpiv2beta1 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/verdict"
)

// The Pending watchdog's scenarios. A real kube-scheduler
// (startScheduler) places the jobs' pods or marks them unschedulable: every
// PodScheduled condition is the scheduler's own.

// labelNode adds labels to a node made by gpuNode; the node is deleted
// when the test ends (nodes are cluster-wide: GFD labels would change
// other tests' verdicts).
func labelNode(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}) })
	n := &corev1.Node{}
	require.NoError(t, k8s.Get(context.Background(), types.NamespacedName{Name: name}, n))
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	for k, v := range labels {
		n.Labels[k] = v
	}
	// The API server taints a new node not-ready until a kubelet reports;
	// gpuNode's node is Ready.
	n.Spec.Taints = nil
	require.NoError(t, k8s.Update(context.Background(), n))
}

// a100All1g20 is an A100-80GB node laid out all-1g.20gb (GFD and
// mig-manager labels, mixed strategy).
func a100All1g20(t testing.TB, name string) {
	gpuNode(t, name, "nvidia.com/mig-1g.20gb", 32)
	realNode(t, name, map[string]int64{"nvidia.com/mig-1g.20gb": 32}, map[string]string{
		"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81920",
		"nvidia.com/mig-1g.20gb.count": "32", "nvidia.com/mig-1g.20gb.memory": "19968", "nvidia.com/mig-1g.20gb.multiprocessors": "14",
		"nvidia.com/mig.capable": "true", "nvidia.com/mig.config": "all-1g.20gb", "nvidia.com/mig.config.state": "success",
		"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.deploy.device-plugin": "true",
	})
}

func isSuspended(t testing.TB, o client.Object) bool {
	t.Helper()
	switch j := o.(type) {
	case *kubeflowv1.PyTorchJob:
		f := &kubeflowv1.PyTorchJob{}
		require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(j), f))
		return f.Spec.RunPolicy.Suspend != nil && *f.Spec.RunPolicy.Suspend
	case *mpiv2beta1.MPIJob:
		f := &mpiv2beta1.MPIJob{}
		require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(j), f))
		return f.Spec.RunPolicy.Suspend != nil && *f.Spec.RunPolicy.Suspend
	case *trainjob.TrainJob:
		f := &trainjob.TrainJob{}
		require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(j), f))
		return f.Spec.Suspend != nil && *f.Spec.Suspend
	case *jobsetapi.JobSet:
		return jobSetSuspended(t, j)
	}
	t.Fatalf("unknown kind %T", o)
	return false
}

// pendingJob creates a PyTorchJob (master + 1 worker) whose two pods ask
// n of res each, for the test scheduler, and waits until the scheduler
// marked both unschedulable.
func pendingJob(t testing.TB, ns, name string, annotations map[string]string, res string, n int, edit ...func(*corev1.Pod)) (*kubeflowv1.PyTorchJob, []*corev1.Pod) {
	t.Helper()
	job, pods := schedJob(t, ns, name, annotations, 1, res, n, edit...)
	for _, p := range pods {
		waitUnschedulable(t, p)
	}
	return job, pods
}

// schedJob creates a PyTorchJob of a master and workers workers whose pods
// ask n of res each, for the test scheduler to place.
func schedJob(t testing.TB, ns, name string, annotations map[string]string, workers int, res string, n int, edit ...func(*corev1.Pod)) (*kubeflowv1.PyTorchJob, []*corev1.Pod) {
	t.Helper()
	job := pytorchJob(t, ns, name, true, workers, annotations)
	edits := append([]func(*corev1.Pod){withGPUs(res, n), scheduled}, edit...)
	pods := []*corev1.Pod{rankPod(t, job, "master", 0, "", res, edits...)}
	for i := 0; i < workers; i++ {
		pods = append(pods, rankPod(t, job, "worker", i, "", res, edits...))
	}
	return job, pods
}

// waitUnschedulable waits until the scheduler marked p unschedulable.
func waitUnschedulable(t testing.TB, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	f := &corev1.Pod{}
	require.NoError(t, waitFor(30*time.Second, func() bool {
		require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(p), f))
		return unschedulable(f)
	}), "the scheduler did not mark %s unschedulable: %v", p.Name, f.Status)
	return f
}

// (g) mig-2g.20gb asked on nodes laid out all-1g.20gb: no rank ever
// reports; with the default 10 s grace the job is suspended within a few
// seconds of it, with the engine's SHAPE_MISMATCH (both shapes named) and
// a Warning Event naming cause and fix.
func TestE2EPendingShapeMismatchSuspended(t *testing.T) {
	ns := newNamespace(t, "e2e-pending-shape", true)
	startScheduler(t)
	a100All1g20(t, "pend-a100-1g-a")
	a100All1g20(t, "pend-a100-1g-b")
	c := startController(t, controller.Options{GangTimeout: time.Hour})
	start := time.Now()
	job, _ := pendingJob(t, ns, "shape", nil, "nvidia.com/mig-2g.20gb", 1)
	require.Eventually(t, func() bool { return isSuspended(t, job) }, 20*time.Second, 100*time.Millisecond, c.logs.String())
	took := time.Since(start)
	require.GreaterOrEqual(t, took, controller.DefaultPendingGrace-time.Second, "failed before the grace")
	require.Less(t, took, controller.DefaultPendingGrace+5*time.Second, "not within grace + a few seconds")
	a := appliedVerdict(t, job)
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	require.Equal(t, controller.ActionSuspend, a[contract.AnnotationAction])
	require.Contains(t, strings.Split(a[contract.AnnotationRules], ","), verdict.RuleShapeMismatch)
	// Both shapes (SMs and memory), and the layout that would give 2g.20gb.
	for _, s := range []string{"nvidia.com/mig-2g.20gb (28 SMs, 19968 MiB", "nvidia.com/mig-1g.20gb (14 SMs, 19968 MiB", "SMs",
		"RECONFIGURABLE: ", "nvidia.com/mig.config=all-2g.20gb", `{"2g.20gb": 3}`} {
		require.Contains(t, a[contract.AnnotationReason], s)
	}
	require.Empty(t, firstReportAt(t, job), "a rank reported")
	ev := jobEvents(t, job)
	require.Len(t, ev["PendingFailed"], 1, "%v", ev)
	require.Contains(t, ev["PendingFailed"][0], "job suspended: SHAPE_MISMATCH")
	require.Contains(t, ev["PendingFailed"][0], "Fix:")
	t.Logf("suspended after %s\nreason: %s\nevent: %s", took.Round(time.Millisecond), a[contract.AnnotationReason], ev["PendingFailed"][0])
}

// A hopeless job in a namespace that opts in only after its pods are
// Pending: the opt-in alone (no change of the job or its pods) brings it
// to the Pending watchdog, which suspends it.
func TestE2EPendingNamespaceOptedInLater(t *testing.T) {
	ns := newNamespace(t, "e2e-pending-opt-in-later", false)
	startScheduler(t)
	a100All1g20(t, "pend-a100-1g-later")
	c := startController(t, controller.Options{GangTimeout: time.Hour, PendingGrace: ptr.To(time.Duration(0))})
	job, _ := pendingJob(t, ns, "later", nil, "nvidia.com/mig-2g.20gb", 1)
	require.Never(t, func() bool { return isSuspended(t, job) }, 3*time.Second, 200*time.Millisecond, "judged before its namespace opted in")
	o := &corev1.Namespace{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Name: ns}, o))
	o.Labels = map[string]string{contract.KeyGate: "enabled"}
	require.NoError(t, k8s.Update(context.Background(), o))
	require.Eventually(t, func() bool { return isSuspended(t, job) }, 15*time.Second, 100*time.Millisecond, c.logs.String())
	require.Contains(t, strings.Split(appliedVerdict(t, job)[contract.AnnotationRules], ","), verdict.RuleShapeMismatch)
}

// busyNode is a node of 8 GPUs of res, all held by a bound pod outside
// any job; it carries label pending-test=<name> for the job's selector.
func busyNode(t testing.TB, ns, name, res string) *corev1.Pod {
	gpuNode(t, name, res, 8)
	realNode(t, name, map[string]int64{res: 8}, map[string]string{"pending-test": name})
	h := &corev1.Pod{}
	h.Name, h.Namespace, h.Spec.NodeName = "holder-"+name, ns, name
	h.Spec.Containers = []corev1.Container{{Name: "hold", Image: "busybox"}}
	withGPUsOn(h, res, 8)
	require.NoError(t, k8s.Create(context.Background(), h))
	return h
}

func withGPUsOn(p *corev1.Pod, res string, n int) {
	q := corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(int64(n), resource.DecimalSI)}
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: q, Limits: q}
}

func onNode(name string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"pending-test": name} }
}

// (i) A shape that exists but is held by another pod: the job waits, is
// never failed, and rankgate.io/waiting-for and one Normal Event say
// WAIT_CAPACITY with the busy node; re-judging (job and node changes, the
// periodic re-judgement of its cause) does not write them again while the
// cause holds.
func TestE2EPendingWaitCapacityNotRewritten(t *testing.T) {
	ns := newNamespace(t, "e2e-pending-wait", true)
	startScheduler(t)
	busyNode(t, ns, "pend-busy-1", "nvidia.com/gpu")
	c := startController(t, controller.Options{GangTimeout: time.Hour, PendingGrace: ptr.To(time.Duration(0))})
	job, _ := pendingJob(t, ns, "waits", nil, "nvidia.com/gpu", 4, onNode("pend-busy-1"))
	var wf string
	require.Eventually(t, func() bool { wf = jobAnnotations(t, job)[contract.AnnotationWaitingFor]; return wf != "" }, 15*time.Second, 100*time.Millisecond, c.logs.String())
	require.True(t, strings.HasPrefix(wf, verdict.RuleWaitCapacity+": "), wf)
	require.Contains(t, wf, "pend-busy-1 (8/8 nvidia.com/gpu in use)")
	// Events are written after the annotation, by the recorder's own goroutine.
	var ev map[string][]string
	require.Eventually(t, func() bool { ev = jobEvents(t, job); return len(ev["PendingWaiting"]) > 0 }, 10*time.Second, 100*time.Millisecond)
	require.Len(t, ev["PendingWaiting"], 1, "%v", ev)
	require.Contains(t, ev["PendingWaiting"][0], "WAIT_CAPACITY")

	fresh := &kubeflowv1.PyTorchJob{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(job), fresh))
	rv := fresh.ResourceVersion
	// Resyncs: a label on the job (reconciles it), node changes (re-judge
	// the watched jobs), across a re-judgement of the cause (liveEvery, 10 s).
	deadline := time.Now().Add(12 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		patch := []byte(`{"metadata":{"labels":{"resync":"` + string(rune('a'+i%26)) + `"}}}`)
		require.NoError(t, k8s.Patch(context.Background(), fresh.DeepCopy(), client.RawPatch(types.MergePatchType, patch)))
		labelNode(t, "pend-busy-1", map[string]string{"resync": string(rune('a' + i%26))})
		time.Sleep(time.Second)
	}
	require.False(t, isSuspended(t, job), "a waiting job was failed")
	ev = jobEvents(t, job)
	require.Len(t, ev["PendingWaiting"], 1, "the Event was emitted again: %v", ev)
	require.Empty(t, ev["PendingFailed"])
	a := jobAnnotations(t, job)
	require.Equal(t, wf, a[contract.AnnotationWaitingFor])
	require.Empty(t, a[contract.AnnotationVerdict])
	_ = rv
}

// The pending timeout fails a job still waiting, with PENDING_TIMEOUT and
// the last cause.
func TestE2EPendingTimeout(t *testing.T) {
	ns := newNamespace(t, "e2e-pending-timeout", true)
	startScheduler(t)
	busyNode(t, ns, "pend-busy-2", "nvidia.com/gpu")
	c := startController(t, controller.Options{GangTimeout: time.Hour})
	start := time.Now()
	// 8 s: on a loaded machine a controller that starts next to many
	// objects must still see the job waiting before its timeout.
	job, _ := pendingJob(t, ns, "timeout", map[string]string{contract.AnnotationPendingGrace: "0s", contract.AnnotationPendingTimeout: "8s"}, "nvidia.com/gpu", 4, onNode("pend-busy-2"))
	require.Eventually(t, func() bool { return isSuspended(t, job) }, 30*time.Second, 100*time.Millisecond, c.logs.String())
	require.GreaterOrEqual(t, time.Since(start), 7*time.Second, "failed before the timeout")
	a := appliedVerdict(t, job)
	require.Equal(t, verdict.RulePendingTimeout+","+verdict.RuleWaitCapacity, a[contract.AnnotationRules])
	require.Contains(t, a[contract.AnnotationReason], "past its pending timeout of 8s")
	require.Contains(t, a[contract.AnnotationReason], "It was waiting: WAIT_CAPACITY")
	require.Contains(t, a[contract.AnnotationReason], "pend-busy-2")
	ev := jobEvents(t, job)
	require.Len(t, ev["PendingFailed"], 1, "%v", ev)
	require.Len(t, ev["PendingWaiting"], 1, "%v", ev)
}

// (j) mig-1g.10gb asked where the nodes run mig.strategy=single:
// STRATEGY_MISMATCH, and the fix names the strategy and the layout.
func TestE2EPendingStrategyMismatch(t *testing.T) {
	ns := newNamespace(t, "e2e-pending-strategy", true)
	startScheduler(t)
	gpuNode(t, "pend-h100-single", "nvidia.com/gpu", 1)
	realNode(t, "pend-h100-single", map[string]int64{"nvidia.com/gpu": 1}, map[string]string{
		"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "81559",
		"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "single",
		"nvidia.com/mig.config": "all-disabled", "nvidia.com/mig.config.state": "success",
	})
	c := startController(t, controller.Options{GangTimeout: time.Hour, PendingGrace: ptr.To(time.Duration(0))})
	job, _ := pendingJob(t, ns, "strategy", nil, "nvidia.com/mig-1g.10gb", 1)
	require.Eventually(t, func() bool { return isSuspended(t, job) }, 15*time.Second, 100*time.Millisecond, c.logs.String())
	a := appliedVerdict(t, job)
	require.Contains(t, strings.Split(a[contract.AnnotationRules], ","), verdict.RuleStrategyMismatch)
	for _, s := range []string{"mig.strategy=single", "pend-h100-single", "nvidia.com/mig.config=all-1g.10gb", "mig.strategy=mixed"} {
		require.Contains(t, a[contract.AnnotationReport], s)
	}
}

// (l) An MPIJob whose launcher is placed and whose workers cannot be: the
// job is judged on its workers and suspended (freeing the launcher).
func TestE2EPendingMPIWorkers(t *testing.T) {
	ns := newNamespace(t, "e2e-pending-mpi", true)
	startScheduler(t)
	a100All1g20(t, "pend-a100-1g-c")
	gpuNode(t, "pend-launcher", "nvidia.com/gpu", 8)
	realNode(t, "pend-launcher", map[string]int64{"nvidia.com/gpu": 8}, nil)
	c := startController(t, controller.Options{GangTimeout: time.Hour, PendingGrace: ptr.To(time.Duration(0))})
	job := mpiJob(t, ns, "mpi", 2)
	launcherPod(t, job, "pend-launcher")
	var workers []string
	for i := 0; i < 2; i++ {
		p := rankPod(t, job, "worker", i, "", "nvidia.com/mig-2g.20gb", scheduled)
		waitUnschedulable(t, p)
		workers = append(workers, ns+"/"+p.Name)
	}
	require.Eventually(t, func() bool { return isSuspended(t, job) }, 15*time.Second, 100*time.Millisecond, c.logs.String())
	a := appliedVerdict(t, job)
	require.Contains(t, strings.Split(a[contract.AnnotationRules], ","), verdict.RuleShapeMismatch)
	var rep verdict.Report
	require.NoError(t, json.Unmarshal([]byte(a[contract.AnnotationReport]), &rep))
	for _, f := range rep.Findings {
		if f.Severity == verdict.SeverityFail {
			require.ElementsMatch(t, workers, f.Pods, "not judged on the workers")
		}
	}
}
