package preflight

import (
	"context"
	"os"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/nvmlsource"
	"github.com/rankgate/rankgate/topology/nvmlsource/nvmltest"
	"github.com/rankgate/rankgate/topology/smi"
	"github.com/rankgate/rankgate/verdict"
)

func mockInventory(t testing.TB, s *nvmltest.Server) *topology.Inventory {
	t.Helper()
	inv, err := nvmlsource.New(s.Interface()).Inventory(context.Background())
	require.NoError(t, err)
	return inv
}

func rankOn(inv *topology.Inventory, refs ...string) verdict.Report {
	alloc := topology.Allocation{All: true}
	if len(refs) > 0 {
		alloc = topology.Allocation{From: "test", Refs: refs}
	}
	return RankRules(RankInput{Inventory: inv, Allocation: alloc, Catalog: topology.DefaultCatalog(), Drivers: DefaultDriverTable()})
}

// A healthy mock node passes with no finding at all: the health rules add
// nothing where nothing is wrong.
func TestHealthyMockNodeHasNoFinding(t *testing.T) {
	for _, kind := range []string{nvmltest.DGXA100, nvmltest.DGXH100, nvmltest.DGXB200} {
		t.Run(kind, func(t *testing.T) {
			r := rankOn(mockInventory(t, nvmltest.NewServer(t, kind)))
			require.Equal(t, verdict.VerdictPass, r.Verdict)
			require.Empty(t, r.Findings)
		})
	}
	t.Run("multi-node cluster", func(t *testing.T) {
		inv := mockInventory(t, nvmltest.NewServer(t, nvmltest.DGXB200, nvmltest.WithFabricCluster("5f1c9a2e-7b1d-4e0a-9c3f-2a6b8d4e1f00", 3)))
		r := rankOn(inv, "0", "1")
		require.Empty(t, r.Findings)
		require.Equal(t, "5f1c9a2e-7b1d-4e0a-9c3f-2a6b8d4e1f00", r.Devices[0].FabricCluster)
		require.Equal(t, uint32(3), *r.Devices[1].FabricClique)
	})
}

func TestHealthRulesOnMock(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXH100)
	s.SetRemap(3, true, false)
	s.SetRemap(4, false, true)
	s.SetVolatileUncorrectedECC(5, 3)
	s.SetFabric(6, nvml.GPU_FABRIC_STATE_IN_PROGRESS, nvml.SUCCESS)
	s.SetFabric(7, nvml.GPU_FABRIC_STATE_COMPLETED, nvml.ERROR_UNKNOWN)
	s.SetClocksEventReasons(1, nvml.ClocksThrottleReasonHwThermalSlowdown)
	s.SetPersistence(2, false)
	s.SetRetiredPagesPending(0, true)
	inv := mockInventory(t, s)
	for _, tc := range []struct {
		gpu  string
		want []string
	}{
		{"0", []string{"GPU_RETIRED_PAGES_PENDING/fail"}},
		{"1", []string{"CLOCKS_THROTTLED/warn"}},
		{"2", []string{"PERSISTENCE_OFF/warn"}},
		{"3", []string{"GPU_REMAP_PENDING/fail"}},
		{"4", []string{"GPU_REMAP_FAILED/fail"}},
		{"5", []string{"GPU_ECC_UNCORRECTED/fail"}},
		{"6", []string{"NVLINK_FABRIC_NOT_READY/fail"}},
		{"7", []string{"NVLINK_FABRIC_FAILED/fail"}},
	} {
		t.Run("GPU "+tc.gpu, func(t *testing.T) {
			r := rankOn(inv, tc.gpu)
			require.Equal(t, tc.want, ruleSev(r))
			require.NotEmpty(t, r.Findings[0].Remediation)
			require.Len(t, r.Findings[0].Devices, 1)
		})
	}
	r := rankOn(inv, "6")
	require.Contains(t, r.Findings[0].Message, "in progress")
	require.Contains(t, r.Findings[0].Message, "error 802")
	require.Contains(t, r.Findings[0].Remediation, "nvidia-fabricmanager")
	require.Contains(t, rankOn(inv, "2").Findings[0].Message, "seconds per GPU")

	// A GPU with a MIG mode pending and a remap pending: one reset does
	// both, and both findings say so in the same words.
	s2 := nvmltest.NewServer(t, nvmltest.DGXH100)
	s2.SetMIGPending(3, nvml.DEVICE_MIG_ENABLE)
	s2.SetRemap(3, true, false)
	r = rankOn(mockInventory(t, s2), "3")
	require.ElementsMatch(t, []string{"GPU_REMAP_PENDING/fail", "MIG_MODE_PENDING/warn"}, ruleSev(r))
	for _, f := range r.Findings {
		require.Contains(t, f.Remediation, "nvidia-smi -r -i 3")
		if f.Rule == verdict.RuleGPURemapPending {
			require.Contains(t, f.Remediation, "MIG_MODE_PENDING")
		}
	}
}

func TestHealthRulesLostAndResetOnMock(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXH100)
	s.FaultGPU("GetRemappedRows", 2, nvml.ERROR_GPU_IS_LOST)
	s.FaultGPU("GetTotalEccErrors", 5, nvml.ERROR_RESET_REQUIRED)
	s.FaultGPU("GetGpuFabricInfo", 1, nvml.ERROR_NOT_SUPPORTED)
	inv := mockInventory(t, s)
	require.Equal(t, []string{"GPU_LOST/fail"}, ruleSev(rankOn(inv, "2")))
	require.Equal(t, []string{"GPU_RESET_REQUIRED/fail"}, ruleSev(rankOn(inv, "5")))
	require.Empty(t, rankOn(inv, "1").Findings, "NOT_SUPPORTED is an answer, not a failure")
	require.Empty(t, rankOn(inv, "0").Findings, "only the ranks given a sick GPU fail")
}

func TestHealthRulesOnRealOutputs(t *testing.T) {
	load := func(dir, f string) smi.Input {
		data, err := os.ReadFile(dir + f)
		require.NoError(t, err)
		return smi.Input{Name: f, Data: data}
	}
	const own = "../topology/smi/testdata/"
	for _, tc := range []struct {
		name string
		in   smi.Input
		want []string
	}{
		{"-q excerpt, A100 remap pending", load(own, "q_a100-sxm4-80gb_remap-pending_510.73.08_excerpt.txt"),
			[]string{"GPU_REMAP_PENDING/fail"}},
		{"-q fragment, H100 fabric in progress", load(own, "q_h100-80gb-hbm3_fabric-in-progress_570.133.20_fragment.txt"),
			[]string{"NVLINK_FABRIC_NOT_READY/fail", "PERSISTENCE_OFF/warn"}},
		{"-q -x fixture 32, persistence off", load(sharedSMI, "32_smi-q-x_a100-sxm4-40gb_mig-2x3g.20gb_510.47.03_netdata.xml"),
			[]string{"PERSISTENCE_OFF/warn"}},
		{"-q -x variant of 32", load(own, "qx_a100-sxm4-40gb_remap-ecc-throttle-fabric_variant-of-32.xml"),
			[]string{"GPU_RESET_REQUIRED/fail", "GPU_REMAP_FAILED/fail", "GPU_REMAP_PENDING/fail", "GPU_ECC_UNCORRECTED/fail",
				"NVLINK_FABRIC_FAILED/fail", "PERSISTENCE_OFF/warn", "CLOCKS_THROTTLED/warn"}},
		{"-q fixture 05, healthy H100", load(sharedSMI, "05_smi-q_h100-80gb-hbm3_mig-enabled_590.48.01.txt"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv, err := smi.Import([]smi.Input{tc.in}, nil)
			require.NoError(t, err)
			r := RankRules(RankInput{Inventory: inv, Allocation: topology.Allocation{All: true, From: topology.FromDefault},
				Catalog: topology.DefaultCatalog(), Mode: ModeNode})
			var health []string
			for _, f := range r.Findings {
				if IsHealthRule(f.Rule) {
					health = append(health, f.Rule+"/"+string(f.Severity))
				}
			}
			require.ElementsMatch(t, tc.want, health)
		})
	}
}

func ruleSev(r verdict.Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, f.Rule+"/"+string(f.Severity))
	}
	return out
}
