package webhook

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/topology"
)

// What the init container holds: the devices of the rank's trainer
// container, so that NVML shows it what the trainer gets.

// asksDevices: r (rankResources) holds GPUs, MIG devices or resource
// claims.
func asksDevices(r corev1.ResourceRequirements) bool {
	return len(r.Limits) > 0 || len(r.Claims) > 0
}

// rankResources: what the init container of a rank pod holds so that it
// sees the trainer's devices. The trainer is the container that asks for
// the most GPU and MIG resources (limits and requests as it declares
// them), with every pod resource claim it uses (an init container may use
// the pod's claims; the devices are prepared once for the pod). A pod
// whose containers ask no GPU resource is a rank when a container uses a
// claim gpuClaim says is served by NVIDIA's GPU driver: that container
// (the one using the most such claims) is the trainer, and the init
// container uses all its claims. gpuClaim nil: no claim is a GPU's.
func rankResources(spec *corev1.PodSpec, gpuClaim func(corev1.PodResourceClaim) bool) corev1.ResourceRequirements {
	cs := spec.Containers
	r, trainer := gpuResources(cs)
	if trainer < 0 && gpuClaim != nil {
		gpu := map[string]bool{}
		for _, pc := range spec.ResourceClaims {
			gpu[pc.Name] = gpuClaim(pc)
		}
		most := 0
		for i := range cs {
			n := 0
			for _, c := range cs[i].Resources.Claims {
				if gpu[c.Name] {
					n++
				}
			}
			if n > most {
				trainer, most = i, n
			}
		}
	}
	if trainer >= 0 && len(cs[trainer].Resources.Claims) > 0 {
		r.Claims = slices.Clone(cs[trainer].Resources.Claims)
	}
	return r
}

// rankResources of a pod spec in namespace ns, with the claims
// Options.GPUClaim says are GPUs'.
func (m *Mutator) rankResources(ns string, spec *corev1.PodSpec) corev1.ResourceRequirements {
	var gpuClaim func(corev1.PodResourceClaim) bool
	if m.o.GPUClaim != nil {
		gpuClaim = func(pc corev1.PodResourceClaim) bool { return m.o.GPUClaim(ns, pc) }
	}
	return rankResources(spec, gpuClaim)
}

// gpuCount: the GPU and MIG devices c asks for, limits (or requests
// without a limit).
func gpuCount(c *corev1.Container) int64 {
	var n int64
	for name, q := range c.Resources.Limits {
		if topology.IsGPUResource(string(name)) {
			n += q.Value()
		}
	}
	for name, q := range c.Resources.Requests {
		if _, ok := c.Resources.Limits[name]; !ok && topology.IsGPUResource(string(name)) {
			n += q.Value()
		}
	}
	return n
}

// gpuResources: the GPU and MIG resources of the container that asks for
// the most of them, and its index (-1: none asks any).
func gpuResources(cs []corev1.Container) (corev1.ResourceRequirements, int) {
	best, bestN := -1, int64(0)
	for i := range cs {
		if n := gpuCount(&cs[i]); n > bestN {
			best, bestN = i, n
		}
	}
	if best < 0 {
		return corev1.ResourceRequirements{}, -1
	}
	var r corev1.ResourceRequirements
	pick := func(from corev1.ResourceList) corev1.ResourceList {
		var out corev1.ResourceList
		for name, q := range from {
			if topology.IsGPUResource(string(name)) {
				if out == nil {
					out = corev1.ResourceList{}
				}
				out[name] = q
			}
		}
		return out
	}
	r.Limits, r.Requests = pick(cs[best].Resources.Limits), pick(cs[best].Resources.Requests)
	// Extended resources must have limits; a request alone is refused by
	// the API server, so the trainer has them.
	if r.Limits == nil {
		r.Limits, r.Requests = r.Requests, nil
	}
	return r, best
}

// expectProfile: the MIG profile every rank must get, when the template
// asks for one MIG resource; nothing for nvidia.com/gpu, which under the
// single MIG strategy may be a MIG instance.
func expectProfile(r corev1.ResourceRequirements) string {
	var profile string
	for name := range r.Limits {
		if p, ok := strings.CutPrefix(string(name), topology.ResourceMIGPrefix); ok {
			if profile != "" {
				return ""
			}
			profile = p
		}
	}
	return profile
}
