package smi

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology"
)

func TestHealthFromRealOutputs(t *testing.T) {
	t.Run("05 -q H100: fabric registered, no errors", func(t *testing.T) {
		inv := importOK(t, load(t, sharedDir, "05_smi-q_h100-80gb-hbm3_mig-enabled_590.48.01.txt"))
		g := inv.GPUs[0]
		require.True(t, *g.Persistence)
		require.Equal(t, &topology.Fabric{State: topology.FabricCompleted, Status: topology.FabricStatusSuccess, CliqueID: ptr(uint32(0))}, g.Fabric)
		require.False(t, g.Fabric.MultiNode(), "an all-zero cluster UUID is no cluster")
		require.Zero(t, *g.Health.VolatileUncorrectedECC)
		require.Nil(t, g.Health.RemapPending, "Remapped Rows: N/A")
		require.Nil(t, g.Health.RetiredPagesPending)
		require.Empty(t, g.Health.Throttle, "Idle is active, nothing judged is")
	})
	t.Run("32 -q -x A100: persistence off, N/A counters", func(t *testing.T) {
		inv := importOK(t, load(t, sharedDir, "32_smi-q-x_a100-sxm4-40gb_mig-2x3g.20gb_510.47.03_netdata.xml"))
		g := inv.GPUs[0]
		require.False(t, *g.Persistence)
		require.Nil(t, g.Fabric)
		require.Nil(t, g.Health, "every health field of this output is N/A or Not Active")
	})
	t.Run("-q excerpt A100: remap pending", func(t *testing.T) {
		inv := importOK(t, load(t, "testdata", "q_a100-sxm4-80gb_remap-pending_510.73.08_excerpt.txt"))
		g := inv.GPUs[0]
		require.Equal(t, "NVIDIA A100-SXM4-80GB", g.Name)
		require.True(t, *g.Health.RemapPending)
		require.False(t, *g.Health.RemapFailure)
		require.Zero(t, *g.Health.VolatileUncorrectedECC, "177 correctable errors, no uncorrectable one")
	})
	t.Run("-q fragment H100: fabric in progress", func(t *testing.T) {
		inv := importOK(t, load(t, "testdata", "q_h100-80gb-hbm3_fabric-in-progress_570.133.20_fragment.txt"))
		g := inv.GPUs[0]
		require.Equal(t, &topology.Fabric{State: topology.FabricInProgress}, g.Fabric)
		require.False(t, *g.Persistence)
	})
	t.Run("-q -x variant: remap, ECC, reset, throttle, fabric failure", func(t *testing.T) {
		inv := importOK(t, load(t, "testdata", "qx_a100-sxm4-40gb_remap-ecc-throttle-fabric_variant-of-32.xml"))
		g := inv.GPUs[0]
		h := g.Health
		require.True(t, *h.RemapPending)
		require.True(t, *h.RemapFailure)
		require.Equal(t, uint64(2), *h.VolatileUncorrectedECC)
		require.True(t, *h.ResetRequired)
		require.Equal(t, []string{topology.ThrottleHWSlowdown, topology.ThrottleHWPowerBrake}, h.Throttle)
		require.True(t, g.Fabric.Failed())
		require.Equal(t, "Failure", g.Fabric.Status)
	})
}

func TestHealthQueryVariants(t *testing.T) {
	const q = `==============NVSMI LOG==============
GPU 00000000:07:00.0
    Product Name                          : Tesla V100-SXM2-32GB
    ECC Errors
        Volatile
            Single Bit
                Total                     : 4
            Double Bit
                Total                     : 1
    Retired pages
        Single Bit ECC                    : 2
        Double Bit ECC                    : 0
        Pending Page Blacklist            : Yes
    Clocks Throttle Reasons
        Idle                              : Not Active
        HW Slowdown                       : Active
            HW Thermal Slowdown           : Active
            HW Power Brake Slowdown       : Not Active
        SW Thermal Slowdown               : Active
    Fabric
        State                             : Completed
        Status                            : Success
        CliqueId                          : 7
        ClusterUUID                       : 5F1C9A2E-7B1D-4E0A-9C3F-2A6B8D4E1F00
`
	inv := importOK(t, Input{Name: "q.txt", Data: []byte(q)})
	g := inv.GPUs[0]
	require.Equal(t, uint64(1), *g.Health.VolatileUncorrectedECC, "old drivers: Volatile/Double Bit/Total")
	require.True(t, *g.Health.RetiredPagesPending)
	require.Equal(t, []string{topology.ThrottleHWSlowdown, topology.ThrottleHWThermalSlowdown, topology.ThrottleSWThermalSlowdown}, g.Health.Throttle)
	require.Equal(t, "5f1c9a2e-7b1d-4e0a-9c3f-2a6b8d4e1f00", g.Fabric.ClusterUUID)
	require.Equal(t, uint32(7), *g.Fabric.CliqueID)

	bad := strings.Replace(q, "Pending Page Blacklist            : Yes", "Pending Page Blacklist            : Maybe", 1)
	_, err := Import([]Input{{Name: "q.txt", Data: []byte(bad)}}, nil)
	require.ErrorContains(t, err, `"Maybe" is not Yes, No or N/A`)
}

func ptr[T any](v T) *T { return &v }
