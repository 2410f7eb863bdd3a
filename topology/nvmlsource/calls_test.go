package nvmlsource_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology/nvmlsource"
	"github.com/rankgate/rankgate/topology/nvmlsource/nvmltest"
)

// countCalls discovers once on a fresh server of gpus GPUs, with the first
// migGPUs of them split into perGPU 1-slice instances, and returns the NVML
// calls discovery made. It checks the source's count against the mock's.
func countCalls(t testing.TB, kind string, gpus, migGPUs, perGPU int) int64 {
	t.Helper()
	s := nvmltest.NewServer(t, kind, nvmltest.WithGPUCount(gpus))
	p := s.ProfileName(nvml.GPU_INSTANCE_PROFILE_1_SLICE) // 7 per GPU
	for g := range migGPUs {
		for range perGPU {
			s.CreateMIG(g, p)
		}
	}
	var n atomic.Int64
	before := s.Calls()
	inv, err := nvmlsource.New(s.Interface(), nvmlsource.WithCallCounter(&n)).Inventory(context.Background())
	require.NoError(t, err)
	require.Len(t, inv.GPUs, gpus)
	require.Equal(t, s.Calls()-before, n.Load(), "every counted call reached NVML, and only those")
	return n.Load()
}

// TestCallsAreLinear fits the call count on one to three GPUs and one MIG
// GPU, then checks that 8-GPU layouts cost exactly
//
//	k + a·GPUs + g·MIG-enabled GPUs + b·MIG devices + c·GPU pairs.
func TestCallsAreLinear(t *testing.T) {
	for kind, links := range map[string]int64{nvmltest.DGXA100: 12, nvmltest.DGXH100: 18} {
		t.Run(kind, func(t *testing.T) {
			c1 := countCalls(t, kind, 1, 0, 0)
			c2 := countCalls(t, kind, 2, 0, 0)
			c3 := countCalls(t, kind, 3, 0, 0)
			pair := (c3 - c2) - (c2 - c1)
			gpu := c2 - c1 - pair
			k := c1 - gpu
			m1 := countCalls(t, kind, 1, 1, 1)
			m7 := countCalls(t, kind, 1, 1, 7)
			require.Zero(t, (m7-m1)%6)
			mig := (m7 - m1) / 6
			migGPU := m1 - c1 - mig
			t.Logf("%s: calls = %d + %d·GPUs + %d·MIG GPUs + %d·MIG devices + %d·pairs", kind, k, gpu, migGPU, mig, pair)
			// The terms discover.go documents: Init, three versions,
			// count, Shutdown; ten reads and five health reads per GPU
			// (at most ten health reads: issue 14), each NVLink's state and
			// remote plus the state that ends the list; the max count,
			// seven slot probes and one profile probe per MIG GPU; four
			// reads per MIG device and two per GPU instance; common
			// ancestor, P2P read, write and NVLink per pair.
			require.Equal(t, int64(6), k)
			require.Equal(t, 10+5+2*links+1, gpu)
			require.Equal(t, int64(1+7+1), migGPU)
			require.Equal(t, int64(4+2), mig)
			require.Equal(t, int64(4), pair)

			predict := func(gpus, migGPUs, migs int64) int64 {
				return k + gpu*gpus + migGPU*migGPUs + mig*migs + pair*gpus*(gpus-1)/2
			}
			for _, l := range []struct{ gpus, migGPUs, perGPU int }{
				{8, 0, 0}, {8, 8, 7}, {8, 4, 7}, {8, 8, 1}, {5, 3, 4},
			} {
				got := countCalls(t, kind, l.gpus, l.migGPUs, l.perGPU)
				require.Equal(t, predict(int64(l.gpus), int64(l.migGPUs), int64(l.migGPUs*l.perGPU)), got, "%+v", l)
			}
		})
	}
}
