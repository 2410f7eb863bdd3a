package topology

import "strings"

// Kubernetes extended resources of the NVIDIA device plugin. Every part of
// rankgate that asks "is this a GPU?" of a resource name (the schedule
// engine, the controller, the kubelet PodResources client) uses
// IsGPUResource, so they cannot disagree.
const (
	// ResourceGPU is a full GPU, or under the single MIG strategy a MIG
	// instance.
	ResourceGPU = "nvidia.com/gpu"
	// ResourceMIGPrefix + a profile ("1g.10gb") is a MIG instance under the
	// mixed strategy.
	ResourceMIGPrefix = "nvidia.com/mig-"
	// resourceGPUVariant + a suffix is a renamed full GPU: time-slicing or
	// MPS sharing with renameByDefault ("nvidia.com/gpu.shared").
	resourceGPUVariant = ResourceGPU + "."
)

// IsGPUResource reports whether a resource name is one the NVIDIA device
// plugin advertises: nvidia.com/gpu, its shared variants
// (nvidia.com/gpu.shared), and nvidia.com/mig-<profile> (with its variants,
// such as nvidia.com/mig-1g.10gb.me). Other vendors' resources are not.
func IsGPUResource(name string) bool {
	return name == ResourceGPU || strings.HasPrefix(name, resourceGPUVariant) ||
		(strings.HasPrefix(name, ResourceMIGPrefix) && len(name) > len(ResourceMIGPrefix))
}
