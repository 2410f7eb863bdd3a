package smi

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology"
)

// Real outputs of issue 12 (sources in testdata/README.md): columns that
// read N/A, pending MIG modes, outputs pasted back to back.

// TestTableMemoryNA: the 535 drivers print N/A for the whole Memory-Usage
// cell of a MIG-enabled GPU; the slash of "N/A" is not the used/total one.
func TestTableMemoryNA(t *testing.T) {
	inv := importOK(t, load(t, "testdata", "table_h100_mig-1g.10gb_memory-NA_535.104.12.txt"))
	g := gpu(t, inv, 0)
	require.Equal(t, "NVIDIA H100 80GB HBM3", g.Name)
	require.Zero(t, g.MemoryMiB)
	require.Equal(t, topology.ModeEnabled, g.MIGCurrent)
	require.Equal(t, []string{"1g.10gb"}, profiles(g))
	require.Equal(t, 16, g.MIGDevices[0].SMs)
}

// TestNotAvailableCells: every spelling drivers use for a value they cannot
// read is accepted in every column that may carry it.
func TestNotAvailableCells(t *testing.T) {
	base, err := readFileString("testdata/table_h100_mig-1g.10gb_memory-NA_535.104.12.txt")
	require.NoError(t, err)
	for _, na := range []string{"N/A", "[N/A]", "Not Supported", "[Not Supported]", "[Insufficient Permissions]", "[Unknown Error]"} {
		t.Run(na, func(t *testing.T) {
			for _, tc := range []struct{ old, new string }{
				// the GPU's memory cell, whole and either side
				{"|                  N/A |     N/A", "|" + padLeft(na, 21) + " |     N/A"},
				{"|                  N/A |     N/A", "|" + padLeft(na+" / "+na, 21) + " |     N/A"},
				// a MIG device's memory and SM count
				{"12MiB /  9984MiB  | 16", padLeft(na+" / "+na, 16) + "  | 16"},
				{"| 16      0 |", "| " + padRight(na, 9) + " |"},
			} {
				data := strings.Replace(base, tc.old, tc.new, 1)
				if tc.new != tc.old {
					require.NotEqual(t, base, data, tc.old)
				}
				inv, err := Import([]Input{{Name: "t.txt", Data: []byte(data)}}, nil)
				require.NoError(t, err, "%s -> %s", tc.old, tc.new)
				require.Len(t, gpu(t, inv, 0).MIGDevices, 1)
			}
		})
	}
	// -q: memory, UUID, bus ID and MIG device numbers
	q, err := readFileString(sharedDir + "/05_smi-q_h100-80gb-hbm3_mig-enabled_590.48.01.txt")
	require.NoError(t, err)
	for _, na := range []string{"N/A", "[N/A]", "Not Supported", "[Insufficient Permissions]"} {
		data := replaceValue(q, "Total", na)
		data = replaceValue(data, "Multiprocessor count", na)
		_, err := Import([]Input{{Name: "q.txt", Data: []byte(data)}}, nil)
		require.NoError(t, err, na)
	}
}

// TestPendingMIGMode: an asterisk names the pending mode; the GPU still
// runs in the other one.
func TestPendingMIGMode(t *testing.T) {
	inv := importOK(t, load(t, "testdata", "table_h100_mig-disabled-pending_535.104.12.txt"))
	g := gpu(t, inv, 0)
	require.Equal(t, topology.ModeEnabled, g.MIGCurrent, "Disabled*: still in MIG mode")
	require.Equal(t, topology.ModeDisabled, g.MIGPending)
	require.Len(t, g.MIGDevices, 1)

	inv = importOK(t, load(t, "testdata", "table_h100_mig-enable-pending_535.104.12.txt"))
	g = gpu(t, inv, 0)
	require.Equal(t, topology.ModeDisabled, g.MIGCurrent, "Enabled*: not in MIG mode yet")
	require.Equal(t, topology.ModeEnabled, g.MIGPending)
	require.Equal(t, uint64(81559), g.MemoryMiB)

	// -q and -q -x print the same asterisk.
	q, err := readFileString(sharedDir + "/05_smi-q_h100-80gb-hbm3_mig-enabled_590.48.01.txt")
	require.NoError(t, err)
	data := replaceValue(replaceValue(q, "Current", "Enabled"), "Pending", "Disabled*")
	inv, err = Import([]Input{{Name: "q.txt", Data: []byte(data)}}, nil)
	require.NoError(t, err)
	g = gpu(t, inv, 0)
	require.Equal(t, topology.ModeEnabled, g.MIGCurrent)
	require.Equal(t, topology.ModeDisabled, g.MIGPending)

	x, err := readFileString(sharedDir + "/32_smi-q-x_a100-sxm4-40gb_mig-2x3g.20gb_510.47.03_netdata.xml")
	require.NoError(t, err)
	x = strings.Replace(x, "<current_mig>Enabled</current_mig>", "<current_mig>Enabled*</current_mig>", 1)
	x = strings.Replace(x, "<pending_mig>Enabled</pending_mig>", "<pending_mig>Enabled*</pending_mig>", 1)
	inv, err = Import([]Input{{Name: "x.xml", Data: []byte(x)}}, nil)
	require.NoError(t, err)
	g = gpu(t, inv, 0)
	require.Equal(t, topology.ModeDisabled, g.MIGCurrent)
	require.Equal(t, topology.ModeEnabled, g.MIGPending)
}

func padLeft(s string, n int) string {
	if len(s) >= n {
		return s
	}
	return strings.Repeat(" ", n-len(s)) + s
}

func padRight(s string, n int) string {
	if len(s) >= n {
		return s
	}
	return s + strings.Repeat(" ", n-len(s))
}

// replaceValue sets every "Key : value" line of a -q output with that key.
func replaceValue(q, key, val string) string {
	lines := strings.Split(q, "\n")
	for i, l := range lines {
		k, _, ok := splitKV(strings.TrimSpace(l))
		if !ok || k != key || !strings.Contains(l, ": ") {
			continue
		}
		lines[i] = l[:strings.Index(l, ": ")+2] + val
	}
	return strings.Join(lines, "\n")
}

func readFileString(name string) (string, error) {
	b, err := os.ReadFile(name)
	return string(b), err
}

// singleOutputs are fixtures that hold one output each, with the command
// that printed it.
var singleOutputs = []struct{ dir, file, args string }{
	{sharedDir, "01_smi-L_h100-80gb-hbm3_mig-mixed_590.48.01.txt", "-L"},
	{sharedDir, "03_smi-table_h100-80gb-hbm3_mig-mixed_590.48.01.txt", ""},
	{sharedDir, "05_smi-q_h100-80gb-hbm3_mig-enabled_590.48.01.txt", "-q"},
	{sharedDir, "07_topo_g6e.12xlarge_4xL40S_pcie-NODE.txt", "topo -m"},
	{sharedDir, "08_topo_p4d.24xlarge_8xA100_NV12.txt", "topo -m"},
	{sharedDir, "12_smi-L_a100-sxm4-80gb_7x1g.10gb_datadog33120.txt", "-L"},
	{sharedDir, "13_smi-L_a100-80gb-pcie_2x3g.40gb_nvct203.txt", "-L"},
	{sharedDir, "15_topo_3xH100-NVL_NV12-pair-plus-SYS_nccl1608.txt", "topo -m"},
	{sharedDir, "30_mig-lgip_a100-40gb_all-free_harvester-pcidevices.txt", "mig -lgip"},
	{sharedDir, "32_smi-q-x_a100-sxm4-40gb_mig-2x3g.20gb_510.47.03_netdata.xml", "-q -x"},
	{"testdata", "list_a100-40gb_7x1g.5gb_legacy-uuid_470.txt", "-L"},
	{"testdata", "q_8xh100-sxm_mig-disabled_590.48.01.txt", "-q"},
	{"testdata", "table_2xh100_mig-3g.40gb-2x1g.20gb_550.54.15.txt", ""},
	{"testdata", "table_a100-sxm4-40gb_510.47.03_truncated-name.txt", ""},
	{"testdata", "topo-p2p-r_8xl40s_two-sockets.txt", "topo -p2p r"},
	{"testdata", "table_h100_mig-1g.10gb_memory-NA_535.104.12.txt", ""},
	{"testdata", "q_a100-sxm4-80gb_remap-pending_510.73.08_excerpt.txt", "-q"},
	{"testdata", "q_h100-80gb-hbm3_fabric-in-progress_570.133.20_fragment.txt", "-q"},
	{"testdata", "qx_a100-sxm4-40gb_remap-ecc-throttle-fabric_variant-of-32.xml", "-q -x"},
}

// promptStyles are shell prompts people paste with their commands.
var promptStyles = []string{
	"$ %s",
	"user@host:~/dir$ %s",
	"(venv) user@host:~/work$ %s",
	"root@node:~# %s",
	"# %s",
	"[root@node ~]# %s",
	"[user@gpu-01 work]$ sudo %s",
	"PS C:\\> %s",
	"PS C:\\Users\\me> %s",
	"user@host ~ %% %s",
	"> %s",
}

// TestPromptBeforeEveryFormat: any prompt style may stand before any
// output; the reading is the same as without it.
func TestPromptBeforeEveryFormat(t *testing.T) {
	for _, f := range singleOutputs {
		in := load(t, f.dir, f.file)
		want := importOK(t, in)
		cmd := strings.TrimSpace("nvidia-smi " + f.args)
		for _, p := range promptStyles {
			line := fmt.Sprintf(p, cmd)
			t.Run(f.file+"/"+line, func(t *testing.T) {
				data := line + "\n" + string(in.Data)
				inv, err := Import([]Input{{Name: in.Name, Data: []byte(data)}}, nil)
				require.NoError(t, err)
				require.Equal(t, want, inv)
			})
		}
	}
}

// TestConcatenatedOutputs: outputs of one node pasted back to back, with
// or without prompt lines or blank lines between them, read as the same
// outputs given as separate files.
func TestConcatenatedOutputs(t *testing.T) {
	// -L, table and -q of one H100 node, in every order.
	parts := []Input{
		load(t, sharedDir, "01_smi-L_h100-80gb-hbm3_mig-mixed_590.48.01.txt"),
		load(t, sharedDir, "03_smi-table_h100-80gb-hbm3_mig-mixed_590.48.01.txt"),
		load(t, sharedDir, "05_smi-q_h100-80gb-hbm3_mig-enabled_590.48.01.txt"),
	}
	want := importOK(t, parts...)
	for _, order := range [][3]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}} {
		for _, sep := range []string{"", "\n", "\n\n"} {
			var b strings.Builder
			for _, k := range order {
				b.WriteString(strings.TrimRight(string(parts[k].Data), "\n") + "\n" + sep)
			}
			inv, err := Import([]Input{{Name: "all.txt", Data: []byte(b.String())}}, nil)
			require.NoError(t, err, "order %v sep %q", order, sep)
			inv.Source = want.Source
			require.Equal(t, want, inv, "order %v sep %q", order, sep)
		}
	}
	// Sessions pasted with their prompt lines read the same without them.
	for _, f := range []struct{ dir, file string }{
		{"testdata", "session_a100-80gb_L-lgip-lgi-lci_1c-split.txt"},
		{sharedDir, "29_mig-lgip-lgipp-lgi_a30_4x1g.6gb-full_summer-lo.txt"},
	} {
		in := load(t, f.dir, f.file)
		want := importOK(t, in)
		var kept []string
		for _, l := range strings.Split(string(in.Data), "\n") {
			if _, ok := promptCommand(l); !ok {
				kept = append(kept, l)
			}
		}
		require.NotEqual(t, string(in.Data), strings.Join(kept, "\n"))
		inv, err := Import([]Input{{Name: in.Name, Data: []byte(strings.Join(kept, "\n"))}}, nil)
		require.NoError(t, err, f.file)
		require.Equal(t, want, inv, f.file)
	}
}

// TestLGIPTeachesProfiles: a pasted `mig -lgip` names devices of a GPU the
// catalog lacks (here a catalog without its H100 NVL entry), and its
// profiles are kept on the GPU.
func TestLGIPTeachesProfiles(t *testing.T) {
	cat := topology.DefaultCatalog()
	kept := cat.Models[:0]
	for _, m := range cat.Models {
		if m.Name != "H100-NVL-94GB" {
			kept = append(kept, m)
		}
	}
	cat.Models = kept
	importWith := func(in ...Input) *topology.Inventory {
		inv, err := Import(in, cat)
		require.NoError(t, err)
		require.NoError(t, inv.Validate())
		return inv
	}
	table := load(t, "testdata", "table_h100-nvl_mig-1g.24gb_variant.txt")
	require.Equal(t, []string{""}, profiles(gpu(t, importWith(table), 0)), "the catalog alone cannot name it")
	require.Equal(t, []string{"1g.24gb"}, profiles(gpu(t, importOK(t, table), 0)), "the built-in catalog knows the H100 NVL")

	inv := importWith(load(t, "testdata", "lgip_h100-nvl_excerpt_gpuop900.txt"), table)
	g := gpu(t, inv, 0)
	require.Equal(t, []string{"1g.24gb"}, profiles(g))
	require.Len(t, g.MIGProfiles, 4)
	p, ok := g.MIGProfile(nil, "2g.24gb")
	require.True(t, ok)
	require.Equal(t, topology.Profile{Name: "2g.24gb", Slices: 2, SMs: 32, MemoryMiB: 22139, MaxInstances: 3}, *p)
}
