//go:build unix

package nvmlsource

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/nvmlsource/nvmltest"
)

// BenchmarkHealth8GPU is what the health checks add to one discovery of
// the 8-GPU H100 mock: the five health calls per GPU through the bounded
// caller, and their conversion into the model. ns/op and cpu-ns/op include
// the mock's answers (go-nvml's mock locks a mutex and records each call),
// so they bound rankgate's own cost from above; the budget is 1 ms.
func BenchmarkHealth8GPU(b *testing.B) {
	s := nvmltest.NewServer(b, nvmltest.DGXH100)
	s.SetRemap(3, true, false)
	s.SetFabric(6, nvml.GPU_FABRIC_STATE_IN_PROGRESS, nvml.SUCCESS)
	lib := s.Interface()
	devs := make([]nvml.Device, 8)
	for i := range devs {
		d, r := lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			b.Fatal(r)
		}
		devs[i] = d
	}
	src := New(lib)
	c := newCaller(context.Background(), time.Second, time.Second, nil, nil)
	gpus := make([]topology.GPU, 8)
	b.ReportAllocs()
	cpu0 := cpuNow()
	for b.Loop() {
		for i, d := range devs {
			gpus[i] = topology.GPU{Index: i}
			if err := src.discoverHealth(c, i, d, &gpus[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	if !*gpus[3].Health.RemapPending || gpus[6].Fabric.State != topology.FabricInProgress {
		b.Fatal("the faults did not come through")
	}
	b.ReportMetric(5*8, "nvml-calls/op")
	if cpu := cpuNow() - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
