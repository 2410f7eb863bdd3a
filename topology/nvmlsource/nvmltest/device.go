package nvmltest

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// nvswitchDeviceID is the PCI device ID the remote end of an NVSwitch link
// reports (third-generation NVSwitch).
const nvswitchDeviceID = 0x1af110de

// extendDevice sets the methods go-nvml's mock device lacks, or answers
// too simply, on GPU i.
func (s *Server) extendDevice(i int, d *server.Device) {
	pci := pciInfo(s.gpuBus(i), d.Config.PciDeviceId)
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return pci, nvml.SUCCESS }
	d.GetMigModeFunc = func() (int, int, nvml.Return) {
		d.RLock()
		cur := d.MigMode
		d.RUnlock()
		s.mu.Lock()
		pend, ok := s.pending[i]
		s.mu.Unlock()
		if !ok {
			pend = cur
		}
		return cur, pend, nvml.SUCCESS
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) {
		return s.maxSlices(), nvml.SUCCESS
	}
	d.GetMigDeviceHandleByIndexFunc = func(idx int) (nvml.Device, nvml.Return) {
		if idx < 0 || idx >= s.maxSlices() {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		list := migList(d)
		if idx >= len(list) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return s.migHandle(i, d, list[idx].gi, list[idx].ci).dev, nvml.SUCCESS
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		for _, gi := range gpuInstances(d) {
			if int(gi.Info.Id) == id {
				s.hookGI(i, gi)
				return gi, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	d.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
		if !s.cfg.fullAttrs {
			// NVML: "This API currently only supports MIG device handles."
			return nvml.DeviceAttributes{}, nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.DeviceAttributes{
			MultiprocessorCount: uint32(s.spec.sms),
			MemorySizeMB:        d.Config.MemoryMB,
		}, nvml.SUCCESS
	}
	// A DGX is a PCIe host: the GPU is no NUMA node of its own (nvidia-smi's
	// "GPU NUMA ID N/A"), but it is close to one CPU socket's memory.
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	d.GetMemoryAffinityFunc = func(nodes int, scope nvml.AffinityScope) ([]uint, nvml.Return) {
		if nodes <= 0 {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		set := make([]uint, (nodes+63)/64)
		set[0] = 1 << s.numa(i)
		return set, nvml.SUCCESS
	}
	s.extendHealth(i, d)
	d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
		if link < 0 || link >= nvml.NVLINK_MAX_LINKS {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		if link >= len(s.links(i)) {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkRemotePciInfoFunc = func(link int) (nvml.PciInfo, nvml.Return) {
		ls := s.links(i)
		if link < 0 || link >= len(ls) {
			return nvml.PciInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		if ls[link].gpu >= 0 {
			peer := s.devs[ls[link].gpu]
			return pciInfo(s.gpuBus(ls[link].gpu), peer.Config.PciDeviceId), nvml.SUCCESS
		}
		return pciInfo(ls[link].bus, nvswitchDeviceID), nvml.SUCCESS
	}
	d.GetNvLinkRemoteDeviceTypeFunc = func(link int) (nvml.IntNvLinkDeviceType, nvml.Return) {
		ls := s.links(i)
		if link < 0 || link >= len(ls) {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		if ls[link].gpu >= 0 {
			return nvml.NVLINK_DEVICE_TYPE_GPU, nvml.SUCCESS
		}
		return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
	}
	d.GetTopologyCommonAncestorFunc = func(peer nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		j, ok := s.indexOf(peer)
		if !ok {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return s.ancestor(i, j), nvml.SUCCESS
	}
	d.GetP2PStatusFunc = func(peer nvml.Device, caps nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
		j, ok := s.indexOf(peer)
		if !ok || j == i {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return s.p2pStatus(i, j, caps), nvml.SUCCESS
	}
	if s.cfg.driverIDs {
		s.useDriverProfileIDs(d)
	}
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }
	d.GetDeviceHandleFromMigDeviceHandleFunc = func() (nvml.Device, nvml.Return) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
}

// maxSlices is the number of compute slices, which bounds MIG devices.
func (s *Server) maxSlices() int {
	n := 0
	for _, p := range s.spec.gpu.MIGProfiles.GpuInstanceProfiles {
		n = max(n, int(p.SliceCount))
	}
	return n
}

func (s *Server) indexOf(d nvml.Device) (int, bool) {
	sd, ok := d.(*server.Device)
	if !ok {
		return 0, false
	}
	for i, x := range s.devs {
		if x == sd {
			return i, true
		}
	}
	return 0, false
}

// numa puts the first half of the GPUs on node 0, the rest on node 1.
func (s *Server) numa(i int) int { return i * 2 / len(s.devs) }

// ancestor models a DGX: GPUs in pairs behind one PCIe switch, four per
// CPU socket.
func (s *Server) ancestor(i, j int) nvml.GpuTopologyLevel {
	switch {
	case i == j:
		return nvml.TOPOLOGY_INTERNAL
	case i/2 == j/2:
		return nvml.TOPOLOGY_MULTIPLE
	case s.numa(i) == s.numa(j):
		return nvml.TOPOLOGY_NODE
	}
	return nvml.TOPOLOGY_SYSTEM
}

type linkEnd struct {
	gpu int  // peer GPU, or -1 for an NVSwitch
	bus byte // the switch's bus
}

// links lists GPU i's NVLinks and what each ends on.
func (s *Server) links(i int) []linkEnd { return s.linkTable[i] }

func (s *Server) buildLinks(i int) []linkEnd {
	switch s.cfg.nvlink {
	case noNVLink:
		return nil
	case bridged:
		var out []linkEnd
		for _, b := range s.cfg.bridges {
			peer := -1
			switch i {
			case b[0]:
				peer = b[1]
			case b[1]:
				peer = b[0]
			}
			for range b[2] {
				if peer >= 0 {
					out = append(out, linkEnd{gpu: peer})
				}
			}
		}
		return out
	}
	out := make([]linkEnd, s.spec.nvlinks)
	for l := range out {
		// Spread the links over the switches the way DGX boards do.
		out[l] = linkEnd{gpu: -1, bus: byte(0xf0 + l*s.spec.switches/s.spec.nvlinks)}
	}
	return out
}

func (s *Server) nvlinked(i, j int) bool {
	switch s.cfg.nvlink {
	case nvswitch:
		return true
	case bridged:
		for _, l := range s.links(i) {
			if l.gpu == j {
				return true
			}
		}
	}
	return false
}

func (s *Server) p2pStatus(i, j int, caps nvml.GpuP2PCapsIndex) nvml.GpuP2PStatus {
	a, b := min(i, j), max(i, j)
	s.mu.Lock()
	st, ok := s.p2p[p2pKey{a, b, caps}]
	s.mu.Unlock()
	if ok {
		return st
	}
	linked := s.nvlinked(i, j)
	if caps == nvml.P2P_CAPS_INDEX_NVLINK {
		if linked {
			return nvml.P2P_STATUS_OK
		}
		return nvml.P2P_STATUS_NOT_SUPPORTED
	}
	if !linked && s.ancestor(i, j) == nvml.TOPOLOGY_SYSTEM {
		// PCIe P2P across CPU sockets is refused by most chipsets.
		return nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED
	}
	return nvml.P2P_STATUS_OK
}

// useDriverProfileIDs translates profile IDs at the device's API: out to
// driver IDs, back in to the indices the mock uses inside.
func (s *Server) useDriverProfileIDs(d *server.Device) {
	info := d.GetGpuInstanceProfileInfoFunc
	d.GetGpuInstanceProfileInfoFunc = func(idx int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		p, r := info(idx)
		if r == nvml.SUCCESS {
			p.Id = driverProfileID[idx]
		}
		return p, r
	}
	places := d.GetGpuInstancePossiblePlacementsFunc
	d.GetGpuInstancePossiblePlacementsFunc = func(p *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
		return places(toIndex(p))
	}
	create := d.CreateGpuInstanceFunc
	d.CreateGpuInstanceFunc = func(p *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
		return create(toIndex(p))
	}
	createAt := d.CreateGpuInstanceWithPlacementFunc
	d.CreateGpuInstanceWithPlacementFunc = func(p *nvml.GpuInstanceProfileInfo, at *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		return createAt(toIndex(p), at)
	}
	list := d.GetGpuInstancesFunc
	d.GetGpuInstancesFunc = func(p *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
		return list(toIndex(p))
	}
}

// toIndex copies a profile info with its driver ID turned back into the
// mock's index.
func toIndex(p *nvml.GpuInstanceProfileInfo) *nvml.GpuInstanceProfileInfo {
	q := *p
	for idx, id := range driverProfileID {
		if id == p.Id {
			q.Id = uint32(idx)
		}
	}
	return &q
}
