package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
)

// The DRA load of TestBenchControllerMemory (RANKGATE_BENCH_DRA=1): every
// node publishes a ResourceSlice of its 8 H100s split into seven 1g.10gb
// MIG devices each (56 devices), with the attributes and capacities
// NVIDIA's DRA driver v0.4.1 publishes (cluster/testdata/dra/02); and
// every bound pod of the run holds one of them through an allocated
// ResourceClaim (RANKGATE_BENCH_DRA_CLAIMS, default 20,000). The issue's
// target: 1,000 nodes (RANKGATE_BENCH_NODES=1000), 56,000 devices,
// 20,000 pods, controller RSS <= 200 MB.
//
//	RANKGATE_BENCH=1 RANKGATE_BENCH_DRA=1 RANKGATE_BENCH_NODES=1000 go test -run TestBenchControllerMemory -v -timeout 60m ./integrations/kubernetes/e2e/

const benchMIGPerGPU, benchGPUsPerNode = 7, 8

// benchSlice is node i's slice.
func benchSlice(i int) *resourcev1.ResourceSlice {
	node := fmt.Sprintf("gpu-node-%04d", i)
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu.nvidia.com-7xk2p",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: "4b8e2d6c-0f1a-4c3e-9b7d-2a5f8e1c6d90"}}},
		Spec: resourcev1.ResourceSliceSpec{Driver: clustertest.NVIDIADRADriver, NodeName: ptr.To(node),
			Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}},
	}
	str := func(v string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{StringValue: ptr.To(v)} }
	ver := func(v string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{VersionValue: ptr.To(v)} }
	capa := func(v string) resourcev1.DeviceCapacity {
		return resourcev1.DeviceCapacity{Value: resource.MustParse(v)}
	}
	for g := 0; g < benchGPUsPerNode; g++ {
		parent := fmt.Sprintf("GPU-%08x-2d7f-3a58-9c41-%012x", i, g)
		for m := 0; m < benchMIGPerGPU; m++ {
			s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{
				Name: benchDevice(g, m),
				Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
					"architecture": str("Hopper"), "brand": str("Nvidia"), "cudaComputeCapability": ver("9.0.0"),
					"cudaDriverVersion": ver("13.0.0"), "driverVersion": ver("580.126.20"), "productName": str("NVIDIA H100 80GB HBM3"),
					"parentUUID": str(parent), "profile": str("1g.10gb"), "type": str("mig"),
					"uuid": str(fmt.Sprintf("MIG-%08x-7b2f-5c3e-%04x-%012x", i, g, m)),
				},
				Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
					"copyEngines": capa("1"), "decoders": capa("1"), "encoders": capa("0"), "jpegEngines": capa("1"),
					"memory": capa("9984Mi"), "multiprocessors": capa("16"), "ofaEngines": capa("0"),
				},
			})
		}
	}
	return s
}

func benchDevice(gpu, mig int) string { return fmt.Sprintf("gpu-%d-mig-1g10gb-19-%d", gpu, mig) }

// createBenchDRA publishes the slices of nodes nodes and the driver's
// DeviceClasses, and claims allocated claims in ns, each holding one MIG
// device and reserved for a pod named as the run's bound pods are.
func createBenchDRA(t *testing.T, ns string, nodes, claims int) {
	t.Helper()
	ctx := context.Background()
	begin := time.Now()
	mig := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "mig.nvidia.com"}, Spec: resourcev1.DeviceClassSpec{
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"}}}}}
	draObjects(t, clustertest.DeviceClass("gpu.nvidia.com", ""), mig)
	require.NoError(t, parallel(nodes, 32, func(i int) error { return k8s.Create(ctx, benchSlice(i)) }))
	t.Logf("%d ResourceSlices (%d devices) in %s", nodes, nodes*benchGPUsPerNode*benchMIGPerGPU, time.Since(begin).Round(time.Second))
	perNode := benchGPUsPerNode * benchMIGPerGPU
	require.NoError(t, parallel(claims, 32, func(k int) error {
		node, dev := (k/perNode)%nodes, k%perNode
		pod := fmt.Sprintf("llm-%04d-worker-%d", k/8, k%8)
		c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: pod + "-gpu-x7k2q", Namespace: ns,
			Annotations: map[string]string{"resource.kubernetes.io/pod-claim-name": "gpu"}},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu",
				Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "mig.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
					Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}}}}}}}}
		if err := k8s.Create(ctx, c); err != nil {
			return err
		}
		nodeName := fmt.Sprintf("gpu-node-%04d", node)
		c.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: clustertest.NVIDIADRADriver, Pool: nodeName, Device: benchDevice(dev/benchMIGPerGPU, dev%benchMIGPerGPU)}}},
			AllocationTimestamp: ptr.To(metav1.Now())}
		c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pod, UID: "0d3c5b9e-6f2a-4e81-b7c4-91a2d8e3f5a6"}}
		return k8s.Status().Update(ctx, c)
	}))
	t.Logf("%d allocated ResourceClaims in %s", claims, time.Since(begin).Round(time.Second))
}
