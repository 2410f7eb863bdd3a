package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstatus"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// The gang decided from DRA allocations: the real kube-scheduler
// allocates each rank pod's claim on devices published as NVIDIA's DRA
// driver v0.4.1 publishes them and binds the pod; no init container runs
// (no kubelet), so no rank reports itself. The controller resolves the
// allocated devices to their published facts, runs the rank and gang
// rules, records the verdict and acts on it.

const (
	allocH100   = "NVIDIA H100 80GB HBM3"
	allocDriver = "580.126.20"
	allocGPUA   = "GPU-4b9a1e6c-2d7f-3a58-9c41-7e0d5b2f8a13"
	allocGPUB   = "GPU-7c9b5a3e-2f1d-4b8e-9a6c-3d2e1f0a9b8c"
)

// migNode is a Ready DRA node whose slice publishes the MIG devices of
// gpus, with the DeviceClass mig.nvidia.com.
func migNode(t testing.TB, node string, gpus ...clustertest.DRAMIGGPU) {
	t.Helper()
	draNode(t, node)
	s := clustertest.MIGSlice(node, gpus...)
	draObjects(t, clustertest.MIGClass(), s)
}

func migOf(uuid string, devs ...clustertest.DRAMIG) clustertest.DRAMIGGPU {
	return clustertest.DRAMIGGPU{UUID: uuid, Product: allocH100, Driver: allocDriver, MIG: devs}
}

func mig1g(uuid string) clustertest.DRAMIG {
	return clustertest.DRAMIG{UUID: uuid, Profile: "1g.10gb", SMs: 16, MemoryMiB: 9984}
}

func mig2g(uuid string) clustertest.DRAMIG {
	return clustertest.DRAMIG{UUID: uuid, Profile: "2g.20gb", SMs: 32, MemoryMiB: 19968}
}

// migTemplate creates a claim template asking count MIG devices of
// profile.
func migTemplate(t testing.TB, ns, name, profile string, count int64) *resourcev1.ResourceClaimTemplate {
	t.Helper()
	exact := &resourcev1.ExactDeviceRequest{DeviceClassName: "mig.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count,
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.attributes['gpu.nvidia.com'].profile == '" + profile + "'"}}}}
	tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: exact}}}}}}
	require.NoError(t, k8s.Create(context.Background(), tmpl))
	return tmpl
}

// allocJob creates a PyTorchJob of a master and a worker whose pods get
// their devices from claims made from the templates (master's, worker's),
// on node, and returns it once the scheduler has bound both pods.
func allocJob(t testing.TB, ns, name, node string, master, worker *resourcev1.ResourceClaimTemplate) (*corev1.Pod, *corev1.Pod, client.Object) {
	t.Helper()
	job := pytorchJob(t, ns, name, true, 1, nil)
	var pods []*corev1.Pod
	for _, rt := range []struct {
		name string
		tmpl *resourcev1.ResourceClaimTemplate
	}{{"master", master}, {"worker", worker}} {
		p := rankPod(t, job, rt.name, 0, "", "", withClaimFrom(rt.tmpl.Name), scheduled, onNode(node))
		podClaim(t, p, rt.tmpl)
		pods = append(pods, p)
	}
	return pods[0], pods[1], job
}

// suspendedFromAllocations waits until job is suspended by a fail verdict
// and returns its annotations.
func suspendedFromAllocations(t *testing.T, c *ctrl, job client.Object) map[string]string {
	t.Helper()
	require.Eventually(t, func() bool { return isSuspended(t, job) }, 30*time.Second, 100*time.Millisecond, c.logs.String())
	a := appliedVerdict(t, job)
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	require.Equal(t, controller.ActionSuspend, a[contract.AnnotationAction])
	return a
}

// (a) Two ranks on 1g.10gb devices of one GPU: the gang passes from the
// allocations alone, with no rank report, and the Gang shows each rank's
// DRA devices.
func TestE2EDRAGangPassesFromAllocations(t *testing.T) {
	ns := newNamespace(t, "e2e-dra-alloc-pass", true)
	startScheduler(t)
	node := "dra-alloc-pass"
	migNode(t, node, migOf(allocGPUA, mig1g("MIG-a0"), mig1g("MIG-a1"), mig1g("MIG-a2")))
	tmpl := migTemplate(t, ns, "mig-1g", "1g.10gb", 1)
	c := startController(t, controller.Options{GangTimeout: time.Hour})
	start := time.Now()
	_, _, job := allocJob(t, ns, "pass", node, tmpl, tmpl)
	a := appliedVerdict(t, job)
	took := time.Since(start)
	require.Equal(t, "pass", a[contract.AnnotationVerdict], c.logs.String())
	require.False(t, isSuspended(t, job))
	g := gangOf(t, job)
	require.NotNil(t, g)
	require.Len(t, g.Status.Ranks, 2)
	for _, r := range g.Status.Ranks {
		require.Equal(t, devicesource.DRA, r.Source, "rank %d", r.Rank)
		require.Len(t, r.DRADevices, 1)
		d := r.DRADevices[0]
		require.Equal(t, node, d.Pool)
		require.Equal(t, "1g.10gb", d.Profile)
		require.True(t, strings.HasPrefix(d.UUID, "MIG-a"), d.UUID)
		require.True(t, strings.HasPrefix(d.Device, "gpu-0-mig-1g10gb-"), d.Device)
	}
	require.NotEqual(t, g.Status.Ranks[0].DRADevices[0].UUID, g.Status.Ranks[1].DRADevices[0].UUID)
	require.Contains(t, c.logs.String(), "ranks known from their DRA allocations")
	// What `rankgate status -o wide` prints of the Gang.
	var out strings.Builder
	require.NoError(t, gangstatus.WriteDetail(&out, g, time.Now(), true))
	require.Contains(t, out.String(), "DRA allocation")
	t.Logf("verdict %s from allocations %s after the job's pods were created; rankgate status:\n%s", a[contract.AnnotationVerdict], took.Round(time.Millisecond), out.String())
}

// (b) A rank whose claim asks two 1g.10gb devices on a node where each
// GPU has one: its devices span two GPUs; the gang fails from the
// allocations and the job is suspended before any container starts.
func TestE2EDRARankSpanningGPUsSuspended(t *testing.T) {
	ns := newNamespace(t, "e2e-dra-alloc-span", true)
	startScheduler(t)
	node := "dra-alloc-span"
	migNode(t, node, migOf(allocGPUA, mig1g("MIG-a0"), mig2g("MIG-a1")), migOf(allocGPUB, mig1g("MIG-b0"), mig2g("MIG-b1")))
	two := migTemplate(t, ns, "mig-1g-x2", "1g.10gb", 2)
	one := migTemplate(t, ns, "mig-2g", "2g.20gb", 1)
	c := startController(t, controller.Options{GangTimeout: time.Hour})
	_, _, job := allocJob(t, ns, "span", node, two, one)
	a := suspendedFromAllocations(t, c, job)
	rules := strings.Split(a[contract.AnnotationRules], ",")
	require.Contains(t, rules, verdict.RuleRankFailed)
	require.Contains(t, a[contract.AnnotationReason], verdict.RuleMIGSpansGPUs)
	require.Contains(t, a[contract.AnnotationReason], allocGPUA)
	require.Contains(t, a[contract.AnnotationReason], allocGPUB)
	ev := jobEvents(t, job)
	require.Len(t, ev["GangFailed"], 1, "%v", ev)
	require.Contains(t, ev["GangFailed"][0], "job suspended")
	t.Logf("reason: %s", a[contract.AnnotationReason])
}

// (c) Ranks on different profiles of one GPU (the master's claim asks a
// 2g.20gb device, the worker's a 1g.10gb one): GANG_PROFILE_MISMATCH,
// suspended.
func TestE2EDRARanksOnDifferentProfilesFail(t *testing.T) {
	ns := newNamespace(t, "e2e-dra-alloc-prof", true)
	startScheduler(t)
	node := "dra-alloc-prof"
	migNode(t, node, migOf(allocGPUA, mig2g("MIG-a0"), mig1g("MIG-a1"), mig1g("MIG-a2")))
	big := migTemplate(t, ns, "mig-2g", "2g.20gb", 1)
	small := migTemplate(t, ns, "mig-1g", "1g.10gb", 1)
	c := startController(t, controller.Options{GangTimeout: time.Hour})
	_, _, job := allocJob(t, ns, "prof", node, big, small)
	a := suspendedFromAllocations(t, c, job)
	require.Contains(t, strings.Split(a[contract.AnnotationRules], ","), verdict.RuleGangProfileMismatch)
	require.Contains(t, a[contract.AnnotationReason], "2g.20gb")
	require.Contains(t, a[contract.AnnotationReason], "1g.10gb")
	t.Logf("reason: %s", a[contract.AnnotationReason])
}

// A TrainJob of 2 nodes whose node pods (made by its JobSet's Job, owned
// by a batch Job) get MIG devices of different profiles through claims:
// decided from the allocations, and the TrainJob is suspended.
func TestE2EDRATrainJobDecidedFromAllocations(t *testing.T) {
	ns := newNamespace(t, "e2e-dra-alloc-tj", true)
	startScheduler(t)
	node := "dra-alloc-tj"
	migNode(t, node, migOf(allocGPUA, mig2g("MIG-a0"), mig1g("MIG-a1"), mig1g("MIG-a2")))
	big := migTemplate(t, ns, "mig-2g", "2g.20gb", 1)
	small := migTemplate(t, ns, "mig-1g", "1g.10gb", 1)
	c := startController(t, controller.Options{GangTimeout: time.Hour})
	tj := &trainjob.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "fine-tune", Namespace: ns, Labels: map[string]string{contract.KeyGate: "enabled"}},
		Spec: trainjob.Spec{RuntimeRef: trainjob.RuntimeRef{Name: "torch-distributed"}, Trainer: &trainjob.Trainer{NumNodes: ptr.To(int32(2))}}}
	require.NoError(t, k8s.Create(context.Background(), tj))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), tj) })
	js := newJobSet(t, ns, "fine-tune", 2, tj)
	tmpls := []*resourcev1.ResourceClaimTemplate{big, small}
	i := 0
	pods := jobSetRankPods(t, js, 2, []string{"", ""}, "nvidia.com/gpu", func(p *corev1.Pod) {
		withClaimFrom(tmpls[i].Name)(p)
		scheduled(p)
		onNode(node)(p)
		i++
	})
	for k, p := range pods {
		podClaim(t, p, tmpls[k])
	}
	require.Eventually(t, func() bool {
		fresh := &trainjob.TrainJob{}
		require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(tj), fresh))
		return ptr.Deref(fresh.Spec.Suspend, false)
	}, 30*time.Second, 100*time.Millisecond, "TrainJob not suspended:\n%s", c.logs.String())
	a := appliedVerdict(t, tj)
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	require.Contains(t, strings.Split(a[contract.AnnotationRules], ","), verdict.RuleGangProfileMismatch)
	g := gangOf(t, tj)
	require.NotNil(t, g)
	for _, r := range g.Status.Ranks {
		require.Equal(t, devicesource.DRA, r.Source)
	}
	require.Nil(t, gangOf(t, js), "the TrainJob's JobSet opens no gang of its own")
	t.Logf("reason: %s", a[contract.AnnotationReason])
}

// The ranks' own reports after a pass decided from allocations: a rank
// whose NVML devices are the ones its claim was allocated starts (exit
// 0); a rank whose NVML shows another device than its claim's is
// answered fail alone, with DRA_DEVICES_DISAGREE naming both sides (exit
// 1). The node publishes GPU 1 of the embedded h100-mig sample (two
// 3g.40gb devices), with the sample's UUIDs.
func TestE2EDRAOwnReportAgainstAllocation(t *testing.T) {
	ns := newNamespace(t, "e2e-dra-alloc-own", true)
	startScheduler(t)
	node := "dra-alloc-own"
	const gpu1 = "GPU-8d116ece-1738-47d9-bd9c-172411e20b8f"
	mig3g := func(uuid string) clustertest.DRAMIG {
		return clustertest.DRAMIG{UUID: uuid, Profile: "3g.40gb", SMs: 60, MemoryMiB: 40448}
	}
	migNode(t, node, migOf(gpu1, mig3g("MIG-90c192cf-d3ac-44af-8f21-ddb66cad4a26"), mig3g("MIG-a170b338-3926-4059-b28c-105d1fb17c23")))
	tmpl := migTemplate(t, ns, "mig-3g", "3g.40gb", 1)
	c := startController(t, controller.Options{GangTimeout: time.Hour})
	master, worker, job := allocJob(t, ns, "own", node, tmpl, tmpl)
	require.Equal(t, "pass", appliedVerdict(t, job)[contract.AnnotationVerdict], c.logs.String())
	g := gangOf(t, job)
	require.Len(t, g.Status.Ranks, 2)
	uuidOf := map[string]string{}
	for _, r := range g.Status.Ranks {
		require.Len(t, r.DRADevices, 1)
		uuidOf[r.Pod] = r.DRADevices[0].UUID
	}
	// The master's NVML shows its claim's device; the worker's shows a
	// 1g.10gb device of GPU 0 instead.
	agree := startRank(t, c.URL, master, token(t, master, gate.Audience), "--sample", "h100-mig", "--devices", uuidOf[master.Name])
	disagree := startRank(t, c.URL, worker, token(t, worker, gate.Audience), "--sample", "h100-mig", "--devices", "0:2")
	require.Equal(t, 0, agree.wait(t, time.Minute), agree.termination())
	require.Equal(t, verdict.ExitFail, disagree.wait(t, time.Minute), disagree.termination())
	term := disagree.termination()
	require.Contains(t, term, verdict.RuleRankFailed)
	require.Contains(t, term, verdict.RuleDRADevicesDisagree)
	require.Contains(t, term, "allocated but not seen by the rank: "+uuidOf[worker.Name])
	require.Contains(t, term, "seen by the rank but not allocated: MIG-36f675cc-81e7-4ef5-a8e2-5d940ed90475")
	// The recorded verdict stays.
	require.Equal(t, "pass", jobAnnotations(t, job)[contract.AnnotationVerdict])
	require.False(t, isSuspended(t, job))
	t.Logf("the disagreeing rank's termination message:\n%s", term)
}
