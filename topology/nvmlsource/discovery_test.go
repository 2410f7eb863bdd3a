package nvmlsource_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/nvmlsource"
	"github.com/rankgate/rankgate/topology/nvmlsource/nvmltest"
)

func discover(t testing.TB, s *nvmltest.Server, opts ...nvmlsource.Option) (*topology.Inventory, error) {
	t.Helper()
	return nvmlsource.New(s.Interface(), opts...).Inventory(context.Background())
}

func mustDiscover(t testing.TB, s *nvmltest.Server, opts ...nvmlsource.Option) *topology.Inventory {
	t.Helper()
	inv, err := discover(t, s, opts...)
	require.NoError(t, err)
	return inv
}

// servers describes the four go-nvml DGX servers as their packages define
// them.
var servers = []struct {
	kind    string
	gpu     gpus.Config
	driver  string
	cuda    string
	nvlinks int
}{
	{nvmltest.DGXA100, gpus.A100_SXM4_40GB, "550.54.15", "12.4", 12},
	{nvmltest.DGXH100, gpus.H100_SXM5_80GB, "550.54.15", "12.4", 18},
	{nvmltest.DGXH200, gpus.H200_SXM5_141GB, "550.54.15", "12.4", 18},
	{nvmltest.DGXB200, gpus.B200_SXM5_180GB, "560.28.03", "12.6", 18},
}

func TestInventoryFullGPUs(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.kind, func(t *testing.T) {
			s := nvmltest.NewServer(t, srv.kind)
			inv := mustDiscover(t, s)

			require.Equal(t, topology.SnapshotAPIVersion, inv.APIVersion)
			require.Equal(t, topology.SnapshotKind, inv.Kind)
			require.Equal(t, "nvml", inv.Source)
			require.Empty(t, inv.Hostname, "the hostname is the caller's to set")
			require.Equal(t, srv.driver, inv.DriverVersion)
			require.Equal(t, srv.cuda, inv.CUDADriverVersion)
			require.Equal(t, "12."+srv.driver, inv.NVMLVersion)
			require.Len(t, inv.GPUs, 8)
			for i, g := range inv.GPUs {
				d := s.GPU(i)
				require.Equal(t, i, g.Index)
				require.Equal(t, d.UUID, g.UUID)
				require.Equal(t, srv.gpu.Name, g.Name)
				require.Equal(t, d.PciBusID, g.PCIBusID)
				require.Equal(t, srv.gpu.MemoryMB, g.MemoryMiB)
				require.Zero(t, g.SMs, "full-GPU attributes are NOT_SUPPORTED")
				require.Equal(t, fmt.Sprintf("%d.%d", srv.gpu.CudaMajor, srv.gpu.CudaMinor), g.ComputeCapability)
				require.NotNil(t, g.NUMANode)
				require.Equal(t, i/4, *g.NUMANode)
				require.Equal(t, topology.ModeDisabled, g.MIGCurrent)
				require.Equal(t, topology.ModeDisabled, g.MIGPending)
				require.NotNil(t, g.Persistence)
				require.True(t, *g.Persistence)
				require.Empty(t, g.MIGDevices)
				require.Len(t, g.NVLinks, srv.nvlinks)
				for l, nl := range g.NVLinks {
					require.Equal(t, l, nl.Link)
					require.True(t, nl.Active)
					require.NotEmpty(t, nl.RemotePCIBusID)
				}
			}
			require.Len(t, inv.Links, 28)
			for _, l := range inv.Links {
				require.Equal(t, fmt.Sprintf("NV%d", srv.nvlinks), l.Level, "%d-%d", l.A, l.B)
				require.Equal(t, srv.nvlinks, l.NVLinks)
				require.Equal(t, topology.P2POK, l.P2PRead)
				require.Equal(t, topology.P2POK, l.P2PWrite)
			}
			require.NoError(t, inv.Validate())
		})
	}
}

func TestInventoryFullGPUAttributes(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXH100, nvmltest.WithFullGPUAttributes())
	inv := mustDiscover(t, s)
	for _, g := range inv.GPUs {
		require.Equal(t, 132, g.SMs)
	}
}

// migWant is what the mock tables say about a MIG device of one profile.
type migWant struct {
	profile string
	sms     int
	memMiB  uint64
	p2p     bool
}

func TestInventoryMIGLiteral(t *testing.T) {
	// Values straight from go-nvml's gpus tables, so a drift in either the
	// tables or the naming shows.
	tests := []struct {
		kind string
		mig  []string
		want []migWant
	}{
		{nvmltest.DGXA100, []string{"1g.5gb", "2g.10gb", "3g.20gb"}, []migWant{
			{"1g.5gb", 14, 4864, false}, {"2g.10gb", 28, 9856, false}, {"3g.20gb", 42, 19968, false}}},
		{nvmltest.DGXA100_80GB, []string{"3g.40gb", "2g.20gb", "1g.10gb"}, []migWant{
			{"3g.40gb", 42, 40192, false}, {"2g.20gb", 28, 19968, false}, {"1g.10gb", 14, 9856, false}}},
		{nvmltest.DGXH100, []string{"4g.40gb", "1g.10gb", "1g.20gb"}, []migWant{
			{"4g.40gb", 64, 40960, true}, {"1g.10gb", 16, 10240, true}, {"1g.20gb", 16, 20480, true}}},
		{nvmltest.DGXH200, []string{"1g.18gb", "2g.35gb", "3g.71gb"}, []migWant{
			{"1g.18gb", 16, 18432, true}, {"2g.35gb", 32, 35840, true}, {"3g.71gb", 48, 72704, true}}},
		{nvmltest.DGXB200, []string{"7g.180gb"}, []migWant{{"7g.180gb", 126, 184320, true}}},
		{nvmltest.DGXB200, []string{"1g.23gb+me", "1g.45gb", "2g.45gb"}, []migWant{
			{"1g.23gb+me", 18, 23552, true}, {"1g.45gb", 18, 46080, true}, {"2g.45gb", 36, 46080, true}}},
	}
	for _, tt := range tests {
		t.Run(tt.kind+"/"+fmt.Sprint(tt.mig), func(t *testing.T) {
			s := nvmltest.NewServer(t, tt.kind)
			uuids := s.CreateMIG(3, tt.mig...)
			inv := mustDiscover(t, s)
			g := inv.GPUs[3]
			require.Equal(t, topology.ModeEnabled, g.MIGCurrent)
			require.Len(t, g.MIGDevices, len(tt.want))
			for k, w := range tt.want {
				m := g.MIGDevices[k]
				require.Equal(t, k, m.Index)
				require.Equal(t, uuids[k], m.UUID)
				require.Equal(t, w.profile, m.Profile)
				require.Equal(t, w.sms, m.SMs)
				require.Equal(t, w.memMiB, m.MemoryMiB)
				require.NotNil(t, m.P2PSupported)
				require.Equal(t, w.p2p, *m.P2PSupported)
				require.NotNil(t, m.Placement)
			}
		})
	}
}

// layout lists the MIG profiles of each GPU in turn; nil leaves it whole.
type layout [][]string

func TestInventoryMIGLayouts(t *testing.T) {
	all7 := func(p string) []string { return []string{p, p, p, p, p, p, p} }
	tests := []struct {
		name   string
		kind   string
		layout layout
		split  map[int][]string // GPU -> CreateGI(gi, cis...) as [gi, ci...]
	}{
		{name: "a100 mixed", kind: nvmltest.DGXA100, layout: layout{
			all7("1g.5gb"),
			{"3g.20gb", "2g.10gb", "1g.5gb"},
			{"4g.20gb", "3g.20gb"},
			{"7g.40gb"},
			{"1g.10gb", "1g.10gb", "1g.10gb", "1g.5gb+me"},
			nil,
			{"2g.10gb", "2g.10gb", "2g.10gb"},
		}, split: map[int][]string{7: {"3g.20gb", "1c.3g.20gb", "1c.3g.20gb", "1c.3g.20gb"}}},
		{name: "a100-80gb brief example", kind: nvmltest.DGXA100_80GB, layout: layout{
			all7("1g.10gb"),
			{"3g.40gb", "2g.20gb", "1g.10gb"},
		}},
		{name: "h100 mixed", kind: nvmltest.DGXH100, layout: layout{
			all7("1g.10gb"),
			{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"},
			{"7g.80gb"},
			{"1g.20gb", "1g.20gb", "1g.20gb"},
		}, split: map[int][]string{4: {"4g.40gb", "2c.4g.40gb", "1c.4g.40gb", "1c.4g.40gb"}}},
		{name: "h200 mixed", kind: nvmltest.DGXH200, layout: layout{
			all7("1g.18gb"),
			{"3g.71gb", "3g.71gb"},
			{"4g.71gb", "2g.35gb", "1g.18gb"},
		}},
		{name: "b200 mixed", kind: nvmltest.DGXB200, layout: layout{
			nil,
			all7("1g.23gb"),
			{"4g.90gb", "3g.90gb"},
			{"1g.45gb", "1g.45gb", "1g.45gb", "1g.45gb"},
		}},
		{name: "a100 56 instances", kind: nvmltest.DGXA100, layout: layout{
			all7("1g.5gb"), all7("1g.5gb"), all7("1g.5gb"), all7("1g.5gb"),
			all7("1g.5gb"), all7("1g.5gb"), all7("1g.5gb"), all7("1g.5gb"),
		}},
		{name: "h100 56 instances", kind: nvmltest.DGXH100, layout: layout{
			all7("1g.10gb"), all7("1g.10gb"), all7("1g.10gb"), all7("1g.10gb"),
			all7("1g.10gb"), all7("1g.10gb"), all7("1g.10gb"), all7("1g.10gb"),
		}},
	}
	for _, tt := range tests {
		for _, ids := range []string{"mock profile IDs", "driver profile IDs"} {
			t.Run(tt.name+"/"+ids, func(t *testing.T) {
				var opts []nvmltest.Option
				if ids == "driver profile IDs" {
					opts = append(opts, nvmltest.WithDriverProfileIDs())
				}
				testMIGLayout(t, nvmltest.NewServer(t, tt.kind, opts...), tt.layout, tt.split)
			})
		}
	}
}

func testMIGLayout(t *testing.T, s *nvmltest.Server, l layout, split map[int][]string) {
	t.Helper()
	want := map[int][]string{}
	for gpu, ps := range l {
		if ps != nil {
			want[gpu] = s.CreateMIG(gpu, ps...)
		}
	}
	for gpu, gc := range split {
		want[gpu] = s.CreateGI(gpu, gc[0], gc[1:]...)
	}
	inv := mustDiscover(t, s)
	total := 0
	for i, g := range inv.GPUs {
		uuids := want[i]
		if uuids == nil {
			require.Equal(t, topology.ModeDisabled, g.MIGCurrent, "GPU %d", i)
			require.Empty(t, g.MIGDevices)
			continue
		}
		require.Equal(t, topology.ModeEnabled, g.MIGCurrent, "GPU %d", i)
		require.Len(t, g.MIGDevices, len(uuids), "GPU %d", i)
		type slot struct{ start, size int }
		placed := map[slot]int{}
		for k, m := range g.MIGDevices {
			total++
			name := s.MIGName(uuids[k])
			info := s.ProfileInfo(name)
			require.Equal(t, k, m.Index)
			require.Equal(t, uuids[k], m.UUID)
			require.Equal(t, name, m.Profile, "MIG %d:%d", i, k)
			require.Equal(t, s.ComputeSMs(name), m.SMs, "MIG %d:%d %s", i, k, name)
			require.Equal(t, info.MemorySizeMB, m.MemoryMiB)
			require.Equal(t, info.IsP2pSupported != 0, *m.P2PSupported)
			require.GreaterOrEqual(t, m.GPUInstanceID, 0)
			require.GreaterOrEqual(t, m.ComputeInstanceID, 0)
			require.NotNil(t, m.Placement)
			placed[slot{m.Placement.Start, m.Placement.Size}]++
			_, _, err := topology.ParseProfileName(m.Profile)
			require.NoError(t, err)
		}
		// Compute instances of one GPU instance share its
		// placement; distinct GPU instances never overlap.
		gis := map[int]topology.Placement{}
		for _, m := range g.MIGDevices {
			gis[m.GPUInstanceID] = *m.Placement
		}
		for a, pa := range gis {
			for b, pb := range gis {
				if a < b {
					require.False(t, pa.Start < pb.Start+pb.Size && pb.Start < pa.Start+pa.Size,
						"GPU %d: GIs %d %v and %d %v overlap", i, a, pa, b, pb)
				}
			}
		}
	}
	n := 0
	for _, u := range want {
		n += len(u)
	}
	require.Equal(t, n, total)
	require.NoError(t, inv.Validate())
	// Every MIG device resolves by UUID and by N:M.
	for i, uuids := range want {
		for k, u := range uuids {
			d, err := inv.Resolve(u)
			require.NoError(t, err)
			require.Equal(t, topology.KindMIG, d.Kind)
			d2, err := inv.Resolve(fmt.Sprintf("%d:%d", i, k))
			require.NoError(t, err)
			require.Equal(t, u, d2.ID())
		}
	}
}

func TestInventoryMIGComputeInstances(t *testing.T) {
	s := nvmltest.NewServer(t, nvmltest.DGXH100)
	uuids := s.CreateGI(0, "3g.40gb", "1c.3g.40gb", "2c.3g.40gb")
	inv := mustDiscover(t, s)
	ms := inv.GPUs[0].MIGDevices
	require.Len(t, ms, 2)
	require.Equal(t, "1c.3g.40gb", ms[0].Profile)
	require.Equal(t, 16, ms[0].SMs)
	require.Equal(t, "2c.3g.40gb", ms[1].Profile)
	require.Equal(t, 32, ms[1].SMs)
	require.Equal(t, ms[0].GPUInstanceID, ms[1].GPUInstanceID)
	require.NotEqual(t, ms[0].ComputeInstanceID, ms[1].ComputeInstanceID)
	require.Equal(t, uint64(40960), ms[0].MemoryMiB)
	require.Equal(t, *ms[0].Placement, *ms[1].Placement)
	require.Equal(t, uuids, []string{ms[0].UUID, ms[1].UUID})
}

func TestInventoryMIGModes(t *testing.T) {
	t.Run("pending differs", func(t *testing.T) {
		s := nvmltest.NewServer(t, nvmltest.DGXA100)
		s.SetMIGPending(2, nvml.DEVICE_MIG_ENABLE)
		inv := mustDiscover(t, s)
		require.Equal(t, topology.ModeDisabled, inv.GPUs[2].MIGCurrent)
		require.Equal(t, topology.ModeEnabled, inv.GPUs[2].MIGPending)
	})
	t.Run("enabled without instances", func(t *testing.T) {
		s := nvmltest.NewServer(t, nvmltest.DGXH200)
		s.GPU(5).SetMigMode(nvml.DEVICE_MIG_ENABLE)
		inv := mustDiscover(t, s)
		require.Equal(t, topology.ModeEnabled, inv.GPUs[5].MIGCurrent)
		require.Empty(t, inv.GPUs[5].MIGDevices)
	})
	t.Run("not supported", func(t *testing.T) {
		s := nvmltest.NewServer(t, nvmltest.DGXA100)
		s.FaultGPU("GetMigMode", 1, nvml.ERROR_NOT_SUPPORTED)
		inv := mustDiscover(t, s)
		require.Equal(t, topology.ModeUnsupported, inv.GPUs[1].MIGCurrent)
		require.Equal(t, topology.ModeUnsupported, inv.GPUs[1].MIGPending)
		require.Equal(t, topology.ModeDisabled, inv.GPUs[0].MIGCurrent)
	})
}

func TestInventoryPairs(t *testing.T) {
	t.Run("NVLink bridges", func(t *testing.T) {
		s := nvmltest.NewServer(t, nvmltest.DGXA100, nvmltest.WithNVLinkBridge(0, 1, 4), nvmltest.WithNVLinkBridge(2, 5, 2))
		inv := mustDiscover(t, s)
		want := map[[2]int]string{{0, 1}: "NV4", {2, 5}: "NV2", {2, 3}: "PXB", {0, 3}: "NODE", {0, 4}: "SYS", {6, 7}: "PXB"}
		for pair, lvl := range want {
			l, ok := inv.Link(pair[0], pair[1])
			require.True(t, ok)
			require.Equal(t, lvl, l.Level, "%v", pair)
		}
		l, _ := inv.Link(0, 1)
		require.Equal(t, 4, l.NVLinks)
		l, _ = inv.Link(0, 4)
		require.Zero(t, l.NVLinks)
		require.Equal(t, topology.P2PChipsetNotSupported, l.P2PRead)
		require.Equal(t, topology.P2PChipsetNotSupported, l.P2PWrite)
		l, _ = inv.Link(2, 5)
		require.Equal(t, topology.P2POK, l.P2PRead, "NVLink P2P across sockets")
		require.Len(t, inv.GPUs[0].NVLinks, 4)
		require.Equal(t, inv.GPUs[1].PCIBusID, inv.GPUs[0].NVLinks[0].RemotePCIBusID)
		require.Empty(t, inv.GPUs[7].NVLinks)
	})
	t.Run("PCIe only", func(t *testing.T) {
		s := nvmltest.NewServer(t, nvmltest.DGXH100, nvmltest.WithoutNVLink(), nvmltest.WithGPUCount(4))
		inv := mustDiscover(t, s)
		require.Len(t, inv.Links, 6)
		want := map[[2]int]string{{0, 1}: "PXB", {2, 3}: "PXB", {0, 2}: "SYS", {1, 3}: "SYS"}
		for pair, lvl := range want {
			l, _ := inv.Link(pair[0], pair[1])
			require.Equal(t, lvl, l.Level, "%v", pair)
		}
		for _, g := range inv.GPUs {
			require.Empty(t, g.NVLinks)
		}
	})
	t.Run("NVSwitch pair without NVLink P2P", func(t *testing.T) {
		// A fabric partition that keeps GPUs 0 and 5 apart: the links to
		// the switches are up, but NVML refuses P2P over NVLink.
		s := nvmltest.NewServer(t, nvmltest.DGXH100)
		s.SetP2P(0, 5, nvml.P2P_CAPS_INDEX_NVLINK, nvml.P2P_STATUS_NOT_SUPPORTED)
		s.SetP2P(5, 0, nvml.P2P_CAPS_INDEX_WRITE, nvml.P2P_STATUS_DISABLED_BY_REGKEY)
		inv := mustDiscover(t, s)
		l, _ := inv.Link(0, 5)
		require.Equal(t, "SYS", l.Level)
		require.Zero(t, l.NVLinks)
		require.Equal(t, topology.P2POK, l.P2PRead)
		require.Equal(t, topology.P2PDisabledByRegkey, l.P2PWrite)
		l, _ = inv.Link(0, 4)
		require.Equal(t, "NV18", l.Level)
	})
	t.Run("one GPU", func(t *testing.T) {
		s := nvmltest.NewServer(t, nvmltest.DGXB200, nvmltest.WithGPUCount(1))
		inv := mustDiscover(t, s)
		require.Len(t, inv.GPUs, 1)
		require.Empty(t, inv.Links)
	})
}

// TestNotSupportedIsAnAnswer: NOT_SUPPORTED (and a driver without the
// function) leaves a field unknown and never fails discovery.
func TestNotSupportedIsAnAnswer(t *testing.T) {
	tests := []struct {
		method string
		check  func(t *testing.T, inv *topology.Inventory)
	}{
		{"GetMemoryAffinity", func(t *testing.T, inv *topology.Inventory) { require.Nil(t, inv.GPUs[0].NUMANode) }},
		{"GetPersistenceMode", func(t *testing.T, inv *topology.Inventory) { require.Nil(t, inv.GPUs[0].Persistence) }},
		{"GetCudaComputeCapability", func(t *testing.T, inv *topology.Inventory) { require.Empty(t, inv.GPUs[0].ComputeCapability) }},
		{"GetPciInfo", func(t *testing.T, inv *topology.Inventory) { require.Empty(t, inv.GPUs[0].PCIBusID) }},
		{"GetMemoryInfo", func(t *testing.T, inv *topology.Inventory) {
			require.Zero(t, inv.GPUs[0].MemoryMiB)
			// Named from the nearest GiB without the GPU's total.
			require.Equal(t, "1g.5gb", inv.GPUs[0].MIGDevices[0].Profile)
		}},
		{"SystemGetCudaDriverVersion", func(t *testing.T, inv *topology.Inventory) { require.Empty(t, inv.CUDADriverVersion) }},
		{"GetNvLinkState", func(t *testing.T, inv *topology.Inventory) {
			require.Empty(t, inv.GPUs[0].NVLinks)
			l, _ := inv.Link(0, 1)
			require.Equal(t, "PXB", l.Level)
		}},
		{"GetNvLinkRemotePciInfo", func(t *testing.T, inv *topology.Inventory) {
			require.True(t, inv.GPUs[0].NVLinks[0].Active)
			require.Empty(t, inv.GPUs[0].NVLinks[0].RemotePCIBusID)
			l, _ := inv.Link(0, 1)
			require.Equal(t, "PXB", l.Level)
		}},
		{"GetTopologyCommonAncestor", func(t *testing.T, inv *topology.Inventory) {
			l, _ := inv.Link(0, 1)
			require.Equal(t, "NV12", l.Level, "NVLinks still name the level")
		}},
		{"GetP2PStatus", func(t *testing.T, inv *topology.Inventory) {
			l, _ := inv.Link(0, 1)
			require.False(t, l.P2PRead.Known())
			require.False(t, l.P2PWrite.Known())
			require.Zero(t, l.NVLinks, "NVSwitch reachability unknown")
			require.Equal(t, "PXB", l.Level)
		}},
		{"MIG.GetAttributes", func(t *testing.T, inv *topology.Inventory) {
			m := inv.GPUs[0].MIGDevices[0]
			require.Zero(t, m.SMs)
			require.Equal(t, uint64(4864), m.MemoryMiB, "from the GI profile")
			require.Equal(t, "1g.5gb", m.Profile)
		}},
		{"GetGpuInstanceById", func(t *testing.T, inv *topology.Inventory) {
			m := inv.GPUs[0].MIGDevices[0]
			require.Equal(t, "1g.5gb", m.Profile, "from the device attributes")
			require.Equal(t, 14, m.SMs)
			require.Nil(t, m.Placement)
			require.Nil(t, m.P2PSupported)
		}},
		{"GetMaxMigDeviceCount", func(t *testing.T, inv *topology.Inventory) {
			require.Equal(t, topology.ModeEnabled, inv.GPUs[0].MIGCurrent)
			require.Empty(t, inv.GPUs[0].MIGDevices)
		}},
		{"MIG.GetGpuInstanceId", func(t *testing.T, inv *topology.Inventory) {
			m := inv.GPUs[0].MIGDevices[0]
			require.Equal(t, -1, m.GPUInstanceID)
			require.Equal(t, "1g.5gb", m.Profile)
		}},
	}
	for _, ret := range []nvml.Return{nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND} {
		for _, tt := range tests {
			t.Run(ret.Error()+"/"+tt.method, func(t *testing.T) {
				s := nvmltest.NewServer(t, nvmltest.DGXA100)
				s.CreateMIG(0, "1g.5gb", "3g.20gb")
				s.Fault(tt.method, ret)
				inv := mustDiscover(t, s)
				require.NoError(t, inv.Validate())
				tt.check(t, inv)
			})
		}
	}
	t.Run("GI lookups without permission", func(t *testing.T) {
		// Unprivileged containers lack the MIG monitor capability.
		for _, m := range []string{"GetGpuInstanceById", "GpuInstance.GetInfo", "GetGpuInstanceProfileInfo"} {
			s := nvmltest.NewServer(t, nvmltest.DGXH100)
			s.CreateMIG(0, "1g.10gb+me", "3g.40gb")
			s.Fault(m, nvml.ERROR_NO_PERMISSION)
			inv := mustDiscover(t, s)
			ms := inv.GPUs[0].MIGDevices
			require.Equal(t, "1g.10gb", ms[0].Profile, "%s: no +me without the profile", m)
			require.Equal(t, "3g.40gb", ms[1].Profile, m)
			require.Nil(t, ms[1].Placement, m)
		}
	})
}
