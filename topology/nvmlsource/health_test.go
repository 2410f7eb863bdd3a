package nvmlsource_test

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/nvmlsource/nvmltest"
	"github.com/rankgate/rankgate/verdict"
)

func TestHealthHealthyNode(t *testing.T) {
	for _, kind := range []string{nvmltest.DGXA100, nvmltest.DGXH100} {
		t.Run(kind, func(t *testing.T) {
			inv := mustDiscover(t, nvmltest.NewServer(t, kind))
			for _, g := range inv.GPUs {
				h := g.Health
				require.NotNil(t, h, "GPU %d", g.Index)
				require.False(t, *h.RemapPending)
				require.False(t, *h.RemapFailure)
				require.Zero(t, *h.VolatileUncorrectedECC)
				require.Nil(t, h.RetiredPagesPending, "row-remapping GPUs do not retire pages")
				require.Empty(t, h.Throttle, "idle is no slowdown")
				require.False(t, h.Lost)
				require.True(t, *g.Persistence)
				if kind == nvmltest.DGXA100 {
					require.Nil(t, g.Fabric, "the A100 driver reports no fabric")
					require.Equal(t, []string{topology.QueryRetiredPages, topology.QueryFabric}, h.Unsupported)
					continue
				}
				require.Equal(t, []string{topology.QueryRetiredPages}, h.Unsupported)
				require.Equal(t, topology.FabricCompleted, g.Fabric.State)
				require.Equal(t, topology.FabricStatusSuccess, g.Fabric.Status)
				require.Empty(t, g.Fabric.ClusterUUID, "a single-node NVSwitch system has no cluster")
				require.False(t, g.Fabric.Failed())
			}
		})
	}
}

func TestHealthFaults(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXH100)
	s.SetRemap(3, true, false)
	s.SetRemap(4, false, true)
	s.SetVolatileUncorrectedECC(5, 2)
	s.SetFabric(6, nvml.GPU_FABRIC_STATE_IN_PROGRESS, nvml.SUCCESS)
	s.SetFabric(7, nvml.GPU_FABRIC_STATE_COMPLETED, nvml.ERROR_UNKNOWN)
	s.SetClocksEventReasons(1, nvml.ClocksEventReasonGpuIdle|nvml.ClocksThrottleReasonHwPowerBrakeSlowdown|nvml.ClocksThrottleReasonHwSlowdown)
	s.SetPersistence(2, false)
	s.SetRetiredPagesPending(0, true)
	inv := mustDiscover(t, s)
	g := func(i int) topology.GPU { return inv.GPUs[i] }
	require.True(t, *g(3).Health.RemapPending)
	require.False(t, *g(3).Health.RemapFailure)
	require.True(t, *g(4).Health.RemapFailure)
	require.Equal(t, uint64(2), *g(5).Health.VolatileUncorrectedECC)
	require.Equal(t, topology.FabricInProgress, g(6).Fabric.State)
	require.Empty(t, g(6).Fabric.Status, "no status before registration completes")
	require.True(t, g(7).Fabric.Failed())
	require.Equal(t, nvml.ERROR_UNKNOWN.Error(), g(7).Fabric.Status)
	require.Equal(t, []string{topology.ThrottleHWSlowdown, topology.ThrottleHWPowerBrake}, g(1).Health.Throttle)
	require.False(t, *g(2).Persistence)
	require.True(t, *g(0).Health.RetiredPagesPending)
	require.False(t, *g(1).Health.RetiredPagesPending)
}

// A GPU whose driver answers "no fabric" (H100 PCIe and the like) is on
// no NVSwitch fabric; one whose driver cannot be asked stays unknown.
func TestHealthFabricNotSupported(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXH100)
	s.SetFabric(0, nvml.GPU_FABRIC_STATE_NOT_SUPPORTED, nvml.SUCCESS)
	s.FaultGPU("GetGpuFabricInfo", 1, nvml.ERROR_NOT_SUPPORTED)
	inv := mustDiscover(t, s)
	require.Equal(t, &topology.Fabric{State: topology.FabricNotSupported}, inv.GPUs[0].Fabric)
	require.False(t, inv.GPUs[0].Fabric.Supported())
	require.Nil(t, inv.GPUs[1].Fabric)
}

func TestHealthMultiNodeCliques(t *testing.T) {
	const cluster = "5f1c9a2e-7b1d-4e0a-9c3f-2a6b8d4e1f00"
	a := mustDiscover(t, nvmltest.NewServer(t, nvmltest.DGXB200, nvmltest.WithFabricCluster(cluster, 1)))
	b := mustDiscover(t, nvmltest.NewServer(t, nvmltest.DGXB200, nvmltest.WithFabricCluster(cluster, 2)))
	for _, g := range a.GPUs {
		require.True(t, g.Fabric.MultiNode())
		require.Equal(t, cluster, g.Fabric.ClusterUUID)
		require.Equal(t, uint32(1), *g.Fabric.CliqueID)
	}
	require.Equal(t, uint32(2), *b.GPUs[0].Fabric.CliqueID)
}

// A query the GPU cannot answer is "not supported", never a failure; a
// lost GPU or one that needs a reset is that GPU's health, not the end
// of discovery.
func TestHealthAnswers(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXH100)
	for _, m := range []string{"GetRemappedRows", "GetTotalEccErrors", "GetRetiredPagesPendingStatus", "GetGpuFabricInfo", "GetCurrentClocksEventReasons"} {
		s.FaultGPU(m, 0, nvml.ERROR_NOT_SUPPORTED)
		s.FaultGPU(m, 1, nvml.ERROR_FUNCTION_NOT_FOUND)
	}
	s.FaultGPU("GetRemappedRows", 2, nvml.ERROR_GPU_IS_LOST)
	s.FaultGPU("GetTotalEccErrors", 3, nvml.ERROR_RESET_REQUIRED)
	s.FaultGPU("GetGpuFabricInfo", 4, nvml.ERROR_NO_PERMISSION)
	inv := mustDiscover(t, s)
	all := []string{topology.QueryRemappedRows, topology.QueryVolatileECC, topology.QueryRetiredPages, topology.QueryFabric, topology.QueryClocks}
	for _, i := range []int{0, 1} {
		h := inv.GPUs[i].Health
		require.Equal(t, all, h.Unsupported)
		require.Nil(t, h.RemapPending)
		require.Nil(t, inv.GPUs[i].Fabric)
	}
	require.True(t, inv.GPUs[2].Health.Lost)
	require.True(t, *inv.GPUs[3].Health.ResetRequired)
	require.Nil(t, inv.GPUs[4].Fabric, "no permission: unknown")

	s.ClearFaults()
	s.FaultGPU("GetGpuFabricInfo", 5, nvml.ERROR_UNKNOWN)
	_, err := discover(t, s)
	de := discoveryError(t, err)
	require.Equal(t, verdict.ClassUnknown, de.Class)
	require.Contains(t, de.Op, "nvmlDeviceGetGpuFabricInfo(GPU 5)")
}
