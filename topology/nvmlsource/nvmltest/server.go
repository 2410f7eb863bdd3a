// Package nvmltest builds NVML test servers for code that discovers GPUs
// through go-nvml's nvml.Interface: go-nvml's own DGX mock servers
// (dgxa100, dgxh100, dgxh200, dgxb200), extended with what they lack.
//
// The go-nvml mocks model GPUs, their MIG profile tables and GPU/compute
// instance creation, and panic on every other method. A Server fills in:
// PCI info with bus IDs, deterministic UUIDs, the pending MIG mode, MIG
// device handles (UUID, GI and CI IDs, attributes, name, memory) built from
// the instances created through the mock's own GI/CI API, GPU instance and
// compute instance lookup by ID, the maximum MIG device count, device
// attributes (NOT_SUPPORTED on full GPUs, as NVML documents), NUMA memory
// affinity, persistence mode, the health queries (remapped rows, volatile
// ECC, retired pages, NVLink fabric info, clocks event reasons; health.go,
// with setters that inject a remap pending, a fabric still registering or
// a multi-node cluster), NVLink state and remote PCI info (an
// NVSwitch fabric by default, bridges or none on request), the topology
// common ancestor and P2P status of GPU pairs. On top of that it injects
// faults (any method answers a chosen return code) and hangs (a method
// blocks until released), and counts calls.
package nvmltest

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Server kinds.
const (
	// DGXA100 is go-nvml's dgxa100: 8 A100-SXM4-40GB ("Mock NVIDIA
	// A100-SXM4-40GB"), driver 550.54.15, CUDA 12.4.
	DGXA100 = "dgxa100"
	// DGXA100_80GB is dgxa100 with A100-SXM4-80GB GPUs.
	DGXA100_80GB = "dgxa100-80gb"
	// DGXH100 is go-nvml's dgxh100: 8 H100 80GB HBM3.
	DGXH100 = "dgxh100"
	// DGXH200 is go-nvml's dgxh200: 8 H200 141GB HBM3e.
	DGXH200 = "dgxh200"
	// DGXB200 is go-nvml's dgxb200: 8 B200 180GB HBM3e, driver 560.28.03.
	DGXB200 = "dgxb200"
)

// Kinds lists the server kinds, the four go-nvml DGX servers first.
func Kinds() []string { return []string{DGXA100, DGXH100, DGXH200, DGXB200, DGXA100_80GB} }

type kindSpec struct {
	gpu   gpus.Config
	build func(...gpus.Config) *server.Server
	// profiles names the GPU-instance profiles by index, as nvidia-smi
	// does; the memory sizes follow the mock tables' own comments.
	profiles map[int]string
	// sms is the whole GPU's SM count (public specifications; the mock
	// tables carry only per-profile counts).
	sms      int
	nvlinks  int // per GPU
	switches int
	buses    []byte
}

var (
	a100Buses = []byte{0x07, 0x0f, 0x47, 0x4e, 0x87, 0x90, 0xb7, 0xbd}
	h100Buses = []byte{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}
)

func names(sizes ...string) map[int]string {
	// sizes: 1g, 1g+me, 1g (double memory), 2g, 3g, 4g, 7g
	return map[int]string{
		nvml.GPU_INSTANCE_PROFILE_1_SLICE:      "1g." + sizes[0],
		nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: "1g." + sizes[0] + "+me",
		nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: "1g." + sizes[1],
		nvml.GPU_INSTANCE_PROFILE_2_SLICE:      "2g." + sizes[1],
		nvml.GPU_INSTANCE_PROFILE_3_SLICE:      "3g." + sizes[2],
		nvml.GPU_INSTANCE_PROFILE_4_SLICE:      "4g." + sizes[2],
		nvml.GPU_INSTANCE_PROFILE_7_SLICE:      "7g." + sizes[3],
	}
}

var kinds = map[string]kindSpec{
	DGXA100:      {gpus.A100_SXM4_40GB, dgxa100.NewWithGPUs, names("5gb", "10gb", "20gb", "40gb"), 108, 12, 6, a100Buses},
	DGXA100_80GB: {gpus.A100_SXM4_80GB, dgxa100.NewWithGPUs, names("10gb", "20gb", "40gb", "80gb"), 108, 12, 6, a100Buses},
	DGXH100:      {gpus.H100_SXM5_80GB, dgxh100.NewWithGPUs, names("10gb", "20gb", "40gb", "80gb"), 132, 18, 4, h100Buses},
	DGXH200:      {gpus.H200_SXM5_141GB, dgxh200.NewWithGPUs, names("18gb", "35gb", "71gb", "141gb"), 132, 18, 4, h100Buses},
	DGXB200:      {gpus.B200_SXM5_180GB, dgxb200.NewWithGPUs, names("23gb", "45gb", "90gb", "180gb"), 148, 18, 2, h100Buses},
}

type nvlinkMode int

const (
	nvswitch nvlinkMode = iota
	noNVLink
	bridged
)

type config struct {
	gpus      int
	nvlink    nvlinkMode
	bridges   [][3]int
	fullAttrs bool
	driverIDs bool
	cluster   string
	clique    uint32
}

// Option changes the server a kind builds.
type Option func(*config)

// WithGPUCount sets the number of GPUs (default 8, at most 16).
func WithGPUCount(n int) Option { return func(c *config) { c.gpus = n } }

// WithoutNVLink builds a PCIe-only server: every GPU answers NOT_SUPPORTED
// for NVLink 0, P2P between GPUs on different NUMA nodes is CNS.
func WithoutNVLink() Option { return func(c *config) { c.nvlink = noNVLink } }

// WithNVLinkBridge replaces the NVSwitch fabric by direct links: GPUs a and
// b get n links to each other. Repeat it for more pairs; GPUs in no bridge
// have no NVLink.
func WithNVLinkBridge(a, b, n int) Option {
	return func(c *config) {
		c.nvlink = bridged
		c.bridges = append(c.bridges, [3]int{a, b, n})
	}
}

// WithFullGPUAttributes makes full GPUs answer GetAttributes with their SM
// count and memory, as a future driver might; today's answer NOT_SUPPORTED.
func WithFullGPUAttributes() Option { return func(c *config) { c.fullAttrs = true } }

// WithDriverProfileIDs makes GPU-instance profile IDs what drivers report
// (nvidia-smi mig -lgip's ID column: 19 for 1g.5gb, 9 for 3g.20gb, 0 for
// 7g.40gb) instead of the profile indices go-nvml's mocks reuse as IDs:
// GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE) answers Id
// 9, and a 3g GPU instance's GetInfo answers ProfileId 9. Code that mixes
// up profile IDs and indices passes on the plain mocks and fails here. The
// mock's own GI API (placements, creation, listing) accepts the IDs.
func WithDriverProfileIDs() Option { return func(c *config) { c.driverIDs = true } }

// driverProfileID maps profile indices to the IDs drivers give them
// (testdata/fixtures/nvidia-smi/30: A100-40GB `nvidia-smi mig -lgip`).
var driverProfileID = map[int]uint32{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE:      19,
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: 20,
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: 15,
	nvml.GPU_INSTANCE_PROFILE_2_SLICE:      14,
	nvml.GPU_INSTANCE_PROFILE_3_SLICE:      9,
	nvml.GPU_INSTANCE_PROFILE_4_SLICE:      5,
	nvml.GPU_INSTANCE_PROFILE_7_SLICE:      0,
}

// Server is an extended go-nvml mock server. Its methods fail the test on
// misuse; they are not safe to call concurrently with each other, but the
// NVML interface it serves is.
type Server struct {
	t    testing.TB
	kind string
	spec kindSpec
	cfg  config
	mock *server.Server
	devs []*server.Device
	// linkTable[i] is GPU i's NVLinks, fixed by the options.
	linkTable [][]linkEnd

	armed atomic.Bool // a fault or hang is set: hooks must look
	calls atomic.Int64

	mu      sync.Mutex
	faults  map[faultKey]nvml.Return
	hangs   map[string]*hang
	pending map[int]int
	p2p     map[p2pKey]nvml.GpuP2PStatus
	migs    map[*server.ComputeInstance]*migDevice
	hooked  map[any]bool
	// health is each GPU's answers to the health queries (health.go).
	health         []gpuHealth
	pagesSupported bool
}

type p2pKey struct {
	a, b int
	caps nvml.GpuP2PCapsIndex
}

// NewServer builds a server of the given kind (see Kinds).
func NewServer(t testing.TB, kind string, opts ...Option) *Server {
	t.Helper()
	spec, ok := kinds[kind]
	if !ok {
		t.Fatalf("nvmltest: unknown server kind %q (have %s)", kind, strings.Join(Kinds(), ", "))
	}
	cfg := config{gpus: 8}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.gpus < 1 || cfg.gpus > 16 {
		t.Fatalf("nvmltest: %d GPUs: want 1 to 16", cfg.gpus)
	}
	for _, b := range cfg.bridges {
		if b[0] == b[1] || b[0] < 0 || b[1] < 0 || b[0] >= cfg.gpus || b[1] >= cfg.gpus || b[2] <= 0 {
			t.Fatalf("nvmltest: NVLink bridge %v does not join two of the %d GPUs", b, cfg.gpus)
		}
	}
	s := &Server{
		t: t, kind: kind, spec: spec, cfg: cfg,
		mock:    spec.build(gpus.Multiple(cfg.gpus, spec.gpu)...),
		faults:  map[faultKey]nvml.Return{},
		hangs:   map[string]*hang{},
		pending: map[int]int{},
		p2p:     map[p2pKey]nvml.GpuP2PStatus{},
		migs:    map[*server.ComputeInstance]*migDevice{},
		hooked:  map[any]bool{},
	}
	s.mock.ErrorStringFunc = func(r nvml.Return) string { return r.Error() }
	s.hookInterface()
	s.initHealth()
	for i := range s.mock.Devices {
		s.linkTable = append(s.linkTable, s.buildLinks(i))
	}
	for i, d := range s.mock.Devices {
		sd := d.(*server.Device)
		s.devs = append(s.devs, sd)
		sd.UUID = "GPU-" + uuidFor(kind, 0, uint64(i))
		sd.PciBusID = busID(s.gpuBus(i))
		s.extendDevice(i, sd)
		s.hookDevice(i, sd)
	}
	return s
}

// Interface is the NVML library the server serves.
func (s *Server) Interface() nvml.Interface { return s.mock }

// Mock is the underlying go-nvml server, for tests that go further.
func (s *Server) Mock() *server.Server { return s.mock }

// Kind is the server's kind.
func (s *Server) Kind() string { return s.kind }

// GPUCount is the number of GPUs.
func (s *Server) GPUCount() int { return len(s.devs) }

// GPU returns the mock device of GPU i.
func (s *Server) GPU(i int) *server.Device {
	s.t.Helper()
	if i < 0 || i >= len(s.devs) {
		s.t.Fatalf("nvmltest: no GPU %d (have %d)", i, len(s.devs))
	}
	return s.devs[i]
}

// Profiles lists the kind's GPU-instance profile names, smallest first (by
// slices, then memory, then name).
func (s *Server) Profiles() []string {
	var out []string
	for _, n := range s.spec.profiles {
		out = append(out, n)
	}
	table := s.spec.gpu.MIGProfiles.GpuInstanceProfiles
	info := func(n string) nvml.GpuInstanceProfileInfo { return table[s.profileIndex(n)] }
	sort.Slice(out, func(i, j int) bool {
		a, b := info(out[i]), info(out[j])
		if a.SliceCount != b.SliceCount {
			return a.SliceCount < b.SliceCount
		}
		if a.MemorySizeMB != b.MemorySizeMB {
			return a.MemorySizeMB < b.MemorySizeMB
		}
		return out[i] < out[j]
	})
	return out
}

// ProfileName is the name of the GPU-instance profile with that index
// (nvml.GPU_INSTANCE_PROFILE_*), or "" when the kind has none.
func (s *Server) ProfileName(index int) string { return s.spec.profiles[index] }

// ProfileInfo returns the mock table's entry for a GPU-instance profile
// name ("3g.40gb"; a compute-instance prefix is ignored): what a test
// expects discovery to report.
func (s *Server) ProfileInfo(name string) nvml.GpuInstanceProfileInfo {
	s.t.Helper()
	idx := s.profileIndex(giName(name))
	return s.spec.gpu.MIGProfiles.GpuInstanceProfiles[idx]
}

// ComputeSMs returns the SM count of a MIG device of the named profile:
// the compute-instance profile's count from the mock tables.
func (s *Server) ComputeSMs(name string) int {
	s.t.Helper()
	idx := s.profileIndex(giName(name))
	gi := s.spec.gpu.MIGProfiles.GpuInstanceProfiles[idx]
	ci := s.ciProfile(idx, ciSlices(name, int(gi.SliceCount)))
	return int(ci.MultiprocessorCount)
}

// FullSMs is the whole GPU's SM count reported WithFullGPUAttributes.
func (s *Server) FullSMs() int { return s.spec.sms }

// SetMIGPending makes GPU gpu report a pending MIG mode (nvml.DEVICE_MIG_*)
// different from its current one, as after `nvidia-smi -mig 1` without a
// reset.
func (s *Server) SetMIGPending(gpu int, mode int) {
	s.GPU(gpu)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending[gpu] = mode
}

// SetP2P overrides the P2P status of a pair (either order) for one
// capability.
func (s *Server) SetP2P(a, b int, caps nvml.GpuP2PCapsIndex, st nvml.GpuP2PStatus) {
	s.GPU(a)
	s.GPU(b)
	if a > b {
		a, b = b, a
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.p2p[p2pKey{a, b, caps}] = st
}

// Calls is the number of calls made through the server's NVML objects,
// setup included: take differences.
func (s *Server) Calls() int64 { return s.calls.Load() }

func (s *Server) gpuBus(i int) byte {
	if i < len(s.spec.buses) {
		return s.spec.buses[i]
	}
	return byte(0x60 + i)
}

func busID(bus byte) string { return fmt.Sprintf("00000000:%02X:00.0", bus) }

func pciInfo(bus byte, deviceID uint32) nvml.PciInfo {
	p := nvml.PciInfo{Bus: uint32(bus), PciDeviceId: deviceID}
	putCString(p.BusId[:], busID(bus))
	putCString(p.BusIdLegacy[:], fmt.Sprintf("0000:%02X:00.0", bus))
	return p
}

func putCString(dst []int8, s string) {
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}

// uuidFor makes a stable UUID from the kind and some numbers, so that
// inventories compare across runs.
func uuidFor(kind string, parts ...uint64) string {
	h := fnv.New128a()
	h.Write([]byte(kind))
	for _, p := range parts {
		var b [8]byte
		for k := range b {
			b[k] = byte(p >> (8 * k))
		}
		h.Write(b[:])
	}
	u := h.Sum(nil)
	u[6] = u[6]&0x0f | 0x50 // version 5-like
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
