package topology

import (
	"context"
	"os"

	"github.com/rankgate/rankgate/verdict"
)

// AllocationQuery says where to look for a rank's devices, in this order:
// Devices (the --devices flag), the environment (NVIDIA_VISIBLE_DEVICES,
// then CUDA_VISIBLE_DEVICES), then, in a pod (POD_NAME and POD_NAMESPACE
// set) whose kubelet socket exists, the kubelet's PodResources API; else
// every device of the node.
type AllocationQuery struct {
	Devices string
	// Env and ListDir default to the process's environment and file
	// system.
	Env     Env
	ListDir func(dir string) ([]string, error)
	// KubeletSocket and Kubelet: the PodResources API. A nil Kubelet is
	// never asked (launch --no-preflight: nothing slow on its start-up).
	KubeletSocket string
	Kubelet       func(ctx context.Context, namespace, pod string) ([]string, error)
}

// ResolveAllocation finds the rank's devices (preflight, init and launch).
// A malformed list is exit 2; a kubelet that cannot answer exit 3.
func ResolveAllocation(ctx context.Context, q AllocationQuery) (Allocation, error) {
	if q.Env == nil {
		q.Env = os.LookupEnv
	}
	if q.ListDir == nil {
		q.ListDir = listDir
	}
	if q.Devices != "" {
		refs, err := ParseDeviceList(q.Devices)
		if err != nil {
			return Allocation{}, verdict.Exitf(verdict.ExitUsage, "--devices: %v", err)
		}
		return Allocation{From: "--devices", Refs: refs}, nil
	}
	alloc, ok, err := AllocationFromEnv(q.Env, q.ListDir)
	if err != nil {
		return alloc, verdict.Exitf(verdict.ExitUsage, "%v", err)
	}
	if ok {
		return alloc, nil
	}
	pod, _ := q.Env("POD_NAME")
	ns, _ := q.Env("POD_NAMESPACE")
	if q.Kubelet != nil && pod != "" && ns != "" && q.KubeletSocket != "" {
		if _, err := os.Stat(q.KubeletSocket); err == nil {
			refs, err := q.Kubelet(ctx, ns, pod)
			if err != nil {
				return alloc, verdict.Exitf(verdict.ExitEnvironment, "kubelet PodResources API at %s: %v", q.KubeletSocket, err)
			}
			return Allocation{From: "podresources", Refs: refs}, nil
		}
	}
	return Allocation{From: FromDefault, All: true}, nil
}

func listDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, nil
}
