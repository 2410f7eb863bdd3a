package nvmlsource_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/rankgate/rankgate/topology/nvmlsource"
	"github.com/rankgate/rankgate/topology/nvmlsource/nvmltest"
)

// BenchmarkDiscover56MIG discovers 8 GPUs split into 7 MIG devices each.
// ns/op and cpu-ns/op include the mock's own work (go-nvml's mocks lock a
// mutex and record every call); nvml-calls/op is the NVML call count.
func BenchmarkDiscover56MIG(b *testing.B) {
	for _, kind := range []string{nvmltest.DGXA100, nvmltest.DGXH100, nvmltest.DGXH200, nvmltest.DGXB200} {
		b.Run(kind, func(b *testing.B) {
			s := nvmltest.NewServer(b, kind)
			p := s.ProfileName(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
			for g := range 8 {
				s.CreateMIG(g, p, p, p, p, p, p, p)
			}
			var calls atomic.Int64
			src := nvmlsource.New(s.Interface(), nvmlsource.WithCallCounter(&calls))
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				inv, err := src.Inventory(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if n := len(inv.GPUs[7].MIGDevices); n != 7 {
					b.Fatalf("GPU 7 has %d MIG devices", n)
				}
			}
			b.ReportMetric(float64(calls.Load())/float64(b.N), "nvml-calls/op")
			if cpu := cpuTime() - cpu0; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
		})
	}
}
