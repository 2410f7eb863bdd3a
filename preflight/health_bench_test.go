package preflight

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/rankgate/rankgate/topology/nvmlsource/nvmltest"
)

// BenchmarkHealthRules8GPU is the health rank rules over all 8 GPUs of the
// H100 mock with a remap pending, a fabric still registering, persistence
// off and a throttled GPU: the rules' share of the 1 ms budget.
func BenchmarkHealthRules8GPU(b *testing.B) {
	s := nvmltest.NewServer(b, nvmltest.DGXH100)
	s.SetRemap(3, true, false)
	s.SetFabric(6, nvml.GPU_FABRIC_STATE_IN_PROGRESS, nvml.SUCCESS)
	s.SetPersistence(2, false)
	s.SetClocksEventReasons(1, nvml.ClocksThrottleReasonHwSlowdown)
	inv := mockInventory(b, s)
	gpus := distinctGPUPtrs(inv.AllDevices())
	b.ReportAllocs()
	for b.Loop() {
		if f := healthRules(gpus); len(f) != 4 {
			b.Fatalf("%d findings", len(f))
		}
	}
}
