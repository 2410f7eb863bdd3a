package clustertest

import (
	"fmt"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1)
// publishes its full GPUs under this driver name, one pool per node.
const NVIDIADRADriver = "gpu.nvidia.com"

// DeviceClass is the driver's class of full GPUs, named like the driver.
// With extendedResource set (KEP-5004), pods asking for that extended
// resource (nvidia.com/gpu) get the class's devices through DRA.
func DeviceClass(name, extendedResource string) *resourcev1.DeviceClass {
	dc := &resourcev1.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == '%s' && device.attributes['%s'].type == 'gpu'", NVIDIADRADriver, NVIDIADRADriver),
		}}}},
	}
	if extendedResource != "" {
		dc.Spec.ExtendedResourceName = ptr.To(extendedResource)
	}
	return dc
}

// DRAGPU is one full GPU as the driver publishes it.
type DRAGPU struct {
	UUID, Product, Driver string
	MemoryGiB             int
}

// GPUSlice is the ResourceSlice the driver publishes for a node's full
// GPUs (devices gpu-0, gpu-1, ...): attributes type, uuid, productName,
// driverVersion, capacity memory.
func GPUSlice(node string, gpus ...DRAGPU) *resourcev1.ResourceSlice {
	s := nodeSlice(node, "-0")
	for i, g := range gpus {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"type":          {StringValue: ptr.To("gpu")},
				"uuid":          {StringValue: ptr.To(g.UUID)},
				"productName":   {StringValue: ptr.To(g.Product)},
				"driverVersion": {VersionValue: ptr.To(g.Driver)},
			},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
				"memory": {Value: resource.MustParse(fmt.Sprintf("%dGi", g.MemoryGiB))},
			},
		})
	}
	return s
}

// MIGClass is the driver's class of MIG devices, mig.nvidia.com, as its
// Helm chart installs it.
func MIGClass() *resourcev1.DeviceClass {
	return &resourcev1.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: "mig.nvidia.com"},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == '%s' && device.attributes['%s'].type == 'mig'", NVIDIADRADriver, NVIDIADRADriver),
		}}}},
	}
}

// DRAMIG is one static MIG device as the driver publishes it.
type DRAMIG struct {
	UUID, Profile string
	SMs           int
	MemoryMiB     int
}

// DRAMIGGPU is a GPU in MIG mode with its MIG devices.
type DRAMIGGPU struct {
	UUID, Product, Driver string
	MIG                   []DRAMIG
}

// MIGSlice is the ResourceSlice the driver publishes for a node whose GPUs
// are split into static MIG devices (gpu-<n>-mig-<profile>-<k>):
// attributes type mig, uuid, parentUUID, productName, profile,
// driverVersion, cudaComputeCapability; capacities memory and
// multiprocessors. A GPU in MIG mode is not published whole.
func MIGSlice(node string, gpus ...DRAMIGGPU) *resourcev1.ResourceSlice {
	s := nodeSlice(node, "-mig")
	for i, g := range gpus {
		for k, m := range g.MIG {
			s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{
				Name: fmt.Sprintf("gpu-%d-mig-%s-%d", i, strings.ReplaceAll(m.Profile, ".", ""), k),
				Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
					"type":                  {StringValue: ptr.To("mig")},
					"uuid":                  {StringValue: ptr.To(m.UUID)},
					"parentUUID":            {StringValue: ptr.To(g.UUID)},
					"productName":           {StringValue: ptr.To(g.Product)},
					"profile":               {StringValue: ptr.To(m.Profile)},
					"driverVersion":         {VersionValue: ptr.To(g.Driver)},
					"cudaComputeCapability": {VersionValue: ptr.To("9.0.0")},
				},
				Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
					"memory":          {Value: resource.MustParse(fmt.Sprintf("%dMi", m.MemoryMiB))},
					"multiprocessors": {Value: *resource.NewQuantity(int64(m.SMs), resource.DecimalSI)},
				},
			})
		}
	}
	return s
}

// nodeSlice is the driver's one slice of node's pool, without devices,
// named <node>-gpu.nvidia.com<suffix>.
func nodeSlice(node, suffix string) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceSlice"},
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + NVIDIADRADriver + suffix},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   NVIDIADRADriver,
			Pool:     resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1},
			NodeName: ptr.To(node),
		},
	}
}
