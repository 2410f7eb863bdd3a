package preflight

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/smi"
	"github.com/rankgate/rankgate/verdict"
)

// TestLostGPUFromPaste: nvidia-smi's device-handle failure is GPU_LOST in
// node mode, alone or next to the rows of healthy GPUs, naming the bus ID,
// with the reset and the drain.
func TestLostGPUFromPaste(t *testing.T) {
	for _, f := range []string{"handle_gpu-is-lost_owod81.txt", "table_2xrtx-a4000_gpu0-lost_variant-of-nvct189.txt"} {
		t.Run(f, func(t *testing.T) {
			r := RankRules(RankInput{Inventory: smiNode(t, f), Allocation: nodeAlloc, Mode: ModeNode, Catalog: topology.DefaultCatalog()})
			require.Equal(t, "GPU_LOST/fail", rules(r)[0])
			fd := r.Findings[0]
			require.Contains(t, fd.Message, "GPU 0 (bus 00000000:")
			require.Contains(t, fd.Message, "lost")
			require.Contains(t, fd.Remediation, "`nvidia-smi -r -i 0`")
			require.Contains(t, fd.Remediation, "drain the node")
		})
	}
}

func nodeReport(t *testing.T, files ...string) verdict.Report {
	t.Helper()
	return RankRules(RankInput{Inventory: smiNode(t, files...), Allocation: nodeAlloc, Mode: ModeNode, Catalog: topology.DefaultCatalog()})
}

// TestNVLinkDownFromStatus: nvlink -s with inactive links among active
// ones is NVLINK_DOWN (a failure in node mode); all links up passes; a
// GPU with all links down next to a GPU of its model with links up is
// down too.
func TestNVLinkDownFromStatus(t *testing.T) {
	r := nodeReport(t, "nvlink-s_v100-sxm2_links-3-5-inactive_azhpc73.txt")
	require.Equal(t, []string{"NVLINK_DOWN/fail", "INPUT_INCOMPLETE/warn"}, rules(r))
	require.Contains(t, r.Findings[0].Message, "GPU 3: NVLink(s) 3,5 down")

	r = nodeReport(t, "nvlink-s_gb200_all-up_k8stestinfra371.txt")
	require.Equal(t, []string{"INPUT_INCOMPLETE/warn"}, rules(r), "all links up; the elided GPUs are said")

	inv := smiNode(t, "nvlink-s_gb200_all-up_k8stestinfra371.txt")
	for i := range inv.GPUs[1].NVLinks {
		inv.GPUs[1].NVLinks[i].Active = false
	}
	inv.Gaps = nil
	r = RankRules(RankInput{Inventory: inv, Allocation: nodeAlloc, Mode: ModeNode})
	require.Equal(t, []string{"NVLINK_DOWN/fail"}, rules(r))
	require.Contains(t, r.Findings[0].Message, "GPU 1: all its NVLinks (0,1) are down while GPU 0")
}

// TestReadErrorFromTable: ERR! in a sensor cell warns; ERR! rows fail.
func TestReadErrorFromTable(t *testing.T) {
	r := nodeReport(t, "table_v100-pcie_power-ERR_azhpc77.txt")
	require.Equal(t, []string{"GPU_READ_ERROR/warn"}, rules(r))
	require.Contains(t, r.Findings[0].Message, "GPU 1: nvidia-smi printed ERR! for its power")

	r = nodeReport(t, "table_rtx4000-ada_fan-ERR_elided_exporter393.txt")
	require.Equal(t, []string{"GPU_READ_ERROR/warn", "INPUT_INCOMPLETE/warn"}, rules(r))

	r = nodeReport(t, "table_2xrtx-a4000_gpu1-ERR-rows_variant-of-nvct189.txt")
	require.Equal(t, "GPU_READ_ERROR/fail", rules(r)[0])
	require.Equal(t, []string{"GPU 1"}, r.Findings[0].Devices)
	require.Contains(t, r.Findings[0].Remediation, "`nvidia-smi -r -i 1`")
}

// TestCutTableIsNotNoInstances: a table cut before its MIG devices says
// the instances are unknown instead of MIG_NO_INSTANCES.
func TestCutTableIsNotNoInstances(t *testing.T) {
	r := nodeReport(t, "table_h100_mig-on_cut-before-mig-devices_variant-of-03.txt")
	require.NotContains(t, rules(r), "MIG_NO_INSTANCES/fail")
	require.Equal(t, []string{"INPUT_INCOMPLETE/warn", "INPUT_INCOMPLETE/warn"}, rules(r))
	require.Contains(t, r.Findings[0].Message, "truncated")
	require.Contains(t, r.Findings[0].Message, "unknown")
}

// TestRecoveryActionIsResetRequired: -q's GPU Recovery Action other than
// None is GPU_RESET_REQUIRED naming the action.
func TestRecoveryActionIsResetRequired(t *testing.T) {
	data, err := os.ReadFile("../topology/smi/testdata/q_8xh100-sxm_mig-disabled_590.48.01.txt")
	require.NoError(t, err)
	q := strings.Replace(string(data), "GPU Recovery Action                                : None", "GPU Recovery Action                                : Reset", 1)
	inv, err := smi.Import([]smi.Input{{Name: "q.txt", Data: []byte(q)}}, nil)
	require.NoError(t, err)
	r := RankRules(RankInput{Inventory: inv, Allocation: topology.Allocation{From: "--devices", Refs: []string{"0"}}})
	require.Contains(t, rules(r), "GPU_RESET_REQUIRED/fail")
	for _, f := range r.Findings {
		if f.Rule == "GPU_RESET_REQUIRED" {
			require.Contains(t, f.Message, "GPU Recovery Action: Reset")
		}
	}
}
