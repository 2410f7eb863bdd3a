package smi

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology"
)

// sharedDir holds the verbatim public outputs; testdata holds this
// package's own variants.
const sharedDir = "../../testdata/fixtures/nvidia-smi"

func load(t testing.TB, dir, name string) Input {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err)
	return Input{Name: name, Data: data}
}

func importOK(t *testing.T, in ...Input) *topology.Inventory {
	t.Helper()
	inv, err := Import(in, nil)
	require.NoError(t, err)
	require.NoError(t, inv.Validate())
	return inv
}

func gpu(t *testing.T, inv *topology.Inventory, i int) *topology.GPU {
	t.Helper()
	g, ok := inv.GPUByIndex(i)
	require.True(t, ok, "GPU %d", i)
	return g
}

func profiles(g *topology.GPU) []string {
	var out []string
	for _, m := range g.MIGDevices {
		out = append(out, m.Profile)
	}
	return out
}

func link(t *testing.T, inv *topology.Inventory, a, b int) topology.Link {
	t.Helper()
	l, ok := inv.Link(a, b)
	require.True(t, ok, "link %d-%d", a, b)
	return l
}

func intp(n int) *int    { return &n }
func boolp(b bool) *bool { return &b }

// TestSharedFixtures asserts, for every nvidia-smi fixture, the reading
// testdata/fixtures/README.md gives for it.
func TestSharedFixtures(t *testing.T) {
	for _, tc := range []struct {
		file  string
		kind  Kind
		check func(t *testing.T, inv *topology.Inventory)
	}{
		{"01_smi-L_h100-80gb-hbm3_mig-mixed_590.48.01.txt", KindList, func(t *testing.T, inv *topology.Inventory) {
			require.Len(t, inv.GPUs, 1)
			g := gpu(t, inv, 0)
			require.Equal(t, "NVIDIA H100 80GB HBM3", g.Name)
			require.Equal(t, "GPU-00000000-0000-0000-0000-000000000000", g.UUID)
			require.Equal(t, topology.ModeEnabled, g.MIGCurrent)
			require.Equal(t, []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}, profiles(g))
			for i, m := range g.MIGDevices {
				require.Equal(t, i, m.Index)
				require.Equal(t, -1, m.GPUInstanceID)
				require.Equal(t, -1, m.ComputeInstanceID)
			}
			require.Equal(t, "MIG-00000003-0000-0000-0000-000000000003", g.MIGDevices[3].UUID)
			require.Empty(t, inv.DriverVersion)
		}},
		{"03_smi-table_h100-80gb-hbm3_mig-mixed_590.48.01.txt", KindTable, func(t *testing.T, inv *topology.Inventory) {
			require.Equal(t, "590.48.01", inv.DriverVersion)
			require.Equal(t, "13.1", inv.CUDADriverVersion)
			require.Len(t, inv.GPUs, 1)
			g := gpu(t, inv, 0)
			require.Equal(t, "NVIDIA H100 80GB HBM3", g.Name)
			require.Equal(t, "00000000:00:09.0", g.PCIBusID)
			require.Equal(t, uint64(81559), g.MemoryMiB)
			require.Equal(t, topology.ModeEnabled, g.MIGCurrent)
			require.Equal(t, boolp(true), g.Persistence)
			require.Equal(t, []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}, profiles(g))
			for i, want := range []struct {
				gi, sms int
				mem     uint64
			}{{2, 60, 40448}, {3, 32, 20096}, {9, 16, 9984}, {10, 16, 9984}} {
				m := g.MIGDevices[i]
				require.Equal(t, i, m.Index)
				require.Equal(t, want.gi, m.GPUInstanceID)
				require.Equal(t, 0, m.ComputeInstanceID)
				require.Equal(t, want.sms, m.SMs)
				require.Equal(t, want.mem, m.MemoryMiB)
			}
		}},
		{"05_smi-q_h100-80gb-hbm3_mig-enabled_590.48.01.txt", KindQuery, func(t *testing.T, inv *topology.Inventory) {
			require.Equal(t, "590.48.01", inv.DriverVersion)
			require.Equal(t, "13.1", inv.CUDADriverVersion)
			g := gpu(t, inv, 0)
			require.Len(t, inv.GPUs, 1)
			require.Equal(t, "NVIDIA H100 80GB HBM3", g.Name)
			require.Equal(t, "GPU-00000000-0000-0000-0000-000000000000", g.UUID)
			require.Equal(t, "00000000:00:09.0", g.PCIBusID)
			require.Equal(t, topology.ModeEnabled, g.MIGCurrent)
			require.Equal(t, topology.ModeEnabled, g.MIGPending)
			require.Equal(t, boolp(true), g.Persistence)
			require.Nil(t, g.NUMANode)
			require.Equal(t, []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}, profiles(g))
			require.Equal(t, 2, g.MIGDevices[0].GPUInstanceID)
			require.Equal(t, 10, g.MIGDevices[3].GPUInstanceID)
			require.Equal(t, 60, g.MIGDevices[0].SMs)
			require.Equal(t, uint64(40448), g.MIGDevices[0].MemoryMiB)
		}},
		{"07_topo_g6e.12xlarge_4xL40S_pcie-NODE.txt", KindTopoMatrix, func(t *testing.T, inv *topology.Inventory) {
			require.Len(t, inv.GPUs, 4)
			require.Len(t, inv.Links, 6)
			for _, l := range inv.Links {
				require.Equal(t, "NODE", l.Level)
				require.Zero(t, l.NVLinks)
			}
			for _, g := range inv.GPUs {
				require.Equal(t, intp(0), g.NUMANode)
			}
		}},
		{"08_topo_p4d.24xlarge_8xA100_NV12.txt", KindTopoMatrix, func(t *testing.T, inv *topology.Inventory) {
			require.Len(t, inv.GPUs, 8)
			require.Len(t, inv.Links, 28)
			for _, l := range inv.Links {
				require.Equal(t, "NV12", l.Level)
				require.Equal(t, 12, l.NVLinks)
			}
			for _, g := range inv.GPUs {
				require.Equal(t, intp(g.Index/4), g.NUMANode, "GPU %d", g.Index)
			}
		}},
		{"12_smi-L_a100-sxm4-80gb_7x1g.10gb_datadog33120.txt", KindList, func(t *testing.T, inv *topology.Inventory) {
			require.Len(t, inv.GPUs, 1)
			g := gpu(t, inv, 0)
			require.Equal(t, "NVIDIA A100-SXM4-80GB", g.Name)
			require.Equal(t, "GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16", g.UUID)
			require.Equal(t, topology.ModeEnabled, g.MIGCurrent)
			require.Equal(t, []string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}, profiles(g))
			require.Equal(t, "MIG-feb88891-0321-5fef-9c87-d4af3b54259e", g.MIGDevices[0].UUID)
			require.Equal(t, "MIG-1aae4990-b962-574e-8375-119d6d9b9687", g.MIGDevices[6].UUID)
			d, err := inv.Resolve("0:6")
			require.NoError(t, err)
			require.Equal(t, "MIG-1aae4990-b962-574e-8375-119d6d9b9687", d.ID())
		}},
		{"13_smi-L_a100-80gb-pcie_2x3g.40gb_nvct203.txt", KindList, func(t *testing.T, inv *topology.Inventory) {
			g := gpu(t, inv, 0)
			require.Len(t, inv.GPUs, 1)
			require.Equal(t, "NVIDIA A100 80GB PCIe", g.Name)
			require.Equal(t, "GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39", g.UUID)
			require.Equal(t, []string{"3g.40gb", "3g.40gb"}, profiles(g))
			require.Equal(t, "MIG-0929581a-2be6-5dec-bf34-0954c6c529a6", g.MIGDevices[0].UUID)
			require.Equal(t, "MIG-3adbed3a-d03d-549f-a016-ba1fd7359f23", g.MIGDevices[1].UUID)
			// New-style UUIDs: the legacy GI/CI form cannot be resolved.
			_, err := inv.Resolve("MIG-GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39/1/0")
			require.ErrorIs(t, err, topology.ErrDeviceNotFound)
		}},
		{"15_topo_3xH100-NVL_NV12-pair-plus-SYS_nccl1608.txt", KindTopoMatrix, func(t *testing.T, inv *topology.Inventory) {
			require.Len(t, inv.GPUs, 3)
			require.Equal(t, topology.Link{A: 0, B: 1, Level: "NV12", NVLinks: 12}, link(t, inv, 0, 1))
			require.Equal(t, "SYS", link(t, inv, 0, 2).Level)
			require.Equal(t, "SYS", link(t, inv, 1, 2).Level)
			require.Equal(t, intp(0), gpu(t, inv, 0).NUMANode)
			require.Equal(t, intp(0), gpu(t, inv, 1).NUMANode)
			require.Equal(t, intp(1), gpu(t, inv, 2).NUMANode)
		}},
		{"29_mig-lgip-lgipp-lgi_a30_4x1g.6gb-full_summer-lo.txt", KindMIGLGIP, func(t *testing.T, inv *topology.Inventory) {
			require.Len(t, inv.GPUs, 1)
			g := gpu(t, inv, 0)
			require.Equal(t, topology.ModeEnabled, g.MIGCurrent)
			require.Equal(t, []string{"1g.6gb", "1g.6gb", "1g.6gb", "1g.6gb"}, profiles(g))
			for i, m := range g.MIGDevices {
				require.Equal(t, i, m.Index)
				require.Equal(t, 3+i, m.GPUInstanceID)
				require.Equal(t, -1, m.ComputeInstanceID)
				require.Equal(t, &topology.Placement{Start: i, Size: 1}, m.Placement)
				require.Equal(t, 14, m.SMs)
				require.Equal(t, boolp(false), m.P2PSupported)
			}
			// All four memory slices of the A30 are taken.
			a30, ok := topology.DefaultCatalog().ModelByName("A30-24GB")
			require.True(t, ok)
			require.False(t, a30.Fits(topology.Layout{"1g.6gb": 5}))
		}},
		{"30_mig-lgip_a100-40gb_all-free_harvester-pcidevices.txt", KindMIGLGIP, func(t *testing.T, inv *topology.Inventory) {
			require.Len(t, inv.GPUs, 1)
			g := gpu(t, inv, 0)
			require.Equal(t, topology.ModeEnabled, g.MIGCurrent)
			require.Empty(t, g.MIGDevices)
		}},
		{"32_smi-q-x_a100-sxm4-40gb_mig-2x3g.20gb_510.47.03_netdata.xml", KindQueryXML, func(t *testing.T, inv *topology.Inventory) {
			require.Equal(t, "510.47.03", inv.DriverVersion)
			require.Equal(t, "11.6", inv.CUDADriverVersion)
			require.Len(t, inv.GPUs, 1)
			g := gpu(t, inv, 0)
			require.Equal(t, "NVIDIA A100-SXM4-40GB", g.Name)
			require.Equal(t, "GPU-27b94a00-ed54-5c24-b1fd-1054085de32a", g.UUID)
			require.Equal(t, "00000000:00:04.0", g.PCIBusID)
			require.Equal(t, uint64(40960), g.MemoryMiB)
			require.Equal(t, topology.ModeEnabled, g.MIGCurrent)
			require.Equal(t, topology.ModeEnabled, g.MIGPending)
			require.Equal(t, boolp(false), g.Persistence)
			require.Equal(t, []string{"3g.20gb", "3g.20gb"}, profiles(g))
			for i, m := range g.MIGDevices {
				require.Equal(t, i+1, m.GPUInstanceID)
				require.Equal(t, 0, m.ComputeInstanceID)
				require.Equal(t, 42, m.SMs)
				require.Equal(t, uint64(19968), m.MemoryMiB)
			}
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			in := load(t, sharedDir, tc.file)
			k, err := Detect(in.Data)
			require.NoError(t, err)
			require.Equal(t, tc.kind, k)
			inv := importOK(t, in)
			require.Equal(t, topology.SnapshotAPIVersion, inv.APIVersion)
			require.Equal(t, topology.SnapshotKind, inv.Kind)
			require.Equal(t, "nvidia-smi:"+tc.file, inv.Source)
			tc.check(t, inv)
		})
	}
}

// TestEveryFixtureCovered keeps TestSharedFixtures in step with the
// fixture folder.
func TestEveryFixtureCovered(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(sharedDir, "*"))
	require.NoError(t, err)
	require.Len(t, files, 11, "a new nvidia-smi fixture needs its reading in TestSharedFixtures")
}

// TestVariants reads this package's own realistic variants.
func TestVariants(t *testing.T) {
	for _, tc := range []struct {
		file  string
		kind  Kind
		check func(t *testing.T, inv *topology.Inventory)
	}{
		{"list_a100-40gb_7x1g.5gb_legacy-uuid_470.txt", KindList, func(t *testing.T, inv *topology.Inventory) {
			require.Len(t, inv.GPUs, 2)
			g := gpu(t, inv, 0)
			require.Equal(t, "A100-SXM4-40GB", g.Name)
			require.Len(t, g.MIGDevices, 7)
			for i, m := range g.MIGDevices {
				require.Equal(t, "1g.5gb", m.Profile)
				require.Equal(t, 7+i, m.GPUInstanceID)
				require.Equal(t, 0, m.ComputeInstanceID)
			}
			d, err := inv.Resolve("MIG-GPU-3e1c0b72-9a4d-61f0-2b8e-77d45a0c19e3/9/0")
			require.NoError(t, err)
			require.Equal(t, 2, d.MIG.Index)
			require.Equal(t, topology.ModeUnknown, gpu(t, inv, 1).MIGCurrent)
		}},
		{"list_a100-80gb_7x1g.10gb_prompt.txt", KindList, func(t *testing.T, inv *topology.Inventory) {
			g := gpu(t, inv, 0)
			require.Len(t, g.MIGDevices, 7)
			require.Equal(t, "MIG-70ae4b36-c256-5bd9-bf83-d4f60ab53c29", g.MIGDevices[6].UUID)
		}},
		{"list_2xa100_fenced_trailing-prompt.txt", KindList, func(t *testing.T, inv *topology.Inventory) {
			require.Len(t, inv.GPUs, 2)
			require.Equal(t, "GPU-b74e19a2-05c3-d8f6-3a21-9c0e6d47f8a5", gpu(t, inv, 1).UUID)
		}},
		{"list_8xh100-sxm_prompt.txt", KindList, func(t *testing.T, inv *topology.Inventory) {
			require.Len(t, inv.GPUs, 8)
		}},
		{"q_8xh100-sxm_mig-disabled_590.48.01.txt", KindQuery, func(t *testing.T, inv *topology.Inventory) {
			require.Len(t, inv.GPUs, 8)
			for i, bus := range []string{"18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"} {
				g := gpu(t, inv, i)
				require.Equal(t, "00000000:"+bus+":00.0", g.PCIBusID)
				require.Equal(t, topology.ModeDisabled, g.MIGCurrent)
				require.Equal(t, uint64(81559), g.MemoryMiB)
				require.Empty(t, g.MIGDevices)
			}
		}},
		{"q_a100-40gb_470.57.02_mig-devices-wrapper_i1.txt", KindQuery, func(t *testing.T, inv *topology.Inventory) {
			require.Equal(t, "470.57.02", inv.DriverVersion)
			require.Len(t, inv.GPUs, 1)
			g := gpu(t, inv, 1) // from the prompt's -i 1
			require.Equal(t, "GPU-c7e2d9a0-4b18-f35e-06a9-2d81b7c4e5f0", g.UUID)
			require.Equal(t, []string{"3g.20gb", "2g.10gb", "1g.5gb"}, profiles(g))
			require.Equal(t, 13, g.MIGDevices[2].GPUInstanceID)
		}},
		{"session_8xh100-sxm_topo-m_p2p-rw.txt", KindTopoMatrix, func(t *testing.T, inv *topology.Inventory) {
			require.Len(t, inv.GPUs, 8)
			require.Len(t, inv.Links, 28)
			require.Equal(t, topology.Link{A: 3, B: 4, Level: "NV18", NVLinks: 18, P2PRead: topology.P2POK, P2PWrite: topology.P2POK}, link(t, inv, 3, 4))
			require.Equal(t, intp(1), gpu(t, inv, 7).NUMANode)
		}},
		{"topo-p2p-r_8xl40s_two-sockets.txt", KindTopoP2P, func(t *testing.T, inv *topology.Inventory) {
			require.Len(t, inv.Links, 28)
			require.Equal(t, topology.P2POK, link(t, inv, 0, 3).P2PRead)
			require.Equal(t, topology.P2PChipsetNotSupported, link(t, inv, 3, 4).P2PRead)
			require.Equal(t, topology.P2PUnknown, link(t, inv, 3, 4).P2PWrite)
			require.Empty(t, link(t, inv, 3, 4).Level)
		}},
		{"session_a100-80gb_L-lgip-lgi-lci_1c-split.txt", KindList, func(t *testing.T, inv *topology.Inventory) {
			g := gpu(t, inv, 0)
			require.Equal(t, []string{"1c.3g.40gb", "1c.3g.40gb", "1c.3g.40gb", "2g.20gb", "1g.10gb"}, profiles(g))
			for i, want := range []struct{ gi, ci, start, size, sms int }{
				{1, 0, 0, 4, 0}, {1, 1, 0, 4, 0}, {1, 2, 0, 4, 0}, {5, 0, 4, 2, 28}, {13, 0, 6, 1, 14},
			} {
				m := g.MIGDevices[i]
				require.Equal(t, want.gi, m.GPUInstanceID, "device %d", i)
				require.Equal(t, want.ci, m.ComputeInstanceID, "device %d", i)
				require.Equal(t, &topology.Placement{Start: want.start, Size: want.size}, m.Placement, "device %d", i)
				require.Equal(t, want.sms, m.SMs, "device %d", i)
				require.Equal(t, boolp(false), m.P2PSupported, "device %d", i)
			}
		}},
		{"table_2xh100_mig-3g.40gb-2x1g.20gb_550.54.15.txt", KindTable, func(t *testing.T, inv *topology.Inventory) {
			require.Equal(t, "550.54.15", inv.DriverVersion)
			require.Equal(t, "12.4", inv.CUDADriverVersion)
			g0, g1 := gpu(t, inv, 0), gpu(t, inv, 1)
			// 1g.20gb and 2g.20gb share memory; 26 SMs tell them apart.
			require.Equal(t, []string{"3g.40gb", "1g.20gb", "1g.20gb"}, profiles(g0))
			require.Equal(t, topology.ModeEnabled, g0.MIGCurrent)
			require.Equal(t, topology.ModeDisabled, g1.MIGCurrent)
			require.Equal(t, "00000000:2A:00.0", g1.PCIBusID)
			require.Empty(t, g1.MIGDevices)
		}},
		{"table_a100-sxm4-40gb_510.47.03_truncated-name.txt", KindTable, func(t *testing.T, inv *topology.Inventory) {
			g := gpu(t, inv, 0)
			require.Equal(t, "NVIDIA A100-SXM...", g.Name)
			require.Equal(t, boolp(false), g.Persistence)
			// The truncated name and 40960 MiB still pick the A100-40GB.
			require.Equal(t, []string{"3g.20gb", "3g.20gb"}, profiles(g))
		}},
		{"table_2xrtx4090_windows_crlf_572.16.txt", KindTable, func(t *testing.T, inv *topology.Inventory) {
			require.Equal(t, "572.16", inv.DriverVersion)
			require.Equal(t, "12.8", inv.CUDADriverVersion)
			require.Len(t, inv.GPUs, 2)
			for _, g := range inv.GPUs {
				require.Equal(t, "NVIDIA GeForce RTX 4090", g.Name)
				require.Equal(t, topology.ModeUnsupported, g.MIGCurrent)
				require.Nil(t, g.Persistence) // WDDM, not a persistence mode
				require.Equal(t, uint64(24564), g.MemoryMiB)
			}
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			in := load(t, "testdata", tc.file)
			k, err := Detect(in.Data)
			require.NoError(t, err)
			require.Equal(t, tc.kind, k)
			tc.check(t, importOK(t, in))
		})
	}
}

func TestCombined(t *testing.T) {
	t.Run("H100 -L, table and -q agree", func(t *testing.T) {
		inv := importOK(t,
			load(t, sharedDir, "01_smi-L_h100-80gb-hbm3_mig-mixed_590.48.01.txt"),
			load(t, sharedDir, "03_smi-table_h100-80gb-hbm3_mig-mixed_590.48.01.txt"),
			load(t, sharedDir, "05_smi-q_h100-80gb-hbm3_mig-enabled_590.48.01.txt"))
		require.Len(t, inv.GPUs, 1)
		g := gpu(t, inv, 0)
		require.Equal(t, "00000000:00:09.0", g.PCIBusID)
		require.Equal(t, topology.ModeEnabled, g.MIGPending)
		require.Equal(t, []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}, profiles(g))
		m := g.MIGDevices[1]
		require.Equal(t, topology.MIGDevice{Index: 1, UUID: "MIG-00000001-0000-0000-0000-000000000001",
			GPUInstanceID: 3, ComputeInstanceID: 0, Profile: "2g.20gb", SMs: 32, MemoryMiB: 20096}, m)
		require.Equal(t, "nvidia-smi:01_smi-L_h100-80gb-hbm3_mig-mixed_590.48.01.txt,03_smi-table_h100-80gb-hbm3_mig-mixed_590.48.01.txt,05_smi-q_h100-80gb-hbm3_mig-enabled_590.48.01.txt", inv.Source)
	})
	t.Run("truncated table name and -q -x", func(t *testing.T) {
		inv := importOK(t,
			load(t, "testdata", "table_a100-sxm4-40gb_510.47.03_truncated-name.txt"),
			load(t, sharedDir, "32_smi-q-x_a100-sxm4-40gb_mig-2x3g.20gb_510.47.03_netdata.xml"))
		g := gpu(t, inv, 0)
		require.Equal(t, "NVIDIA A100-SXM4-40GB", g.Name)
		require.Len(t, g.MIGDevices, 2)
	})
	t.Run("8x H100: -L, -q, topo -m and -p2p rw", func(t *testing.T) {
		inv := importOK(t,
			load(t, "testdata", "q_8xh100-sxm_mig-disabled_590.48.01.txt"),
			load(t, "testdata", "list_8xh100-sxm_prompt.txt"),
			load(t, "testdata", "session_8xh100-sxm_topo-m_p2p-rw.txt"))
		require.Len(t, inv.GPUs, 8)
		g := gpu(t, inv, 5)
		require.Equal(t, "GPU-8d116ece-1738-f7d9-3d9c-172411e20b8f", g.UUID)
		require.Equal(t, "00000000:AB:00.0", g.PCIBusID)
		require.Equal(t, intp(1), g.NUMANode)
		require.Equal(t, topology.P2POK, link(t, inv, 0, 7).P2PWrite)
	})
	t.Run("-q of one GPU found by bus ID", func(t *testing.T) {
		q := load(t, "testdata", "q_8xh100-sxm_mig-disabled_590.48.01.txt")
		// Keep the header and the fourth GPU only, without the -i prompt.
		text := string(q.Data)
		head := text[:strings.Index(text, "GPU 00000000:")]
		one := text[strings.Index(text, "GPU 00000000:5D:00.0"):strings.Index(text, "GPU 00000000:9A:00.0")]
		inv := importOK(t,
			load(t, "testdata", "list_8xh100-sxm_prompt.txt"),
			Input{Name: "q-gpu3.txt", Data: []byte(head + one)})
		g := gpu(t, inv, 3)
		require.Equal(t, "00000000:5D:00.0", g.PCIBusID)
		require.Equal(t, topology.ModeDisabled, g.MIGCurrent)
		require.Empty(t, gpu(t, inv, 0).PCIBusID)
	})
	t.Run("-L with -lci numbers the compute instances", func(t *testing.T) {
		s := string(load(t, "testdata", "session_a100-80gb_L-lgip-lgi-lci_1c-split.txt").Data)
		i := strings.Index(s, "[root@gpu-a100-02 ~]# nvidia-smi mig -lgip")
		j := strings.Index(s, "[root@gpu-a100-02 ~]# nvidia-smi mig -lci")
		inv := importOK(t, Input{Name: "L.txt", Data: []byte(s[:i])}, Input{Name: "lci.txt", Data: []byte(s[j:])})
		g := gpu(t, inv, 0)
		require.Equal(t, 2, g.MIGDevices[2].ComputeInstanceID)
		require.Equal(t, 13, g.MIGDevices[4].GPUInstanceID)
		require.Nil(t, g.MIGDevices[4].Placement)
	})
}

func TestConflicts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inputs []Input
		want   []string
	}{
		{"two UUIDs for GPU 0", []Input{
			load(t, sharedDir, "12_smi-L_a100-sxm4-80gb_7x1g.10gb_datadog33120.txt"),
			load(t, sharedDir, "13_smi-L_a100-80gb-pcie_2x3g.40gb_nvct203.txt"),
		}, []string{"12_smi-L", "13_smi-L", "GPU-932bfb2c", "GPU-7fdaf0a5", "UUID"}},
		{"driver versions differ", []Input{
			load(t, sharedDir, "03_smi-table_h100-80gb-hbm3_mig-mixed_590.48.01.txt"),
			load(t, sharedDir, "32_smi-q-x_a100-sxm4-40gb_mig-2x3g.20gb_510.47.03_netdata.xml"),
		}, []string{"03_smi-table", "32_smi-q-x", "590.48.01", "510.47.03"}},
		{"MIG device UUIDs differ", []Input{
			{Name: "a.txt", Data: []byte("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-11111111-2222-3333-4444-555555555555)\n  MIG 3g.40gb Device 0: (UUID: MIG-aaaaaaaa-2222-3333-4444-555555555555)\n")},
			{Name: "b.txt", Data: []byte("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-11111111-2222-3333-4444-555555555555)\n  MIG 3g.40gb Device 0: (UUID: MIG-bbbbbbbb-2222-3333-4444-555555555555)\n")},
		}, []string{"a.txt:2", "b.txt:2", "MIG device 0:0"}},
		{"profiles differ", []Input{
			load(t, sharedDir, "01_smi-L_h100-80gb-hbm3_mig-mixed_590.48.01.txt"),
			{Name: "lci.txt", Data: []byte("+--+\n| Compute instances: |\n|====|\n|   0      2       MIG 4g.40gb          3         0          0:4     |\n|   0      3       MIG 2g.20gb          1         0          0:2     |\n|   0      9       MIG 1g.10gb          0         0          0:1     |\n|   0     10       MIG 1g.10gb          0         0          0:1     |\n")},
		}, []string{"lci.txt:4", "01_smi-L", "3g.40gb", "4g.40gb"}},
		{"topo levels differ", []Input{
			load(t, sharedDir, "07_topo_g6e.12xlarge_4xL40S_pcie-NODE.txt"),
			{Name: "topo2.txt", Data: []byte("\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU1\tPIX\t X \n")},
		}, []string{"topo2.txt", "07_topo", "NODE", "PIX"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Import(tc.inputs, nil)
			require.Error(t, err)
			var ie *topology.InputError
			require.True(t, errors.As(err, &ie), "%T: %v", err, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestInputErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file, data string
		line             int
		want             string
	}{
		{"not nvidia-smi", "notes.txt", "hello, the job hangs\nplease help\n", 1, "expected the output of one of"},
		{"empty", "empty.txt", "\n\n", 0, "no nvidia-smi output"},
		{"only a foreign command", "lspci.txt", "$ lspci | grep NVIDIA\n3b:00.0 3D controller: NVIDIA Corporation\n", 0, "no nvidia-smi output"},
		{"smi failed", "fail.txt", "$ nvidia-smi\nNVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", 2, "reported an error"},
		{"no devices", "none.txt", "No devices were found\n", 1, "reported an error"},
		{"bad MIG line", "l.txt", "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16)\n  MIG 3g.40gb Device x: (UUID: MIG-0929581a-2be6-5dec-bf34-0954c6c529a6)\n", 2, "MIG device index"},
		{"MIG line first", "l.txt", "  MIG 3g.40gb Device 0: (UUID: MIG-0929581a-2be6-5dec-bf34-0954c6c529a6)\n", 1, "expected the output"},
		{"junk after -L", "l.txt", "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16)\nthanks for looking!\n", 2, "not a line of `nvidia-smi -L`"},
		{"bad legacy UUID", "l.txt", "GPU 0: A100-SXM4-40GB (UUID: GPU-3e1c0b72-9a4d-61f0-2b8e-77d45a0c19e3)\n  MIG 1g.5gb Device 0: (UUID: MIG-GPU-3e1c0b72-9a4d-61f0-2b8e-77d45a0c19e3/7)\n", 2, "legacy MIG UUID"},
		{"bad profile", "l.txt", "GPU 0: A100 (UUID: GPU-3e1c0b72-9a4d-61f0-2b8e-77d45a0c19e3)\n  MIG big Device 0: (UUID: MIG-0929581a-2be6-5dec-bf34-0954c6c529a6)\n", 2, "not a MIG profile name"},
		{"asymmetric topo", "t.txt", "\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tSYS\t X \n", 3, "one way"},
		{"unknown topo cell", "t.txt", "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tWARP\t0-7\nGPU1\tWARP\t X \t0-7\n", 2, "WARP"},
		{"short topo row", "t.txt", "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X\n", 2, "cells"},
		{"p2p without mode", "p2p.txt", " \tGPU0\tGPU1\n GPU0\tX\tOK\n GPU1\tOK\tX\n", 1, "does not say which capability"},
		{"truncated xml", "q.xml", "<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n<gpu id=\"00000000:00:04.0\">\n<product_name>A100</product_name>\n", 5, "XML"},
		{"xml bad bus id", "q.xml", "<nvidia_smi_log><gpu id=\"zz\"></gpu></nvidia_smi_log>", 1, "PCI bus ID"},
		{"xml wrong root", "q.xml", "<?xml version=\"1.0\" ?>\n<log></log>\n", 2, "want <nvidia_smi_log>"},
		{"q bad MIG index", "q.txt", "==============NVSMI LOG==============\nGPU 00000000:00:09.0\n    MIG Device\n        Index : seven\n", 4, "Index"},
		{"q bad bus", "q.txt", "==============NVSMI LOG==============\nGPU 0000:zz:09.0\n", 2, "PCI bus ID"},
		{"table junk", "t.txt", "+---+\n| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |\n+---+\nsee above\n", 4, "not part of the nvidia-smi table"},
		{"table bad MIG row", "t.txt", "| MIG devices: |\n|====|\n|  0    x   0   0  |  1MiB / 2MiB | 1 0 |\n", 3, "MIG device row"},
		{"lgi short row", "g.txt", "| GPU instances: |\n|====|\n|   0  MIG 1g.6gb   14 |\n", 3, "`mig -lgi` row"},
		{"lgip bad p2p", "g.txt", "| GPU instance profiles: |\n|====|\n|   0  MIG 1g.6gb        14     0/4        5.81       Maybe     14     1     0   |\n", 3, "P2P"},
		{"lgipp bad line", "g.txt", "GPU  0 Profile ID 14 Placements: {0,x}:1\n", 1, "lgipp"},
		{"lcip", "c.txt", "| Compute instance profiles: |\n", 1, "not read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Import([]Input{{Name: tc.file, Data: []byte(tc.data)}}, nil)
			require.Error(t, err)
			var ie *topology.InputError
			require.True(t, errors.As(err, &ie), "%T: %v", err, err)
			require.Equal(t, tc.file, ie.File)
			if tc.line > 0 {
				require.Equal(t, tc.line, ie.Line, "%v", err)
			}
			require.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := Import(nil, nil)
	var ie *topology.InputError
	require.ErrorAs(t, err, &ie)
}

func TestP2PModes(t *testing.T) {
	matrix := " \tGPU0\tGPU1\tGPU2\n GPU0\tX\tOK\tNS\n GPU1\tOK\tX\tOK\n GPU2\tNS\tGNS\tX\n"
	for _, tc := range []struct {
		name, file, prompt string
		read, write        topology.P2PStatus
	}{
		{"r from prompt", "p.txt", "$ nvidia-smi topo -p2p r\n", topology.P2POK, ""},
		{"w from prompt", "p.txt", "$ nvidia-smi topo -p2p w\n", "", topology.P2POK},
		{"rw from file name", "node7_topo-p2p-rw.txt", "", topology.P2POK, topology.P2POK},
		{"n: NVLink P2P OK", "p.txt", "$ nvidia-smi topo --p2pstatus n\n", topology.P2POK, topology.P2POK},
		{"a: atomics not stored", "p.txt", "$ nvidia-smi topo -p2p a\n", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := importOK(t, Input{Name: tc.file, Data: []byte(tc.prompt + matrix)})
			l := link(t, inv, 0, 1)
			require.Equal(t, tc.read, l.P2PRead)
			require.Equal(t, tc.write, l.P2PWrite)
		})
	}
	// Directions differ: the one that is not OK is kept.
	inv := importOK(t, Input{Name: "p2p-r.txt", Data: []byte(matrix)})
	require.Equal(t, topology.P2PGPUNotSupported, link(t, inv, 1, 2).P2PRead)
	require.Equal(t, topology.P2PNotSupported, link(t, inv, 0, 2).P2PRead)
	// n says nothing about PCIe P2P where NVLink P2P is not OK.
	inv = importOK(t, Input{Name: "p.txt", Data: []byte("$ nvidia-smi topo -p2p n\n" + matrix)})
	require.Equal(t, topology.P2PUnknown, link(t, inv, 0, 2).P2PRead)
}

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       Kind
	}{
		{"list", "GPU 0: Tesla V100-SXM2-16GB (UUID: GPU-11111111-2222-3333-4444-555555555555)\n", KindList},
		{"list after prompt", "$ nvidia-smi -L\nGPU 0: X (UUID: GPU-1)\n", KindList},
		{"query", "\n==============NVSMI LOG==============\n", KindQuery},
		{"xml", "<?xml version=\"1.0\" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM \"nvsmi_device_v12.dtd\">\n<nvidia_smi_log>", KindQueryXML},
		{"matrix", "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPHB\t0-7\n", KindTopoMatrix},
		{"p2p", " \tGPU0\tGPU1\n GPU0\tX\tCNS\n", KindTopoP2P},
		{"lgi", "+---+\n| GPU instances: |\n", KindMIGLGI},
		{"lgi empty", "No GPU instances found: Not Found\n", KindMIGLGI},
		{"lci", "+---+\n| Compute instances: |\n", KindMIGLCI},
		{"lgip", "+---+\n| GPU instance profiles: |\n", KindMIGLGIP},
		{"lgipp", "GPU  0 Profile ID 14 Placements: {0,1,2,3}:1\n", KindMIGLGIP},
		{"table", "Tue Jul 14 09:00:26 2026\n+---+\n| NVIDIA-SMI 590.48.01   Driver Version: 590.48.01   CUDA Version: 13.1 |\n", KindTable},
		{"windows prompt", "PS C:\\Users\\me> nvidia-smi -L\r\nGPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-1)\r\n", KindList},
		{"bom", "\ufeffGPU 0: X (UUID: GPU-1)\n", KindList},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := Detect([]byte(tc.data))
			require.NoError(t, err)
			require.Equal(t, tc.want, k)
		})
	}
	// A markdown heading above a paste is not a command.
	k, err := Detect([]byte("# GPU topology\n\n\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPHB\t0-7\nGPU1\tPHB\t X \t0-7\n"))
	require.NoError(t, err)
	require.Equal(t, KindTopoMatrix, k)
	_, err = Detect([]byte("Mem:  64G\n"))
	var ie *topology.InputError
	require.ErrorAs(t, err, &ie)
	require.Contains(t, err.Error(), "expected the output of one of")
}

func TestPromptCommand(t *testing.T) {
	for line, want := range map[string]string{
		"$ nvidia-smi -L":                           "nvidia-smi -L",
		"root@node:~# nvidia-smi topo -m":           "nvidia-smi topo -m",
		"[root@gpu-a100-02 ~]# nvidia-smi mig -lgi": "nvidia-smi mig -lgi",
		"(base) me@box:~/x$ sudo nvidia-smi -q -x":  "sudo nvidia-smi -q -x",
		"# nvidia-smi topo -m":                      "nvidia-smi topo -m",
		"nvidia-smi -q":                             "nvidia-smi -q",
		`PS C:\Users\me> nvidia-smi`:                "nvidia-smi",
		"user@host:~$":                              "",
		"# GPU topology":                            "",
	} {
		got, ok := promptCommand(line)
		require.True(t, ok, line)
		require.Equal(t, want, got, line)
	}
	for _, line := range []string{
		"GPU 0: NVIDIA A100 (UUID: GPU-1)",
		"| NVIDIA-SMI 590.48.01   Driver Version: 590.48.01 |",
		`<?xml version="1.0" ?>`,
		"    EDPp Multiplier                                    : 100.00%",
		"  NV#  = Connection traversing a bonded set of # NVLinks",
		"GPU0\t X \tNV12\t0-23,48-71\t0\t\tN/A",
	} {
		_, ok := promptCommand(line)
		require.False(t, ok, line)
	}
	args, ok := smiArgs("kubectl exec -it pod -- nvidia-smi -q -i 0,3 | less")
	require.True(t, ok)
	require.Equal(t, []string{"-q", "-i", "0,3"}, args)
	require.Equal(t, []int{0, 3}, cmdIndices(args))
}

func TestNormBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:00:09.0": "00000000:00:09.0",
		"0000:3b:00.0":     "00000000:3B:00.0",
		"3b:00.0":          "00000000:3B:00.0",
	} {
		got, err := normBusID(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for _, bad := range []string{"", "3b:00", "x:3b:00.0", "0000:3b:00.0:1", "123456789:00:00.0"} {
		_, err := normBusID(bad)
		require.Error(t, err, bad)
	}
}

func TestMaskedUUIDsReadAsUnknown(t *testing.T) {
	inv := importOK(t, Input{Name: "masked.txt", Data: []byte(
		"GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)\n" +
			"GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-<redacted>)\n")})
	require.Len(t, inv.GPUs, 2)
	require.Empty(t, inv.GPUs[0].UUID)
	require.Empty(t, inv.GPUs[1].UUID)
}

// Outputs without SM counts (-L): the catalog's count for a known model and
// for a MIG device's GPU-instance profile; none for an unknown model or for
// a compute instance that holds part of its GPU instance.
func TestSMsFromCatalogWhereOutputsSayNone(t *testing.T) {
	inv := importOK(t, Input{Name: "l.txt", Data: []byte(
		"GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1f1b6f5e-3b3c-2f4a-9c1d-7e5b0f3a9d10)\n" +
			"  MIG 3g.40gb     Device  0: (UUID: MIG-4c6d2b1e-8a9f-5e3d-b2c1-0f9e8d7c6b5a)\n" +
			"  MIG 1c.3g.40gb  Device  1: (UUID: MIG-5c6d2b1e-8a9f-5e3d-b2c1-0f9e8d7c6b5a)\n" +
			"GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-2a2b6f5e-3b3c-2f4a-9c1d-7e5b0f3a9d11)\n" +
			"GPU 2: NVIDIA GeForce RTX 4090 (UUID: GPU-3a2b6f5e-3b3c-2f4a-9c1d-7e5b0f3a9d12)\n")})
	require.Len(t, inv.GPUs, 3)
	require.Equal(t, 108, inv.GPUs[0].SMs)
	require.Equal(t, 108, inv.GPUs[1].SMs)
	require.Zero(t, inv.GPUs[2].SMs, "a model the catalog does not know")
	require.Len(t, inv.GPUs[0].MIGDevices, 2)
	require.Equal(t, 42, inv.GPUs[0].MIGDevices[0].SMs)
	require.Zero(t, inv.GPUs[0].MIGDevices[1].SMs, "a compute instance holds part of its GPU instance's SMs")
}
