package cluster

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

// Dynamic MIG on one H100 (clustertest.DynamicMIGSlices): every placement
// is published, consuming the GPU's counters, and the full GPU consumes
// them all. The judge allocates with the scheduler's allocator, which
// counts the counters the allocated devices consume.

const dynNode = "h100-dyn"

// migRequest asks count devices of class mig.nvidia.com of profile.
func migRequest(name, profile string, count int64) resourcev1.DeviceRequest {
	return resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{
		DeviceClassName: "mig.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count,
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.attributes['gpu.nvidia.com'].profile == '" + profile + "'"}}},
	}}
}

// heldBy is claim ml/<pod>-gpu, allocated device of the dynamic node's
// pool and reserved for pod.
func heldBy(pod, device string) *resourcev1.ResourceClaim {
	c := allocatedClaim("ml", pod+"-gpu", pod, dynNode, device)
	c.Status.Allocation.Devices.Results[0].Request = "gpu"
	return c
}

// judgeDynMIG judges a PyTorchJob of a master and a worker whose pods
// each get a claim from a template of requests, on one dynamic-MIG H100
// of which the claims held hold devices.
func judgeDynMIG(t *testing.T, requests []resourcev1.DeviceRequest, held ...*resourcev1.ResourceClaim) schedule.Result {
	t.Helper()
	b := NewBuilder()
	require.NoError(t, b.AddNode(clustertest.MakeNode(dynNode).Allocatable("cpu", "64").Allocatable("memory", "512Gi").Allocatable("pods", "110").Obj()))
	require.NoError(t, b.AddDeviceClass(clustertest.MIGClass()))
	require.NoError(t, b.AddDeviceClass(clustertest.DeviceClass("gpu.nvidia.com", "")))
	for _, s := range clustertest.DynamicMIGSlices(dynNode, clustertest.DRADynamicGPU{UUID: "GPU-4b9a1e6c-2d7f-3a58-9c41-7e0d5b2f8a13", Product: "NVIDIA H100 80GB HBM3", Driver: "580.126.20"}) {
		require.NoError(t, b.AddResourceSlice(s))
	}
	require.NoError(t, b.AddResourceClaimTemplate(&resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "mig-template"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: requests}}}}))
	for _, c := range held {
		require.NoError(t, b.AddResourceClaim(c))
	}
	j := asJob(t, kubeflowtest.MakePyTorchJob("llm", "ml").Master().Workers(1).PodSpec(withClaim("mig")).Obj())
	w, err := b.WorkloadFor(j)
	require.NoError(t, err)
	e := schedule.New()
	return e.Diagnose(e.NewCluster(b.Nodes()), w)
}

func TestDRADynamicMIGCounters(t *testing.T) {
	one1g := []resourcev1.DeviceRequest{migRequest("gpu", "1g.10gb", 1)}
	t.Run("two 1g.10gb placements of one GPU fit now", func(t *testing.T) {
		res := judgeDynMIG(t, one1g)
		require.Equal(t, verdict.RuleSchedulable, res.Rule, res.Report.Reason(0))
		require.False(t, res.Hopeless)
	})
	t.Run("the full GPU allocated holds every counter: waits, naming its claim", func(t *testing.T) {
		res := judgeDynMIG(t, one1g, heldBy("notebook", "gpu-0"))
		require.Equal(t, verdict.RuleWaitCapacity, res.Rule, res.Report.Reason(0))
		require.False(t, res.Hopeless)
		fs := findingsOf(res, verdict.RuleWaitCapacity)
		require.Len(t, fs, 1)
		require.Contains(t, fs[0].Message, "Master (1 pod) + Worker (1 pod): the published devices serve the DRA requests (resource claims mig) of all 2 pending pods on an empty cluster, but of 0 now")
		require.Contains(t, fs[0].Message, "ResourceClaim ml/notebook-gpu (pod ml/notebook) holds gpu-0: ")
		require.Contains(t, fs[0].Message, "which consumes the counters of counter set gpu-0-counter-set that the matching devices draw on")
		t.Log(fs[0].Message)
	})
	t.Run("a 7g.80gb placement allocated: waits, naming its claim", func(t *testing.T) {
		res := judgeDynMIG(t, one1g, heldBy("big", "gpu-0-mig-7g80gb-0-0"))
		require.Equal(t, verdict.RuleWaitCapacity, res.Rule, res.Report.Reason(0))
		fs := findingsOf(res, verdict.RuleWaitCapacity)
		require.Len(t, fs, 1)
		require.Contains(t, fs[0].Message, "ResourceClaim ml/big-gpu (pod ml/big) holds gpu-0-mig-7g80gb-0-0")
	})
	t.Run("a 4g.40gb allocated leaves one 3g.40gb placement: the worker waits", func(t *testing.T) {
		res := judgeDynMIG(t, []resourcev1.DeviceRequest{migRequest("gpu", "3g.40gb", 1)}, heldBy("mid", "gpu-0-mig-4g40gb-5-0"))
		require.Equal(t, verdict.RuleWaitCapacity, res.Rule, res.Report.Reason(0))
		fs := findingsOf(res, verdict.RuleWaitCapacity)
		require.Len(t, fs, 1)
		// The master gets the 3g.40gb placement beside the 4g.40gb.
		require.Contains(t, fs[0].Message, "Worker (1 pod): the published devices serve the DRA requests (resource claims mig) of all 1 pending pod on an empty cluster, but of 0 now")
		require.Contains(t, fs[0].Message, "ResourceClaim ml/mid-gpu (pod ml/mid) holds gpu-0-mig-4g40gb-5-0")
	})
	t.Run("a profile the GPU does not publish is hopeless", func(t *testing.T) {
		res := judgeDynMIG(t, []resourcev1.DeviceRequest{migRequest("gpu", "1g.20gb", 1)}, heldBy("notebook", "gpu-0"))
		require.Equal(t, verdict.RuleShapeMismatch, res.Rule, res.Report.Reason(0))
		require.True(t, res.Hopeless)
	})
	t.Run("more per pod than the counters allow is hopeless though every device is published", func(t *testing.T) {
		// Two 3g.40gb take all 8 memory slices: no 1g.10gb fits beside them.
		res := judgeDynMIG(t, []resourcev1.DeviceRequest{migRequest("big", "3g.40gb", 2), migRequest("small", "1g.10gb", 1)})
		require.Equal(t, verdict.RuleShapeMismatch, res.Rule, res.Report.Reason(0))
		require.True(t, res.Hopeless)
		fs := findingsOf(res, verdict.RuleShapeMismatch)
		require.Len(t, fs, 1)
		t.Log(fs[0].Message)
	})
	t.Run("each pod fits alone, never two at once: the gang is too large", func(t *testing.T) {
		// 3g.40gb + 2g.20gb take 6 of the 8 memory slices.
		res := judgeDynMIG(t, []resourcev1.DeviceRequest{migRequest("a", "3g.40gb", 1), migRequest("b", "2g.20gb", 1)})
		require.Equal(t, verdict.RuleGangTooLarge, res.Rule, res.Report.Reason(0))
		require.True(t, res.Hopeless)
		fs := findingsOf(res, verdict.RuleGangTooLarge)
		require.Len(t, fs, 1)
		// The master gets its devices, the worker none beside them.
		require.Contains(t, fs[0].Message, "Worker (1 pod): even with every device free, the published devices serve the DRA requests (resource claims mig) of 0 of the 1 pending pod at once.")
	})
}

// The builder publishes what the driver does: a placement has no uuid,
// the full GPU consumes the whole counter set, and every counter a
// device consumes is in it.
func TestDynamicMIGSlicesAsTheDriverPublishes(t *testing.T) {
	ss := clustertest.DynamicMIGSlices("n", clustertest.DRADynamicGPU{UUID: "GPU-a", Product: "NVIDIA H100 80GB HBM3", Driver: "580.126.20"},
		clustertest.DRADynamicGPU{UUID: "GPU-b", Product: "NVIDIA H100 80GB HBM3", Driver: "580.126.20"})
	require.Len(t, ss, 3)
	require.Empty(t, ss[0].Spec.Devices)
	require.Len(t, ss[0].Spec.SharedCounters, 2)
	sets := map[string]resourcev1.CounterSet{}
	for _, cs := range ss[0].Spec.SharedCounters {
		sets[cs.Name] = cs
	}
	require.Len(t, sets["gpu-1-counter-set"].Counters, 15)
	for i, s := range ss[1:] {
		require.Equal(t, int64(3), s.Spec.Pool.ResourceSliceCount)
		require.Equal(t, "n", s.Spec.Pool.Name)
		require.Len(t, s.Spec.Devices, 1+7+3+2+1+1)
		for _, d := range s.Spec.Devices {
			require.Len(t, d.ConsumesCounters, 1)
			set := sets[d.ConsumesCounters[0].CounterSet]
			require.Equal(t, clustertest.CounterSetName(i), set.Name)
			for name, c := range d.ConsumesCounters[0].Counters {
				have, ok := set.Counters[name]
				require.True(t, ok, "%s consumes %s", d.Name, name)
				require.LessOrEqual(t, c.Value.Cmp(have.Value), 0)
			}
			_, hasUUID := d.Attributes["uuid"]
			if strings.Contains(d.Name, "-mig-") {
				require.False(t, hasUUID, d.Name)
				require.Equal(t, "mig", *d.Attributes["type"].StringValue)
			} else {
				require.True(t, hasUUID, d.Name)
				require.Equal(t, set.Counters, d.ConsumesCounters[0].Counters, "the full GPU consumes the whole set")
			}
		}
	}
	require.Equal(t, "gpu-0-mig-1g10gb-19-0", ss[1].Spec.Devices[1].Name)
}
