package cluster

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource/dra"
)

var _ dra.Objects = DRAObjects{}

// allocatedClaim is claim namespace/name, made for pod from its claim
// "gpu" and allocated device of node's pool.
func allocatedClaim(namespace, name, pod, node, device string) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Status: resourcev1.ResourceClaimStatus{
			Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
				Request: "mig", Driver: clustertest.NVIDIADRADriver, Pool: node, Device: device,
			}}}},
			ReservedFor: []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pod}},
		},
	}
}

// withAllocatedClaim gives pod a claim "gpu" from template mig, made as claim.
func withAllocatedClaim(p *corev1.Pod, claim string) *corev1.Pod {
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("mig")}}
	p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To(claim)}}
	return p
}

// The builder keeps the bound pods with claims of a job, running or not,
// and serves the claims and slices as the DRA device source reads them:
// the source resolves a rank pod's allocation to the published MIG
// device.
func TestBuilderDRAPodsAndObjects(t *testing.T) {
	b := NewBuilder()
	slice := clustertest.MIGSlice("h100-1", clustertest.DRAMIGGPU{
		UUID: "GPU-0", Product: "NVIDIA H100 80GB HBM3", Driver: "580.126.20",
		MIG: []clustertest.DRAMIG{{UUID: "MIG-0", Profile: "3g.40gb", SMs: 60, MemoryMiB: 40448}, {UUID: "MIG-1", Profile: "3g.40gb", SMs: 60, MemoryMiB: 40448}},
	})
	full := clustertest.GPUSlice("h100-2", clustertest.DRAGPU{UUID: "GPU-2", Product: "NVIDIA H100 80GB HBM3", Driver: "580.126.20", MemoryGiB: 80})
	require.NoError(t, b.AddResourceSlice(slice))
	require.NoError(t, b.AddResourceSlice(full))
	job := kubeflowtest.MakePyTorchJob("llm", "ml").Master().Workers(1).Obj()
	j, err := kubeflow.FromObject(job)
	require.NoError(t, err)
	pods := clustertest.OperatorPods(j)
	require.Len(t, pods, 2)
	// Node marks a pod Running; bound pods wait in Pending for their
	// init containers.
	master := withAllocatedClaim(pods[0].Node("h100-1").Phase(corev1.PodPending).Obj(), "llm-master-0-gpu-a")
	worker := withAllocatedClaim(pods[1].Node("h100-1").Obj(), "llm-worker-0-gpu-b")
	other := withAllocatedClaim(clustertest.MakePod("notebook", "ml").Node("h100-1").Phase(corev1.PodPending).Obj(), "notebook-gpu-c")
	for _, p := range []*corev1.Pod{master, worker, other} {
		require.NoError(t, b.AddPod(p))
	}
	require.NoError(t, b.AddResourceClaim(allocatedClaim("ml", "llm-master-0-gpu-a", master.Name, "h100-1", "gpu-0-mig-3g40gb-0")))

	got := b.DRAPodsOf(j)
	require.Len(t, got, 2)
	require.Equal(t, []string{master.Name, worker.Name}, []string{got[0].Name, got[1].Name})
	require.Equal(t, "h100-1", got[0].Spec.NodeName)
	require.Equal(t, master.Labels, got[0].Labels)
	require.Equal(t, master.Status.ResourceClaimStatuses, got[0].Status.ResourceClaimStatuses)
	require.Empty(t, got[0].Spec.Containers, "trimmed")
	require.Len(t, b.BoundDRAPods(), 2, "the running worker is not listed as waiting")
	require.Equal(t, 1, b.RunningDRAPods())
	require.Same(t, got[0], b.BoundDRAPods()[0].Pod)
	// Another job's pods are not the job's, a pod added later is.
	other2 := withAllocatedClaim(clustertest.MakePod("llm-worker-1", "ml").OwnedBy("kubeflow.org/v1", "MPIJob", "llm", "Worker").Node("h100-1").Obj(), "x")
	require.NoError(t, b.AddPod(other2))
	late := withAllocatedClaim(clustertest.MakePod("llm-worker-9", "ml").OwnedBy("kubeflow.org/v1", "PyTorchJob", "llm", "Worker").Node("h100-1").Obj(), "y")
	require.NoError(t, b.AddPod(late))
	require.Len(t, b.DRAPodsOf(j), 3)
	require.Equal(t, late.Name, b.DRAPodsOf(j)[2].Name)

	objs := b.DRAObjects()
	require.Equal(t, []*resourcev1.ResourceSlice{slice}, objs.Pool(clustertest.NVIDIADRADriver, "h100-1"))
	require.Empty(t, objs.Pool("other.example.com", "h100-1"))
	require.Nil(t, objs.Claim("ml", "llm-worker-0-gpu-b"))
	// A slice added later is seen.
	more := clustertest.GPUSlice("h100-1", clustertest.DRAGPU{UUID: "GPU-9", Product: "NVIDIA H100 80GB HBM3", Driver: "580.126.20", MemoryGiB: 80})
	more.Name += "-full"
	require.NoError(t, b.AddResourceSlice(more))
	require.Len(t, objs.Pool(clustertest.NVIDIADRADriver, "h100-1"), 2)

	src := &dra.Source{Objects: objs}
	r, err := src.Rank(context.Background(), got[0], 0)
	require.NoError(t, err)
	require.True(t, r.Known, r.Waiting)
	require.Len(t, r.Report.Report.Devices, 1)
	d := r.Report.Report.Devices[0]
	require.Equal(t, "MIG-0", d.ID)
	require.Equal(t, "3g.40gb", d.Profile)
	require.Equal(t, 60, d.SMs)
	require.Equal(t, "gpu.nvidia.com/h100-1/gpu-0-mig-3g40gb-0", d.DRA)

	r, err = src.Rank(context.Background(), got[1], 1)
	require.NoError(t, err)
	require.False(t, r.Known)
	require.Equal(t, "ResourceClaim ml/llm-worker-0-gpu-b is not seen yet", r.Waiting)
}
