//go:build linux && cgo

package nvmlsource

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/rankgate/rankgate/topology"
)

// Calls made, for n GPUs, m MIG devices and n(n-1)/2 pairs (the benchmark
// and TestCallsAreLinear hold it to this):
//
//	node:      Init, driver, CUDA and NVML versions, device count, Shutdown
//	per GPU:   handle, UUID, name, PCI info, memory, attributes, compute
//	           capability, memory affinity, MIG mode, persistence; five
//	           health reads (health.go); NVLink
//	           state for each link plus one (the answer that ends the list)
//	           and the remote PCI info of each active link
//	MIG GPU:   max MIG device count, one handle probe per slot, and at most
//	           one GPU-instance profile probe per profile index
//	           (nvml.GPU_INSTANCE_PROFILE_COUNT)
//	per MIG:   UUID, GI ID, CI ID, attributes, and per GPU instance: handle
//	           by ID and its info
//	per pair:  common ancestor, P2P read, P2P write, and P2P-over-NVLink when
//	           both GPUs have links to NVSwitches
func (s *Source) discover(c *caller) (*topology.Inventory, error) {
	inv := &topology.Inventory{Source: "nvml"}

	var err error
	if inv.DriverVersion, _, err = get0(c, sysOp("nvmlSystemGetDriverVersion"), s.lib.SystemGetDriverVersion); err != nil {
		return nil, err
	}
	cuda, ok, err := get0(c, sysOp("nvmlSystemGetCudaDriverVersion"), s.lib.SystemGetCudaDriverVersion)
	if err != nil {
		return nil, err
	}
	if ok && cuda > 0 {
		// 12040 -> "12.4", as nvidia-smi prints "CUDA Version".
		inv.CUDADriverVersion = strconv.Itoa(cuda/1000) + "." + strconv.Itoa(cuda%1000/10)
	}
	if inv.NVMLVersion, _, err = get0(c, sysOp("nvmlSystemGetNVMLVersion"), s.lib.SystemGetNVMLVersion); err != nil {
		return nil, err
	}
	n, _, err := get0(c, sysOp("nvmlDeviceGetCount"), s.lib.DeviceGetCount)
	if err != nil {
		return nil, err
	}

	inv.GPUs = make([]topology.GPU, n)
	gpus := make([]gpuState, n)
	for i := range n {
		if err := s.discoverGPU(c, i, &inv.GPUs[i], &gpus[i]); err != nil {
			return nil, err
		}
	}
	if err := s.discoverPairs(c, inv, gpus); err != nil {
		return nil, err
	}
	inv.Normalize()
	if err := inv.Validate(); err != nil {
		return nil, fmt.Errorf("nvml reported an inconsistent inventory: %w", err)
	}
	return inv, nil
}

// gpuState is what pair discovery needs from each GPU.
type gpuState struct {
	dev nvml.Device
	bus string // busKey of the GPU's PCI bus ID
	// remotes holds the busKey of the peer of each active NVLink.
	remotes []string
}

func (s *Source) discoverGPU(c *caller, i int, g *topology.GPU, st *gpuState) error {
	log := s.opts.log
	g.Index = i

	o := gpuOp("nvmlDeviceGetHandleByIndex", i)
	dev, r, err := call1(c, o, s.lib.DeviceGetHandleByIndex, i)
	if err != nil {
		return err
	}
	if r != nvml.SUCCESS {
		return classify(o, r)
	}
	st.dev = dev

	if g.UUID, _, err = get0(c, gpuOp("nvmlDeviceGetUUID", i), dev.GetUUID); err != nil {
		return err
	}
	if g.Name, _, err = get0(c, gpuOp("nvmlDeviceGetName", i), dev.GetName); err != nil {
		return err
	}
	pci, ok, err := get0(c, gpuOp("nvmlDeviceGetPciInfo", i), dev.GetPciInfo)
	if err != nil {
		return err
	}
	if ok {
		g.PCIBusID = cstr(pci.BusId[:])
		st.bus = busKey(g.PCIBusID)
	}
	mem, ok, err := get0(c, gpuOp("nvmlDeviceGetMemoryInfo", i), dev.GetMemoryInfo)
	if err != nil {
		return err
	}
	if ok {
		g.MemoryMiB = mem.Total >> 20
	}
	// NVML documents device attributes for MIG handles only; a full GPU
	// answers NOT_SUPPORTED on today's drivers and its SMs stay unknown.
	attrs, ok, err := get0(c, gpuOp("nvmlDeviceGetAttributes", i), dev.GetAttributes)
	if err != nil {
		return err
	}
	if ok {
		g.SMs = int(attrs.MultiprocessorCount)
	} else {
		log.Debugf("nvml: GPU %d: device attributes not supported; SM count unknown", i)
	}
	major, minor, ok, err := get02(c, gpuOp("nvmlDeviceGetCudaComputeCapability", i), dev.GetCudaComputeCapability)
	if err != nil {
		return err
	}
	if ok {
		g.ComputeCapability = strconv.Itoa(major) + "." + strconv.Itoa(minor)
	}
	if err := s.numaNode(c, i, dev, g); err != nil {
		return err
	}
	cur, pend, ok, err := get02(c, gpuOp("nvmlDeviceGetMigMode", i), dev.GetMigMode)
	if err != nil {
		return err
	}
	if ok {
		g.MIGCurrent, g.MIGPending = migMode(cur), migMode(pend)
	} else {
		g.MIGCurrent, g.MIGPending = topology.ModeUnsupported, topology.ModeUnsupported
	}
	pm, ok, err := get0(c, gpuOp("nvmlDeviceGetPersistenceMode", i), dev.GetPersistenceMode)
	if err != nil {
		return err
	}
	if ok {
		on := pm == nvml.FEATURE_ENABLED
		g.Persistence = &on
	}
	if err := s.discoverHealth(c, i, dev, g); err != nil {
		return err
	}
	if err := s.discoverNVLinks(c, i, dev, g, st); err != nil {
		return err
	}
	if g.MIGCurrent == topology.ModeEnabled {
		if err := s.discoverMIG(c, i, dev, g); err != nil {
			return err
		}
	}
	log.Debugf("nvml: GPU %d %s %s: MIG %s, %d MIG devices, %d NVLinks", i, g.UUID, g.Name, g.MIGCurrent, len(g.MIGDevices), len(st.remotes))
	return nil
}

// numaNode reads the CPU NUMA node closest to the GPU, what `nvidia-smi topo
// -m` prints as "NUMA Affinity": the GPU's memory affinity at node scope.
// (nvmlDeviceGetNumaNodeId answers a different question, the NUMA node of
// the GPU's own memory on coherent systems such as Grace Hopper, and is
// NOT_SUPPORTED on PCIe hosts: nvidia-smi's "GPU NUMA ID N/A".) A GPU close
// to several nodes, or to none, leaves NUMANode nil.
func (s *Source) numaNode(c *caller, i int, dev nvml.Device, g *topology.GPU) error {
	const maxNodes = 64
	set, ok, err := get2(c, gpuOp("nvmlDeviceGetMemoryAffinity", i), dev.GetMemoryAffinity, maxNodes, nvml.AffinityScope(nvml.AFFINITY_SCOPE_NODE))
	if err != nil || !ok {
		return err
	}
	node, count := -1, 0
	for w, word := range set {
		for word != 0 {
			b := bits.TrailingZeros(uint(word))
			node = w*bits.UintSize + b
			count++
			word &^= 1 << b
		}
	}
	if count == 1 {
		g.NUMANode = &node
	}
	return nil
}

func migMode(m int) topology.MIGMode {
	if m == nvml.DEVICE_MIG_ENABLE {
		return topology.ModeEnabled
	}
	return topology.ModeDisabled
}

// discoverNVLinks reads links 0, 1, ... until the driver says the GPU has no
// such link (NOT_SUPPORTED or INVALID_ARGUMENT) or NVLINK_MAX_LINKS.
func (s *Source) discoverNVLinks(c *caller, i int, dev nvml.Device, g *topology.GPU, st *gpuState) error {
	for l := range nvml.NVLINK_MAX_LINKS {
		o := op{fn: "nvmlDeviceGetNvLinkState", gpu: i, mig: -1, peer: -1, arg: l, argName: "link"}
		state, r, err := call1(c, o, dev.GetNvLinkState, l)
		if err != nil {
			return err
		}
		if r == nvml.ERROR_INVALID_ARGUMENT || unsupported(r) {
			break
		}
		if r != nvml.SUCCESS {
			return classify(o, r)
		}
		link := topology.NVLink{Link: l, Active: state == nvml.FEATURE_ENABLED}
		if link.Active {
			o.fn = "nvmlDeviceGetNvLinkRemotePciInfo"
			pci, ok, err := get1(c, o, dev.GetNvLinkRemotePciInfo, l)
			if err != nil {
				return err
			}
			if ok {
				link.RemotePCIBusID = cstr(pci.BusId[:])
				st.remotes = append(st.remotes, busKey(link.RemotePCIBusID))
			}
		}
		g.NVLinks = append(g.NVLinks, link)
	}
	return nil
}

// giFacts is what a GPU instance tells about its MIG devices.
type giFacts struct {
	known     bool
	profile   nvml.GpuInstanceProfileInfo
	index     int // the profile's index (nvml.GPU_INSTANCE_PROFILE_*)
	placement nvml.GpuInstancePlacement
}

// profileTable maps a GPU's instance-profile IDs to their info. NVML's
// GpuInstanceInfo.ProfileId is the profile's ID (nvidia-smi's "ID" column,
// 19 for the A100's 1g.5gb), not the index GetGpuInstanceProfileInfo takes,
// so indices are probed lazily, each at most once per GPU, until the ID
// turns up.
type profileTable struct {
	byID map[uint32]int // profile ID -> index
	info [nvml.GPU_INSTANCE_PROFILE_COUNT]nvml.GpuInstanceProfileInfo
	next int
}

func (s *Source) discoverMIG(c *caller, i int, dev nvml.Device, g *topology.GPU) error {
	log := s.opts.log
	max, ok, err := get0(c, gpuOp("nvmlDeviceGetMaxMigDeviceCount", i), dev.GetMaxMigDeviceCount)
	if err != nil {
		return err
	}
	if !ok {
		log.Debugf("nvml: GPU %d: MIG enabled but the MIG device count is not supported", i)
		return nil
	}
	total := g.MemoryMiB << 20
	gis := map[int]*giFacts{}
	profiles := &profileTable{byID: map[uint32]int{}}
	for j := range max {
		o := op{fn: "nvmlDeviceGetMigDeviceHandleByIndex", gpu: i, mig: -1, peer: -1, arg: j, argName: "index"}
		h, r, err := call1(c, o, dev.GetMigDeviceHandleByIndex, j)
		if err != nil {
			return err
		}
		if r == nvml.ERROR_NOT_FOUND {
			continue // no MIG device in this slot
		}
		if r == nvml.ERROR_INVALID_ARGUMENT || unsupported(r) {
			break
		}
		if r != nvml.SUCCESS {
			return classify(o, r)
		}
		// The index is the device's place in the handle order, which is
		// nvidia-smi's "MIG ... Device N" numbering.
		m := topology.MIGDevice{Index: len(g.MIGDevices), GPUInstanceID: -1, ComputeInstanceID: -1}
		mo := func(fn string) op { return op{fn: fn, gpu: i, mig: m.Index, peer: -1, arg: -1} }
		if m.UUID, _, err = get0(c, mo("nvmlDeviceGetUUID"), h.GetUUID); err != nil {
			return err
		}
		gi, ok, err := get0(c, mo("nvmlDeviceGetGpuInstanceId"), h.GetGpuInstanceId)
		if err != nil {
			return err
		}
		if ok {
			m.GPUInstanceID = gi
		}
		ci, ok, err := get0(c, mo("nvmlDeviceGetComputeInstanceId"), h.GetComputeInstanceId)
		if err != nil {
			return err
		}
		if ok {
			m.ComputeInstanceID = ci
		}
		attrs, haveAttrs, err := get0(c, mo("nvmlDeviceGetAttributes"), h.GetAttributes)
		if err != nil {
			return err
		}
		var f *giFacts
		if m.GPUInstanceID >= 0 {
			if f, err = s.gpuInstance(c, i, m.Index, dev, m.GPUInstanceID, gis, profiles); err != nil {
				return err
			}
		}
		giSlices, ciSlices, memMiB, profIdx := 0, 0, uint64(0), -1
		if haveAttrs {
			m.SMs = int(attrs.MultiprocessorCount)
			m.MemoryMiB = attrs.MemorySizeMB
			giSlices, ciSlices, memMiB = int(attrs.GpuInstanceSliceCount), int(attrs.ComputeInstanceSliceCount), attrs.MemorySizeMB
		}
		if f != nil && f.known {
			p2p := f.profile.IsP2pSupported != 0
			m.P2PSupported = &p2p
			m.Placement = &topology.Placement{Start: int(f.placement.Start), Size: int(f.placement.Size)}
			giSlices, memMiB, profIdx = int(f.profile.SliceCount), f.profile.MemorySizeMB, f.index
			if m.MemoryMiB == 0 {
				m.MemoryMiB = f.profile.MemorySizeMB
			}
		} else {
			log.Debugf("nvml: MIG %d:%d: GPU instance profile unknown; naming it from the device attributes", i, m.Index)
		}
		if giSlices > 0 && memMiB > 0 {
			m.Profile = profileName(giSlices, ciSlices, memMiB, total, profIdx)
		}
		g.MIGDevices = append(g.MIGDevices, m)
	}
	return nil
}

// gpuInstance reads (once per GPU instance) its profile and placement.
// These queries need the MIG monitor capability that unprivileged
// containers lack: NO_PERMISSION leaves them unknown instead of failing.
func (s *Source) gpuInstance(c *caller, i, mig int, dev nvml.Device, id int, cache map[int]*giFacts, profiles *profileTable) (*giFacts, error) {
	if f, ok := cache[id]; ok {
		return f, nil
	}
	f := &giFacts{}
	cache[id] = f
	o := op{fn: "nvmlDeviceGetGpuInstanceById", gpu: i, mig: mig, peer: -1, arg: id, argName: "GI"}
	gi, r, err := call1(c, o, dev.GetGpuInstanceById, id)
	if err != nil {
		return nil, err
	}
	if ok, err := softAnswer(o, r); !ok {
		return f, err
	}
	o = op{fn: "nvmlGpuInstanceGetInfo", gpu: i, mig: mig, peer: -1, arg: id, argName: "GI"}
	info, r, err := call0(c, o, gi.GetInfo)
	if err != nil {
		return nil, err
	}
	if ok, err := softAnswer(o, r); !ok {
		return f, err
	}
	idx, ok, err := s.profileIndex(c, i, mig, dev, info.ProfileId, profiles)
	if err != nil || !ok {
		return f, err
	}
	f.known, f.index, f.profile, f.placement = true, idx, profiles.info[idx], info.Placement
	return f, nil
}

func (s *Source) profileIndex(c *caller, i, mig int, dev nvml.Device, id uint32, t *profileTable) (int, bool, error) {
	if idx, ok := t.byID[id]; ok {
		return idx, true, nil
	}
	for t.next < nvml.GPU_INSTANCE_PROFILE_COUNT {
		p := t.next
		t.next++
		o := op{fn: "nvmlDeviceGetGpuInstanceProfileInfo", gpu: i, mig: mig, peer: -1, arg: p, argName: "profile"}
		info, r, err := call1(c, o, dev.GetGpuInstanceProfileInfo, p)
		if err != nil {
			return 0, false, err
		}
		if r == nvml.ERROR_INVALID_ARGUMENT {
			continue // a profile index this driver does not know
		}
		ok, err := softAnswer(o, r)
		if err != nil {
			return 0, false, err
		}
		if !ok {
			if r == nvml.ERROR_NO_PERMISSION {
				t.next = nvml.GPU_INSTANCE_PROFILE_COUNT
				return 0, false, nil
			}
			continue // not a profile of this GPU
		}
		t.info[p] = info
		t.byID[info.Id] = p
		if info.Id == id {
			return p, true, nil
		}
	}
	return 0, false, nil
}

// softAnswer is answer, with NO_PERMISSION meaning "unknown" too.
func softAnswer(o op, r nvml.Return) (bool, error) {
	if r == nvml.ERROR_NO_PERMISSION {
		return false, nil
	}
	return answer(o, r)
}

func (s *Source) discoverPairs(c *caller, inv *topology.Inventory, gpus []gpuState) error {
	n := len(gpus)
	busToGPU := make(map[string]int, n)
	for i, g := range gpus {
		if g.bus != "" {
			busToGPU[g.bus] = i
		}
	}
	// direct[a*n+b] counts a's links that end on GPU b. Links that end on
	// anything else that answered a bus ID count as NVSwitch links: NVML
	// can name the remote's type (nvmlDeviceGetNvLinkRemoteDeviceType),
	// but a P2P-over-NVLink query per pair settles reachability for less.
	direct := make([]int, n*n)
	switched := make([]int, n)
	for a, g := range gpus {
		for _, rb := range g.remotes {
			if b, ok := busToGPU[rb]; ok && b != a {
				direct[a*n+b]++
			} else if !ok && rb != "" {
				switched[a]++
			}
		}
	}
	inv.Links = make([]topology.Link, 0, n*(n-1)/2)
	for a := range n {
		for b := a + 1; b < n; b++ {
			da, db := gpus[a].dev, gpus[b].dev
			pop := func(fn, what string) op { return op{fn: fn, gpu: a, mig: -1, peer: b, arg: -1, argName: what} }
			l := topology.Link{A: a, B: b}
			lvl, ok, err := get1(c, pop("nvmlDeviceGetTopologyCommonAncestor", ""), da.GetTopologyCommonAncestor, db)
			if err != nil {
				return err
			}
			if ok {
				l.Level = levelName(lvl)
			}
			st, ok, err := get2(c, pop("nvmlDeviceGetP2PStatus", "READ"), da.GetP2PStatus, db, nvml.P2P_CAPS_INDEX_READ)
			if err != nil {
				return err
			}
			if ok {
				l.P2PRead = p2pStatus(st)
			}
			if st, ok, err = get2(c, pop("nvmlDeviceGetP2PStatus", "WRITE"), da.GetP2PStatus, db, nvml.P2P_CAPS_INDEX_WRITE); err != nil {
				return err
			}
			if ok {
				l.P2PWrite = p2pStatus(st)
			}
			nv := max(direct[a*n+b], direct[b*n+a])
			if switched[a] > 0 && switched[b] > 0 {
				st, ok, err := get2(c, pop("nvmlDeviceGetP2PStatus", "NVLINK"), da.GetP2PStatus, db, nvml.P2P_CAPS_INDEX_NVLINK)
				if err != nil {
					return err
				}
				// Through NVSwitches every link of the thinner side
				// carries the pair's traffic: nvidia-smi's NV18 on a DGX
				// H100, NV12 on a DGX A100.
				if ok && st == nvml.P2P_STATUS_OK {
					nv += min(switched[a], switched[b])
				}
			}
			if nv > 0 {
				l.NVLinks = nv
				l.Level = "NV" + strconv.Itoa(nv)
			}
			inv.Links = append(inv.Links, l)
		}
	}
	return nil
}

// levelName is the `nvidia-smi topo -m` legend for a common ancestor.
func levelName(l nvml.GpuTopologyLevel) string {
	switch l {
	case nvml.TOPOLOGY_INTERNAL, nvml.TOPOLOGY_SINGLE:
		// INTERNAL is two GPUs on one board, behind one bridge.
		return "PIX"
	case nvml.TOPOLOGY_MULTIPLE:
		return "PXB"
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return "PHB"
	case nvml.TOPOLOGY_NODE:
		return "NODE"
	case nvml.TOPOLOGY_SYSTEM:
		return "SYS"
	}
	return ""
}

func p2pStatus(s nvml.GpuP2PStatus) topology.P2PStatus {
	switch s {
	case nvml.P2P_STATUS_OK:
		return topology.P2POK
	case nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED:
		return topology.P2PChipsetNotSupported
	case nvml.P2P_STATUS_GPU_NOT_SUPPORTED:
		return topology.P2PGPUNotSupported
	case nvml.P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED:
		return topology.P2PTopologyNotSupported
	case nvml.P2P_STATUS_DISABLED_BY_REGKEY:
		return topology.P2PDisabledByRegkey
	case nvml.P2P_STATUS_NOT_SUPPORTED:
		return topology.P2PNotSupported
	}
	return topology.P2PUnknown
}

// busKey makes PCI bus IDs comparable: NVML writes the domain with 8 digits
// in some places and 4 in others, and hex digits in either case.
func busKey(id string) string {
	id = strings.ToLower(strings.TrimSpace(id))
	if id == "" {
		return ""
	}
	if strings.Count(id, ":") == 1 {
		return "0000:" + id
	}
	dom, rest, _ := strings.Cut(id, ":")
	d, err := strconv.ParseUint(dom, 16, 32)
	if err != nil {
		return id
	}
	var digits [8]byte
	hex := strconv.AppendUint(digits[:0], d, 16)
	var buf [32]byte
	b := buf[:0]
	for range 4 - len(hex) {
		b = append(b, '0')
	}
	b = append(append(append(b, hex...), ':'), rest...)
	return string(b)
}
