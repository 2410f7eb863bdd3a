package smi

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology"
)

// Real outputs of issue 25 (sources in testdata/README.md): lost GPUs,
// nvlink -s, ERR! cells, elisions and cut tables.

// TestLostGPUAlone: an output that is only nvidia-smi's device-handle
// failure is a lost GPU, with its bus ID, whatever the domain's width.
func TestLostGPUAlone(t *testing.T) {
	for _, tc := range []struct{ file, bus string }{
		{"handle_gpu-is-lost_owod81.txt", "00000000:02:00.0"},
		{"handle_unknown-error_syno22.txt", "00000000:07:00.0"},
		{"handle_unknown-error_3-digit-domain_dcgm604.txt", "00000000:BA:80.0"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			in := load(t, "testdata", tc.file)
			k, err := Detect(in.Data)
			require.NoError(t, err)
			require.Equal(t, KindDeviceHandle, k)
			inv := importOK(t, in)
			require.Len(t, inv.GPUs, 1)
			g := gpu(t, inv, 0)
			require.Equal(t, tc.bus, g.PCIBusID)
			require.NotNil(t, g.Health)
			require.True(t, g.Health.Lost)
			require.Contains(t, g.Health.LostReason, "Unable to determine the device handle")
		})
	}
}

// TestLostGPUAmongOthers: the failure line above a table that lists the
// other GPUs; the lost GPU takes its place in bus order.
func TestLostGPUAmongOthers(t *testing.T) {
	inv := importOK(t, load(t, "testdata", "table_2xrtx-a4000_gpu0-lost_variant-of-nvct189.txt"))
	require.Len(t, inv.GPUs, 2)
	lost := gpu(t, inv, 0)
	require.Equal(t, "00000000:65:00.0", lost.PCIBusID)
	require.True(t, lost.Health.Lost)
	ok := gpu(t, inv, 1)
	require.Equal(t, "NVIDIA RTX A4000", ok.Name)
	require.Nil(t, ok.Health)

	// Among -L lines, with the index nvidia-smi gives, and matched by bus
	// ID to the GPU another output names.
	list := "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-7fdaf0a5-1111-2222-3333-444444444444)\n" +
		"GPU 1: Unable to determine the device handle for gpu 0000:CB:00.0: Unknown Error\n" +
		"GPU 2: NVIDIA A100-SXM4-80GB (UUID: GPU-7fdaf0a5-1111-2222-3333-555555555555)\n"
	inv = importOK(t, Input{Name: "l.txt", Data: []byte(list)})
	require.Len(t, inv.GPUs, 3)
	require.True(t, gpu(t, inv, 1).Health.Lost)
	require.Equal(t, "00000000:CB:00.0", gpu(t, inv, 1).PCIBusID)

	// The lost GPU named by another output (its bus ID in topo or -q)
	// is that GPU, not a new one.
	q := "==============NVSMI LOG==============\n\nDriver Version : 535.104.12\n\nAttached GPUs : 1\nGPU 00000000:07:00.0\n    Product Name : Tesla P4\n"
	inv = importOK(t, Input{Name: "q.txt", Data: []byte(q)}, load(t, "testdata", "handle_unknown-error_syno22.txt"))
	require.Len(t, inv.GPUs, 1)
	require.Equal(t, "Tesla P4", gpu(t, inv, 0).Name)
	require.True(t, gpu(t, inv, 0).Health.Lost)

	// The only GPU lost: nvidia-smi adds that it found none.
	inv = importOK(t, Input{Name: "n.txt", Data: []byte("Unable to determine the device handle for GPU0000:8A:00.0: Unknown Error\nNo devices were found\n")})
	require.True(t, gpu(t, inv, 0).Health.Lost)

	// "GPU requires reset" is a reset, not a lost GPU; other reasons say
	// nothing about the GPU and stay errors.
	inv = importOK(t, Input{Name: "r.txt", Data: []byte("Unable to determine the device handle for GPU 0000:3B:00.0: GPU requires reset\n")})
	require.False(t, gpu(t, inv, 0).Health.Lost)
	require.True(t, *gpu(t, inv, 0).Health.ResetRequired)
	_, err := Import([]Input{{Name: "p.txt", Data: []byte("Unable to determine the device handle for GPU 0000:3B:00.0: Insufficient Permissions\n")}}, nil)
	var ie *topology.InputError
	require.ErrorAs(t, err, &ie)
}

// TestNVLinkStatus: nvlink -s is read per GPU (UUID, name, each link up
// or down), alone, elided, and pasted after another output of the node.
func TestNVLinkStatus(t *testing.T) {
	in := load(t, "testdata", "nvlink-s_v100-sxm2_links-3-5-inactive_azhpc73.txt")
	k, err := Detect(in.Data)
	require.NoError(t, err)
	require.Equal(t, KindNVLinkStatus, k)
	inv := importOK(t, in)
	g := gpu(t, inv, 3)
	require.Equal(t, "Tesla V100-SXM2-32GB", g.Name)
	require.Empty(t, g.UUID, "a masked UUID is unknown")
	require.Equal(t, []topology.NVLink{{Link: 0, Active: true}, {Link: 1, Active: true}, {Link: 2, Active: true},
		{Link: 3}, {Link: 4, Active: true}, {Link: 5}}, g.NVLinks)
	require.Len(t, inv.Gaps, 1, "the elision above GPU 3")
	require.Contains(t, inv.Gaps[0], `"...."`)

	inv = importOK(t, load(t, "testdata", "nvlink-s_gb200_all-up_k8stestinfra371.txt"))
	require.Len(t, inv.GPUs, 2)
	require.Len(t, gpu(t, inv, 0).NVLinks, 18)
	require.Len(t, gpu(t, inv, 1).NVLinks, 2)
	for _, l := range gpu(t, inv, 0).NVLinks {
		require.True(t, l.Active)
	}
	require.Len(t, inv.Gaps, 1)

	// After -L, without a prompt line between them; tabs before "Link".
	both := "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5b1e2c3d-1111-2222-3333-444444444444)\n" +
		"GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-5b1e2c3d-1111-2222-3333-555555555555)\n" +
		"GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5b1e2c3d-1111-2222-3333-444444444444)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n" +
		"GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-5b1e2c3d-1111-2222-3333-555555555555)\n\t Link 0: 26.562 GB/s\n\t Link 1: 26.562 GB/s\n"
	inv = importOK(t, Input{Name: "node.txt", Data: []byte(both)})
	require.Len(t, inv.GPUs, 2)
	require.Equal(t, []topology.NVLink{{Link: 0, Active: true}, {Link: 1}}, gpu(t, inv, 0).NVLinks)
	require.Empty(t, inv.Gaps)

	// A GPU without NVLink: newer drivers print one line instead of its
	// links.
	pcie := "GPU 0: NVIDIA A10 (UUID: GPU-5b1e2c3d-1111-2222-3333-666666666666)\n\t NVML: Unable to retrieve NVLink information as all links are inActive\n"
	inv = importOK(t, Input{Name: "pcie.txt", Data: []byte(pcie)})
	require.Empty(t, gpu(t, inv, 0).NVLinks)

	_, err = Import([]Input{{Name: "bad.txt", Data: []byte("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5b1e2c3d-1111-2222-3333-444444444444)\n\t Link 0: fast\n")}}, nil)
	var ie *topology.InputError
	require.ErrorAs(t, err, &ie)
}

// TestTableERR: ERR! cells are read as unknown values and recorded, named
// by their column, as a health fact of that GPU; a table pasted without
// its header (elided) is read under the usual one, and the elision is a
// gap.
func TestTableERR(t *testing.T) {
	inv := importOK(t, load(t, "testdata", "table_v100-pcie_power-ERR_azhpc77.txt"))
	g := gpu(t, inv, 1)
	require.Equal(t, "00008ED0:00:00.0", g.PCIBusID)
	require.Equal(t, uint64(16160), g.MemoryMiB)
	require.Equal(t, []string{"power"}, g.Health.ErrFields)

	inv = importOK(t, load(t, "testdata", "table_rtx4000-ada_fan-ERR_elided_exporter393.txt"))
	require.Len(t, inv.GPUs, 2)
	require.Nil(t, gpu(t, inv, 13).Health)
	require.Equal(t, []string{"fan"}, gpu(t, inv, 14).Health.ErrFields)
	require.Len(t, inv.Gaps, 1)
	require.Contains(t, inv.Gaps[0], `"[...]"`)

	inv = importOK(t, load(t, "testdata", "table_2xrtx-a4000_gpu1-ERR-rows_variant-of-nvct189.txt"))
	require.Nil(t, gpu(t, inv, 0).Health)
	g = gpu(t, inv, 1)
	require.Equal(t, "NVIDIA RTX A4000", g.Name)
	require.Zero(t, g.MemoryMiB)
	require.Equal(t, []string{"persistence mode", "volatile uncorrectable ECC", "fan", "temperature", "performance state", "power", "memory usage", "utilization", "MIG mode"}, g.Health.ErrFields)

	// The name itself unreadable: unknown, not a name that conflicts with
	// another output's.
	noName := strings.Replace(errRowsTable(t), "|   1  NVIDIA RTX A4000    ERR! |", "|   1  ERR!                ERR! |", 1)
	list := "GPU 1: NVIDIA RTX A4000 (UUID: GPU-3e34e62f-d88e-f448-415e-be2cbf2c6178)\n"
	inv = importOK(t, Input{Name: "noname.txt", Data: []byte(noName)}, Input{Name: "l.txt", Data: []byte(list)})
	require.Equal(t, "NVIDIA RTX A4000", gpu(t, inv, 1).Name)
	require.Contains(t, gpu(t, inv, 1).Health.ErrFields, "name")

	// An elision between GPU blocks: reading resumes at the next GPU row.
	base, err := readFileString("testdata/table_2xrtx-a4000_gpu1-ERR-rows_variant-of-nvct189.txt")
	require.NoError(t, err)
	cut := strings.Replace(base, "| 41%   30C    P8    11W / 140W |     93MiB / 16376MiB |      0%      Default |\n", "...\n", 1)
	inv = importOK(t, Input{Name: "cut.txt", Data: []byte(cut)})
	require.Len(t, inv.GPUs, 2)
	require.Len(t, inv.Gaps, 1)
}

func errRowsTable(t *testing.T) string {
	t.Helper()
	s, err := readFileString("testdata/table_2xrtx-a4000_gpu1-ERR-rows_variant-of-nvct189.txt")
	require.NoError(t, err)
	return s
}

// TestRecoveryAction: -q's GPU Recovery Action other than None is a reset
// the GPU needs.
func TestRecoveryAction(t *testing.T) {
	q, err := readFileString("testdata/q_8xh100-sxm_mig-disabled_590.48.01.txt")
	require.NoError(t, err)
	inv := importOK(t, Input{Name: "q.txt", Data: []byte(q)})
	require.Nil(t, gpu(t, inv, 0).Health.ResetRequired, "None is no action")
	q = strings.Replace(q, "GPU Recovery Action                                : None", "GPU Recovery Action                                : Reset", 1)
	inv = importOK(t, Input{Name: "q.txt", Data: []byte(q)})
	require.True(t, *gpu(t, inv, 0).Health.ResetRequired)
	require.Equal(t, "Reset", gpu(t, inv, 0).Health.RecoveryAction)

	x, err := readFileString(sharedDir + "/32_smi-q-x_a100-sxm4-40gb_mig-2x3g.20gb_510.47.03_netdata.xml")
	require.NoError(t, err)
	x = strings.Replace(x, "<product_name>", "<gpu_recovery_action>Drain and Reset</gpu_recovery_action>\n\t\t<product_name>", 1)
	inv = importOK(t, Input{Name: "qx.xml", Data: []byte(x)})
	require.Equal(t, "Drain and Reset", gpu(t, inv, 0).Health.RecoveryAction)
}

// TestTableCutBeforeMIGDevices: a table whose last line is a GPU row says
// nothing about MIG devices: they are unknown, and the cut is a gap.
func TestTableCutBeforeMIGDevices(t *testing.T) {
	inv := importOK(t, load(t, "testdata", "table_h100_mig-on_cut-before-mig-devices_variant-of-03.txt"))
	g := gpu(t, inv, 0)
	require.Equal(t, topology.ModeEnabled, g.MIGCurrent)
	require.Empty(t, g.MIGDevices)
	require.True(t, g.MIGDevicesUnknown)
	require.Len(t, inv.Gaps, 1)
	require.Contains(t, inv.Gaps[0], "cut")

	// With its closing border the table is whole: no MIG devices box is
	// "no instances", as before; -L naming the devices fills them in.
	whole, err := readFileString("testdata/table_h100_mig-on_cut-before-mig-devices_variant-of-03.txt")
	require.NoError(t, err)
	whole += "+-----------------------------------------+------------------------+----------------------+\n"
	inv = importOK(t, Input{Name: "whole.txt", Data: []byte(whole)})
	require.False(t, gpu(t, inv, 0).MIGDevicesUnknown)
	require.Empty(t, inv.Gaps)
	inv = importOK(t, load(t, "testdata", "table_h100_mig-on_cut-before-mig-devices_variant-of-03.txt"),
		load(t, sharedDir, "01_smi-L_h100-80gb-hbm3_mig-mixed_590.48.01.txt"))
	require.False(t, gpu(t, inv, 0).MIGDevicesUnknown)
	require.Len(t, gpu(t, inv, 0).MIGDevices, 4)
}

// TestNVLinkStatusWithOtherOutputs: nvlink -s pasted back to back with the
// node's table, with and without a prompt line, is its own output.
func TestNVLinkStatusWithOtherOutputs(t *testing.T) {
	table, err := readFileString(sharedDir + "/03_smi-table_h100-80gb-hbm3_mig-mixed_590.48.01.txt")
	require.NoError(t, err)
	nv := "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n"
	for _, sep := range []string{"", "\n", "$ nvidia-smi nvlink --status\n"} {
		inv := importOK(t, Input{Name: "node.txt", Data: []byte(table + sep + nv)})
		g := gpu(t, inv, 0)
		require.Len(t, g.MIGDevices, 4, "%q", sep)
		require.Equal(t, []topology.NVLink{{Link: 0, Active: true}, {Link: 1}}, g.NVLinks, "%q", sep)
	}
	inv := importOK(t, Input{Name: "nv.txt", Data: []byte(nv)}, Input{Name: "t.txt", Data: []byte(table)})
	require.Len(t, gpu(t, inv, 0).NVLinks, 2)
}
