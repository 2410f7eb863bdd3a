package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/verdict"
)

// (g) and (h) of the DRA scenarios, with the real kube-scheduler
// allocating claims: devices NVIDIA's DRA driver tainted unhealthy, and a
// cluster of device-plugin and DRA nodes side by side.

// Two H100s as the driver publishes them (clustertest.GPUSlice).
var draH100s = []clustertest.DRAGPU{
	{UUID: "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", Product: "NVIDIA H100 80GB HBM3", Driver: "580.95.5", MemoryGiB: 80},
	{UUID: "GPU-7c9b5a3e-2f1d-4b8e-9a6c-3d2e1f0a9b8c", Product: "NVIDIA H100 80GB HBM3", Driver: "580.95.5", MemoryGiB: 80},
}

// The taints the driver's NVML health monitor (NVMLDeviceHealthCheck)
// puts on a device: a fatal Xid (the value is the Xid) and a GPU fallen
// off the bus, both NoSchedule (sigs.k8s.io/dra-driver-nvidia-gpu v0.4.1,
// cmd/gpu-kubelet-plugin/device_health.go).
var (
	xid79   = resourcev1.DeviceTaint{Key: "gpu.nvidia.com/xid", Value: "79", Effect: resourcev1.DeviceTaintEffectNoSchedule}
	gpuLost = resourcev1.DeviceTaint{Key: "gpu.nvidia.com/gpu-lost", Effect: resourcev1.DeviceTaintEffectNoSchedule}
)

// (g) The driver tainted both H100s of the node unhealthy (gpu-0 a fatal
// Xid 79, gpu-1 lost) and the job's claims match only them: the real
// scheduler allocates neither, both ranks stay Pending. The job waits for
// the repair, as for a NotReady node, and is never suspended:
// rankgate.io/waiting-for and the Normal Event say DRA_DEVICE_UNHEALTHY,
// naming each device and its taint. Once the driver publishes the
// devices untainted again (after the repair, its kubelet plugin
// restarted), the scheduler binds both ranks and the cause is removed.
func TestE2EPendingDRAUnhealthyDevicesWait(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "e2e-pending-dra-sick", true)
	startScheduler(t)
	node := "pend-dra-sick"
	draNode(t, node)
	slice := clustertest.GPUSlice(node, draH100s...)
	slice.Spec.Devices[0].Taints = []resourcev1.DeviceTaint{xid79}
	slice.Spec.Devices[1].Taints = []resourcev1.DeviceTaint{gpuLost}
	draObjects(t, clustertest.DeviceClass("gpu.nvidia.com", ""), slice)
	// Device taints are GA in Kubernetes 1.37 (DRADeviceTaints, on by
	// default): the API server keeps them and stamps when they came.
	stored := &resourcev1.ResourceSlice{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(slice), stored))
	for i, want := range []resourcev1.DeviceTaint{xid79, gpuLost} {
		require.Len(t, stored.Spec.Devices[i].Taints, 1, "the API server dropped the device taints")
		got := stored.Spec.Devices[i].Taints[0]
		require.Equal(t, want.Key, got.Key)
		require.Equal(t, want.Value, got.Value)
		require.Equal(t, want.Effect, got.Effect)
		require.NotNil(t, got.TimeAdded)
	}
	sel := "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"
	tmpl := claimTemplate(t, ns, "h100", "gpu.nvidia.com", sel)
	c := startController(t, controller.Options{GangTimeout: time.Hour, PendingGrace: ptr.To(time.Duration(0))})
	job, pods := claimJob(t, ns, "sick", node, tmpl)
	for _, p := range pods {
		f := waitUnschedulable(t, p)
		for _, c := range f.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				t.Logf("%s: the scheduler said %q", p.Name, c.Message)
			}
		}
	}
	var wf string
	require.Eventually(t, func() bool { wf = jobAnnotations(t, job)[contract.AnnotationWaitingFor]; return wf != "" }, 20*time.Second, 100*time.Millisecond, c.logs.String())
	want := verdict.RuleDRADeviceUnhealthy + ": Master (1 pod) + Worker (1 pod): the published devices would serve the DRA requests (resource claims gpu) of all 2 pending pods, " +
		"but the driver tainted matching devices as unhealthy and the scheduler allocates none of those: the healthy ones serve 0. " +
		"claim template " + ns + "/h100 request gpu: 1 device(s) of DeviceClass gpu.nvidia.com where " + sel + ": 2 published devices match, 2 of them tainted: " +
		"gpu-0 on " + node + " (gpu.nvidia.com/xid=79:NoSchedule); gpu-1 on " + node + " (gpu.nvidia.com/gpu-lost:NoSchedule). " +
		"The pods wait until those devices are repaired and published untainted."
	require.Equal(t, want, wf)
	// Re-judged (a node change), past the grace: still waiting, never
	// suspended or failed.
	for i := 0; i < 3; i++ {
		labelNode(t, node, map[string]string{"resync": fmt.Sprint(i)})
		time.Sleep(time.Second)
	}
	require.False(t, isSuspended(t, job), "a job waiting for unhealthy devices was suspended:\n%s", c.logs.String())
	a := jobAnnotations(t, job)
	require.Empty(t, a[contract.AnnotationVerdict])
	require.Equal(t, want, a[contract.AnnotationWaitingFor])
	ev := jobEvents(t, job)
	require.Empty(t, ev["PendingFailed"], "%v", ev)
	require.Len(t, ev["PendingWaiting"], 1, "%v", ev)
	require.Contains(t, ev["PendingWaiting"][0], "waiting: "+verdict.RuleDRADeviceUnhealthy+": ")
	require.Contains(t, ev["PendingWaiting"][0], "gpu-0 on "+node+" (gpu.nvidia.com/xid=79:NoSchedule)")
	require.Contains(t, ev["PendingWaiting"][0], "gpu-1 on "+node+" (gpu.nvidia.com/gpu-lost:NoSchedule)")
	require.Contains(t, ev["PendingWaiting"][0], "restart the DRA driver's kubelet plugin")

	// Repaired: the driver's kubelet plugin, restarted, publishes the two
	// GPUs without taints in a new pool generation.
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(slice), stored))
	stored.Spec.Pool.Generation++
	for i := range stored.Spec.Devices {
		stored.Spec.Devices[i].Taints = nil
	}
	require.NoError(t, k8s.Update(ctx, stored))
	boundAndWarned(t, c, job, pods, node, "the scheduler did not bind the ranks on the repaired GPUs")
	t.Logf("waiting-for: %s", wf)
}

// (h) One node whose H100 the device plugin serves as seven
// nvidia.com/mig-1g.10gb (GFD labels, mixed strategy), one node whose two
// H100s NVIDIA's DRA driver publishes, with the DeviceClass gpu.nvidia.com
// serving nvidia.com/gpu as the driver's Helm chart installs it. Three
// jobs at once, each judged on what serves it:
//   - nvidia.com/mig-3g.40gb, which no node advertises: suspended with
//     SHAPE_MISMATCH naming the device plugin's mig-1g.10gb offer, not the
//     DRA devices;
//   - a claim template asking a B200: suspended with SHAPE_MISMATCH naming
//     the nearest DRA devices (the H100s), not the device plugin's offer;
//   - nvidia.com/gpu, which only the DeviceClass serves: never called "not
//     offered", the scheduler binds both ranks on the DRA node.
func TestE2EPendingDRAMixedWithDevicePlugin(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "e2e-pending-dra-mixed", true)
	startScheduler(t)
	plugin, dra := "pend-mixed-plugin", "pend-mixed-dra"
	gpuNode(t, plugin, "nvidia.com/mig-1g.10gb", 7)
	realNode(t, plugin, map[string]int64{"nvidia.com/mig-1g.10gb": 7}, map[string]string{
		"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "81559",
		"nvidia.com/mig-1g.10gb.count": "7", "nvidia.com/mig-1g.10gb.memory": "9984", "nvidia.com/mig-1g.10gb.multiprocessors": "16",
		"nvidia.com/mig.capable": "true", "nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "success",
		"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.deploy.device-plugin": "true",
	})
	draNode(t, dra)
	draObjects(t, clustertest.DeviceClass("gpu.nvidia.com", "nvidia.com/gpu"), clustertest.GPUSlice(dra, draH100s...))
	sel := "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"
	b200 := claimTemplate(t, ns, "b200", "gpu.nvidia.com", sel)
	c := startController(t, controller.Options{GangTimeout: time.Hour})
	start := time.Now()

	migJob, _ := pendingJob(t, ns, "plugin-3g40gb", nil, "nvidia.com/mig-3g.40gb", 1)
	claimed, claimPods := claimJob(t, ns, "dra-b200", dra, b200)
	for _, p := range claimPods {
		waitUnschedulable(t, p)
	}
	extJob, extPods := schedJob(t, ns, "dra-ext", nil, 1, "nvidia.com/gpu", 1)

	for _, j := range []client.Object{migJob, claimed} {
		require.Eventually(t, func() bool { return isSuspended(t, j) }, controller.DefaultPendingGrace+20*time.Second, 100*time.Millisecond,
			"%s not suspended:\n%s", j.GetName(), c.logs.String())
	}
	t.Logf("both suspended %s after the jobs were created", time.Since(start).Round(time.Millisecond))

	// The device-plugin job: judged on node allocatable and GFD labels.
	a := appliedVerdict(t, migJob)
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	require.Equal(t, controller.ActionSuspend, a[contract.AnnotationAction])
	require.Contains(t, strings.Split(a[contract.AnnotationRules], ","), verdict.RuleShapeMismatch)
	require.NotContains(t, a[contract.AnnotationRules], verdict.RuleDRANotJudged)
	reason := a[contract.AnnotationReason]
	require.True(t, strings.HasPrefix(reason, verdict.RuleShapeMismatch+": Master (1 pod) + Worker (1 pod) asks nvidia.com/mig-3g.40gb (60 SMs, 40448 MiB on H100-80GB), and no node offers it. "+
		"The cluster has nvidia.com/mig-1g.10gb (16 SMs, 9984 MiB, H100-80GB) on 1 node, 7 in all."), reason)
	require.Contains(t, reason, "RECONFIGURABLE: No node offers nvidia.com/mig-3g.40gb now, but a MIG layout valid for these nodes' GPUs would: node "+plugin+" (H100-80GB,")
	for _, s := range []string{dra, "ResourceSlice", "DeviceClass", "published"} {
		require.NotContains(t, reason, s, "the device-plugin job was judged on DRA devices")
	}
	ev := jobEvents(t, migJob)
	require.Len(t, ev["PendingFailed"], 1, "%v", ev)
	require.Contains(t, ev["PendingFailed"][0], "job suspended: SHAPE_MISMATCH")

	// The claim job: judged on the published devices.
	a = appliedVerdict(t, claimed)
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	require.Equal(t, controller.ActionSuspend, a[contract.AnnotationAction])
	require.Contains(t, strings.Split(a[contract.AnnotationRules], ","), verdict.RuleShapeMismatch)
	require.NotContains(t, a[contract.AnnotationRules], verdict.RuleDRANotJudged)
	reason = a[contract.AnnotationReason]
	require.Contains(t, reason, verdict.RuleShapeMismatch+": Master (1 pod) + Worker (1 pod): no device published in any ResourceSlice can serve a pod's DRA requests (resource claims gpu), even with every device free. "+
		"claim template "+ns+"/b200 request gpu: 1 device(s) of DeviceClass gpu.nvidia.com where "+sel+": no device matches; "+
		"nearest: 2 x NVIDIA H100 80GB HBM3 (80Gi, driver 580.95.5) on "+dra+", e.g. gpu-0.")
	for _, s := range []string{plugin, "mig-1g.10gb", "offers no NVIDIA GPU"} {
		require.NotContains(t, reason, s, "the DRA job was judged on the device plugin's offer")
	}
	ev = jobEvents(t, claimed)
	require.Len(t, ev["PendingFailed"], 1, "%v", ev)
	require.Contains(t, ev["PendingFailed"][0], "job suspended: SHAPE_MISMATCH")

	// nvidia.com/gpu: served by the DeviceClass on the DRA node.
	require.Eventually(t, func() bool {
		for _, p := range extPods {
			f := &corev1.Pod{}
			if k8s.Get(ctx, client.ObjectKeyFromObject(p), f) != nil || f.Spec.NodeName != dra {
				return false
			}
		}
		return true
	}, 60*time.Second, 200*time.Millisecond, "the scheduler did not bind the nvidia.com/gpu ranks on the DRA node")
	require.False(t, isSuspended(t, extJob), c.logs.String())
	// Judged from the allocations once bound: two pods on one node, a
	// warning.
	a = appliedVerdict(t, extJob)
	require.Equal(t, "warn", a[contract.AnnotationVerdict])
	require.Equal(t, verdict.RuleGangSplitPodsSameNode, a[contract.AnnotationRules])
	require.Empty(t, a[contract.AnnotationWaitingFor])
	require.Empty(t, jobEvents(t, extJob)["PendingFailed"])
	t.Logf("device plugin job: %s\nDRA job: %s", appliedVerdict(t, migJob)[contract.AnnotationReason], reason)
}

// boundAndWarned waits until the scheduler bound every pod of job on
// node (failing with why) and the job no longer waits; then, bound with
// their claims allocated, the ranks are judged from the allocations: two
// pods on one node, a warning, and the job runs.
func boundAndWarned(t *testing.T, c *ctrl, job client.Object, pods []*corev1.Pod, node, why string) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		for _, p := range pods {
			f := &corev1.Pod{}
			if k8s.Get(ctx, client.ObjectKeyFromObject(p), f) != nil || f.Spec.NodeName != node {
				return false
			}
		}
		return true
	}, 60*time.Second, 200*time.Millisecond, why)
	require.Eventually(t, func() bool { _, ok := jobAnnotations(t, job)[contract.AnnotationWaitingFor]; return !ok }, 20*time.Second, 100*time.Millisecond,
		"rankgate.io/waiting-for stayed after the ranks were bound:\n%s", c.logs.String())
	require.False(t, isSuspended(t, job))
	a := appliedVerdict(t, job)
	require.Equal(t, "warn", a[contract.AnnotationVerdict], c.logs.String())
	require.Equal(t, verdict.RuleGangSplitPodsSameNode, a[contract.AnnotationRules])
}
