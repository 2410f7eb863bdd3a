package topology

import "testing"

func TestIsGPUResource(t *testing.T) {
	for name, want := range map[string]bool{
		"nvidia.com/gpu":            true,
		"nvidia.com/gpu.shared":     true,
		"nvidia.com/mig-1g.10gb":    true,
		"nvidia.com/mig-1g.10gb.me": true,
		"nvidia.com/mig-3g.40gb":    true,
		"nvidia.com/mig-":           false, // no profile
		"nvidia.com/gpuX":           false,
		"nvidia.com/gpus":           false,
		"nvidia.com/hostdev":        false,
		"amd.com/gpu":               false,
		"gpu":                       false,
		"cpu":                       false,
		"memory":                    false,
		"":                          false,
	} {
		if got := IsGPUResource(name); got != want {
			t.Errorf("IsGPUResource(%q) = %v, want %v", name, got, want)
		}
	}
}
