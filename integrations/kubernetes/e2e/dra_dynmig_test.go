package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource"
	"github.com/rankgate/rankgate/verdict"
)

// Dynamic MIG (issue #22): an H100 published as NVIDIA's DRA driver
// v0.4.1 publishes it with its DynamicMIG feature gate on Kubernetes 1.35
// and later (clustertest.DynamicMIGSlices): a slice of the GPU's shared
// counters, and a slice of every MIG placement and the full GPU, each
// consuming those counters. The real kube-scheduler allocates claims on
// them, counting the counters; rankgate judges the Pending jobs with the
// same allocator and decides gangs from the allocations.

// The tests' nodes are named after their namespaces (name-2, ... when a
// test repeats): without kubelet and the resourceclaim controller, the
// claims a run allocated stay allocated, holding the devices of its
// node's pool.

// dynMIGNode is a Ready DRA node with one dynamic-MIG H100, the
// DeviceClasses mig.nvidia.com and gpu.nvidia.com (full GPUs).
func dynMIGNode(t testing.TB, node string) {
	t.Helper()
	draNode(t, node)
	objs := []client.Object{clustertest.MIGClass(), clustertest.DeviceClass("gpu.nvidia.com", "")}
	for _, s := range clustertest.DynamicMIGSlices(node, clustertest.DRADynamicGPU{UUID: allocGPUA, Product: allocH100, Driver: allocDriver}) {
		objs = append(objs, s)
	}
	draObjects(t, objs...)
}

// (a) Two ranks asking one 1g.10gb each: the scheduler allocates two
// placements of the one GPU (its counters allow seven), binds both pods,
// and the gang passes from the allocations, with no rank report.
func TestE2EDRADynamicMIGGangPasses(t *testing.T) {
	ns := newNamespace(t, "e2e-dra-dynmig-pass", true)
	startScheduler(t)
	node := "dra-dynmig-pass" + strings.TrimPrefix(ns, "e2e-dra-dynmig-pass")
	dynMIGNode(t, node)
	tmpl := migTemplate(t, ns, "mig-1g", "1g.10gb", 1)
	c := startController(t, controller.Options{GangTimeout: time.Hour})
	_, _, job := allocJob(t, ns, "pass", node, tmpl, tmpl)
	a := appliedVerdict(t, job)
	require.Equal(t, "pass", a[contract.AnnotationVerdict], "%v\n%s", a, c.logs.String())
	require.False(t, isSuspended(t, job))
	g := gangOf(t, job)
	require.NotNil(t, g)
	require.Len(t, g.Status.Ranks, 2)
	devs := map[string]bool{}
	for _, r := range g.Status.Ranks {
		require.Equal(t, devicesource.DRA, r.Source, "rank %d", r.Rank)
		require.Len(t, r.DRADevices, 1)
		d := r.DRADevices[0]
		require.Equal(t, node, d.Pool)
		require.Equal(t, "1g.10gb", d.Profile)
		require.True(t, strings.HasPrefix(d.Device, "gpu-0-mig-1g10gb-19-"), d.Device)
		// A placement has no uuid until the driver creates it: the Gang
		// shows none.
		require.Empty(t, d.UUID)
		devs[d.Device] = true
	}
	// Two placements, judged as two devices (the pass above: not one
	// given twice, GANG_DUPLICATE_DEVICE).
	require.Len(t, devs, 2, "two placements of the one GPU")
	require.Contains(t, c.logs.String(), "ranks known from their DRA allocations")
}

// (b) The full GPU is allocated to another pod's claim and consumes every
// counter: no placement is left, and a job asking 1g.10gb waits, naming
// that claim and pod; it is never suspended.
func TestE2EDRADynamicMIGWaitsForCounters(t *testing.T) {
	ns := newNamespace(t, "e2e-dra-dynmig-held", true)
	startScheduler(t)
	node := "dra-dynmig-held" + strings.TrimPrefix(ns, "e2e-dra-dynmig-held")
	dynMIGNode(t, node)
	holdGPU(t, ns, "holder", node, "gpu.nvidia.com")
	tmpl := migTemplate(t, ns, "mig-1g", "1g.10gb", 1)
	c := startController(t, controller.Options{GangTimeout: time.Hour, PendingGrace: ptr.To(time.Duration(0))})
	job, pods := claimJob(t, ns, "held", node, tmpl)
	for _, p := range pods {
		waitUnschedulable(t, p)
	}
	var wf string
	require.Eventually(t, func() bool { wf = jobAnnotations(t, job)[contract.AnnotationWaitingFor]; return wf != "" }, 20*time.Second, 100*time.Millisecond, c.logs.String())
	require.True(t, strings.HasPrefix(wf, verdict.RuleWaitCapacity+": "), wf)
	require.Contains(t, wf, "of all 2 pending pods on an empty cluster, but of 0 now")
	require.Contains(t, wf, "ResourceClaim "+ns+"/holder-gpu (pod "+ns+"/holder) holds gpu-0: ")
	require.Contains(t, wf, "counter set "+clustertest.CounterSetName(0))
	time.Sleep(3 * time.Second)
	require.False(t, isSuspended(t, job), "a waiting DRA job was suspended:\n%s", c.logs.String())
	require.Empty(t, jobAnnotations(t, job)[contract.AnnotationVerdict])
	require.Empty(t, jobEvents(t, job)["PendingFailed"])
	t.Logf("waiting-for: %s", wf)
}

// (c) Each pod asks two 3g.40gb and a 1g.10gb: every device is published,
// but the two 3g.40gb take all eight memory slices, so no placement of
// the GPU ever serves a pod. The scheduler leaves both ranks Pending; the
// watchdog suspends the job within the grace with SHAPE_MISMATCH.
func TestE2EDRADynamicMIGHopeless(t *testing.T) {
	ns := newNamespace(t, "e2e-dra-dynmig-never", true)
	startScheduler(t)
	node := "dra-dynmig-never" + strings.TrimPrefix(ns, "e2e-dra-dynmig-never")
	dynMIGNode(t, node)
	req := func(name, profile string, n int64) resourcev1.DeviceRequest {
		return resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "mig.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: n,
			Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.attributes['gpu.nvidia.com'].profile == '" + profile + "'"}}}}}
	}
	tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "too-much", Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{req("big", "3g.40gb", 2), req("small", "1g.10gb", 1)}}}}}
	require.NoError(t, k8s.Create(context.Background(), tmpl))
	c := startController(t, controller.Options{GangTimeout: time.Hour})
	_, a, took := hopelessClaimJob(t, c, ns, "never", node, tmpl)
	require.Contains(t, a[contract.AnnotationReason], "no device published in any ResourceSlice can serve a pod's DRA requests")
	require.Contains(t, a[contract.AnnotationReason], "request big: 2 device(s) of DeviceClass mig.nvidia.com where device.attributes['gpu.nvidia.com'].profile == '3g.40gb': 2 devices match on their own")
	t.Logf("suspended after %s\nreason: %s", took.Round(time.Millisecond), a[contract.AnnotationReason])
}
