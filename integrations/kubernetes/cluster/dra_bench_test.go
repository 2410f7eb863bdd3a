package cluster

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

// draFleet is a builder with nodes of 8 H100s, each split into 7 1g.10gb
// MIG devices published as the NVIDIA DRA driver does, the DeviceClasses
// gpu.nvidia.com and mig.nvidia.com, and a claim template asking one
// 1g.10gb device.
func draFleet(t testing.TB, nodes int) *Builder {
	b := NewBuilder()
	for _, dc := range []struct{ name, typ string }{{"gpu.nvidia.com", "gpu"}, {"mig.nvidia.com", "mig"}} {
		require.NoError(t, b.AddDeviceClass(&resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: dc.name},
			Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
				Expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == '" + dc.typ + "'"}}}}}))
	}
	str := func(s string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{StringValue: ptr.To(s)} }
	for n := 0; n < nodes; n++ {
		name := fmt.Sprintf("dgx-%04d", n)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{"cpu": resource.MustParse("96"), "memory": resource.MustParse("1Ti"), "pods": resource.MustParse("110")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		require.NoError(t, b.AddNode(node))
		s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-gpu.nvidia.com"}, Spec: resourcev1.ResourceSliceSpec{
			Driver: "gpu.nvidia.com", NodeName: ptr.To(name), Pool: resourcev1.ResourcePool{Name: name, ResourceSliceCount: 1}}}
		for g := 0; g < 8; g++ {
			parent := fmt.Sprintf("GPU-%04d-%d", n, g)
			for m := 0; m < 7; m++ {
				s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-%d-mig-1g.10gb-%d", g, m),
					Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
						"type": str("mig"), "profile": str("1g.10gb"), "parentUUID": str(parent), "productName": str("NVIDIA H100 80GB HBM3"),
						"uuid": str(fmt.Sprintf("MIG-%04d-%d-%d", n, g, m))},
					Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
						"memory": {Value: resource.MustParse("9984Mi")}, "multiprocessors": {Value: resource.MustParse("16")}}})
			}
		}
		require.NoError(t, b.AddResourceSlice(s))
	}
	require.NoError(t, b.AddResourceClaimTemplate(&resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "mig", Namespace: "ml"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "mig", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "mig.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}}},
		}}}}}}))
	return b
}

// Judging one 64-rank job whose ranks each claim a 1g.10gb MIG device,
// on a fleet of nodes x 8 GPUs x 7 published MIG devices.
func BenchmarkDRAJudge64Ranks(b *testing.B) {
	for _, nodes := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			bl := draFleet(b, nodes)
			job := kubeflowtest.MakePyTorchJob("llm", "ml").Workers(64).PodSpec(func(s *corev1.PodSpec) {
				s.ResourceClaims = []corev1.PodResourceClaim{{Name: "mig", ResourceClaimTemplateName: ptr.To("mig")}}
			}).Obj()
			require.NoError(b, addJob(bl, job))
			e := schedule.New()
			c := e.NewCluster(bl.Nodes())
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				bl.draJ = nil // a new snapshot each time
				ws, err := bl.Workloads()
				require.NoError(b, err)
				res := e.Diagnose(c, ws[0])
				if res.Rule != verdict.RuleSchedulable {
					b.Fatalf("rule %s: %s", res.Rule, res.Report.Reason(0))
				}
			}
		})
	}
}
