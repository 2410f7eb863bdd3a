package nvmltest

import (
	"sort"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// ciProfileBySlices maps a compute instance's slice count to its profile
// index.
var ciProfileBySlices = map[int]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	6: nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
	8: nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE,
}

// CreateMIG enables MIG on GPU gpu and creates, for each profile, a GPU
// instance with one compute instance, through the mock's own GI/CI API
// (CreateGpuInstanceWithPlacement at the first free placement, then
// CreateComputeInstance). A profile "3g.40gb" gets a compute instance
// spanning its GPU instance; "1c.3g.40gb" a one-slice compute instance in
// a new 3g.40gb GPU instance. It returns the MIG devices' UUIDs in order.
// A layout the GPU cannot hold fails the test.
func (s *Server) CreateMIG(gpu int, profiles ...string) []string {
	s.t.Helper()
	var uuids []string
	for _, p := range profiles {
		uuids = append(uuids, s.CreateGI(gpu, giName(p), p)...)
	}
	return uuids
}

// CreateGI creates one GPU instance of profile giProfile on GPU gpu and a
// compute instance in it for each of ciProfiles ("1c.3g.40gb", ...; none
// means one spanning the GPU instance). It returns the MIG UUIDs.
func (s *Server) CreateGI(gpu int, giProfile string, ciProfiles ...string) []string {
	s.t.Helper()
	d := s.GPU(gpu)
	idx := s.profileIndex(giProfile)
	if cur, _, _ := d.GetMigMode(); cur != nvml.DEVICE_MIG_ENABLE {
		if r, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); r != nvml.SUCCESS {
			s.t.Fatalf("nvmltest: GPU %d: enabling MIG: %v", gpu, r)
		}
	}
	info, r := d.GetGpuInstanceProfileInfo(idx)
	if r != nvml.SUCCESS {
		s.t.Fatalf("nvmltest: GPU %d: profile %s: %v", gpu, giProfile, r)
	}
	existing := gpuInstances(d)
	slices, same := int(info.SliceCount), 0
	used := map[uint32]bool{}
	for _, gi := range existing {
		p := d.Config.MIGProfiles.GpuInstanceProfiles[int(gi.Info.ProfileId)]
		slices += int(p.SliceCount)
		if int(gi.Info.ProfileId) == idx {
			same++
		}
		for x := gi.Info.Placement.Start; x < gi.Info.Placement.Start+gi.Info.Placement.Size; x++ {
			used[x] = true
		}
	}
	if same >= int(info.InstanceCount) {
		s.t.Fatalf("nvmltest: GPU %d: %s allows %d instances", gpu, giProfile, info.InstanceCount)
	}
	if slices > s.maxSlices() {
		s.t.Fatalf("nvmltest: GPU %d: adding %s needs %d of %d compute slices", gpu, giProfile, slices, s.maxSlices())
	}
	places, r := d.GetGpuInstancePossiblePlacements(&info)
	if r != nvml.SUCCESS {
		s.t.Fatalf("nvmltest: GPU %d: placements of %s: %v", gpu, giProfile, r)
	}
	var place *nvml.GpuInstancePlacement
	for k := range places {
		free := true
		for x := places[k].Start; x < places[k].Start+places[k].Size; x++ {
			free = free && !used[x]
		}
		if free {
			place = &places[k]
			break
		}
	}
	if place == nil {
		s.t.Fatalf("nvmltest: GPU %d: no free placement for %s", gpu, giProfile)
	}
	created, r := d.CreateGpuInstanceWithPlacement(&info, place)
	if r != nvml.SUCCESS {
		s.t.Fatalf("nvmltest: GPU %d: creating %s: %v", gpu, giProfile, r)
	}
	gi := created.(*server.GpuInstance)
	s.hookGI(gpu, gi)

	if len(ciProfiles) == 0 {
		ciProfiles = []string{giProfile}
	}
	var uuids []string
	ciUsed := 0
	for _, cp := range ciProfiles {
		if giName(cp) != giProfile {
			s.t.Fatalf("nvmltest: compute instance %s does not belong in a %s GPU instance", cp, giProfile)
		}
		n := ciSlices(cp, int(info.SliceCount))
		ciUsed += n
		if ciUsed > int(info.SliceCount) {
			s.t.Fatalf("nvmltest: GPU %d: compute instances %v do not fit in %s", gpu, ciProfiles, giProfile)
		}
		ciIdx, ok := ciProfileBySlices[n]
		if !ok {
			s.t.Fatalf("nvmltest: no compute-instance profile of %d slices", n)
		}
		ciInfo, r := gi.GetComputeInstanceProfileInfo(ciIdx, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if r != nvml.SUCCESS {
			s.t.Fatalf("nvmltest: GPU %d: compute profile %s: %v", gpu, cp, r)
		}
		ci, r := gi.CreateComputeInstance(&ciInfo)
		if r != nvml.SUCCESS {
			s.t.Fatalf("nvmltest: GPU %d: creating compute instance %s: %v", gpu, cp, r)
		}
		sci := ci.(*server.ComputeInstance)
		s.hookCI(gpu, sci)
		uuids = append(uuids, s.migHandle(gpu, d, gi, sci).uuid)
	}
	return uuids
}

// MIGName is the profile name nvidia-smi gives the MIG device with that
// UUID, from the kind's own table: what discovery should report.
func (s *Server) MIGName(uuid string) string {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.migs {
		if m.uuid == uuid {
			return m.name
		}
	}
	s.t.Fatalf("nvmltest: no MIG device %s", uuid)
	return ""
}

func (s *Server) profileIndex(name string) int {
	s.t.Helper()
	for idx, n := range s.spec.profiles {
		if n == name {
			return idx
		}
	}
	s.t.Fatalf("nvmltest: %s has no GPU-instance profile %q (have %s)", s.kind, name, strings.Join(s.Profiles(), ", "))
	return 0
}

func (s *Server) ciProfile(giIdx, slices int) nvml.ComputeInstanceProfileInfo {
	s.t.Helper()
	ci, ok := s.spec.gpu.MIGProfiles.ComputeInstanceProfiles[giIdx][ciProfileBySlices[slices]]
	if !ok {
		s.t.Fatalf("nvmltest: %s: no %d-slice compute instance in GPU-instance profile %d", s.kind, slices, giIdx)
	}
	return ci
}

// giName strips a compute-instance prefix: "1c.3g.40gb" -> "3g.40gb".
func giName(p string) string {
	if c, rest, ok := strings.Cut(p, "c."); ok {
		if _, err := strconv.Atoi(c); err == nil {
			return rest
		}
	}
	return p
}

// ciSlices is the compute slices of "1c.3g.40gb" (1), or of a GPU-instance
// name (all of them).
func ciSlices(p string, giSlices int) int {
	if c, _, ok := strings.Cut(p, "c."); ok {
		if n, err := strconv.Atoi(c); err == nil {
			return n
		}
	}
	return giSlices
}

type migDevice struct {
	dev  *mock.Device
	uuid string
	name string
}

type migRef struct {
	gi *server.GpuInstance
	ci *server.ComputeInstance
}

func gpuInstances(d *server.Device) []*server.GpuInstance {
	d.RLock()
	out := make([]*server.GpuInstance, 0, len(d.GpuInstances))
	for gi := range d.GpuInstances {
		out = append(out, gi)
	}
	d.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Info.Id < out[j].Info.Id })
	return out
}

func computeInstances(gi *server.GpuInstance) []*server.ComputeInstance {
	gi.RLock()
	out := make([]*server.ComputeInstance, 0, len(gi.ComputeInstances))
	for ci := range gi.ComputeInstances {
		out = append(out, ci)
	}
	gi.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Info.Id < out[j].Info.Id })
	return out
}

// migList is a GPU's MIG devices in handle order: by GPU instance ID, then
// compute instance ID.
func migList(d *server.Device) []migRef {
	var out []migRef
	for _, gi := range gpuInstances(d) {
		for _, ci := range computeInstances(gi) {
			out = append(out, migRef{gi, ci})
		}
	}
	return out
}

// migHandle returns the one MIG device handle of a compute instance,
// making it on first use.
func (s *Server) migHandle(gpu int, d *server.Device, gi *server.GpuInstance, ci *server.ComputeInstance) *migDevice {
	s.mu.Lock()
	m, ok := s.migs[ci]
	s.mu.Unlock()
	if ok {
		return m
	}
	giIdx, ciIdx := int(gi.Info.ProfileId), int(ci.Info.ProfileId)
	giP := d.Config.MIGProfiles.GpuInstanceProfiles[giIdx]
	ciP := d.Config.MIGProfiles.ComputeInstanceProfiles[giIdx][ciIdx]
	name := s.spec.profiles[giIdx]
	if ciP.SliceCount < giP.SliceCount {
		name = strconv.Itoa(int(ciP.SliceCount)) + "c." + name
	}
	m = &migDevice{
		dev:  &mock.Device{},
		uuid: "MIG-" + uuidFor(s.kind, 1, uint64(gpu), uint64(gi.Info.Id), uint64(ci.Info.Id)),
		name: name,
	}
	md := m.dev
	md.GetUUIDFunc = func() (string, nvml.Return) { return m.uuid, nvml.SUCCESS }
	md.GetNameFunc = func() (string, nvml.Return) { return d.Config.Name + " MIG " + name, nvml.SUCCESS }
	md.GetGpuInstanceIdFunc = func() (int, nvml.Return) { return int(gi.Info.Id), nvml.SUCCESS }
	md.GetComputeInstanceIdFunc = func() (int, nvml.Return) { return int(ci.Info.Id), nvml.SUCCESS }
	md.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
		return nvml.DeviceAttributes{
			MultiprocessorCount:       ciP.MultiprocessorCount,
			SharedCopyEngineCount:     giP.CopyEngineCount,
			SharedDecoderCount:        giP.DecoderCount,
			SharedEncoderCount:        giP.EncoderCount,
			SharedJpegCount:           giP.JpegCount,
			SharedOfaCount:            giP.OfaCount,
			GpuInstanceSliceCount:     giP.SliceCount,
			ComputeInstanceSliceCount: ciP.SliceCount,
			MemorySizeMB:              giP.MemorySizeMB,
		}, nvml.SUCCESS
	}
	md.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		return nvml.Memory{Total: giP.MemorySizeMB << 20, Free: giP.MemorySizeMB << 20}, nvml.SUCCESS
	}
	md.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return true, nvml.SUCCESS }
	md.GetDeviceHandleFromMigDeviceHandleFunc = func() (nvml.Device, nvml.Return) { return d, nvml.SUCCESS }
	h := s.hookFor("MIG", gpu)
	hook0(h("GetUUID"), &md.GetUUIDFunc)
	hook0(h("GetName"), &md.GetNameFunc)
	hook0(h("GetGpuInstanceId"), &md.GetGpuInstanceIdFunc)
	hook0(h("GetComputeInstanceId"), &md.GetComputeInstanceIdFunc)
	hook0(h("GetAttributes"), &md.GetAttributesFunc)
	hook0(h("GetMemoryInfo"), &md.GetMemoryInfoFunc)
	hook0(h("IsMigDeviceHandle"), &md.IsMigDeviceHandleFunc)
	hook0(h("GetDeviceHandleFromMigDeviceHandle"), &md.GetDeviceHandleFromMigDeviceHandleFunc)

	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.migs[ci]; ok {
		return prev // made concurrently
	}
	s.migs[ci] = m
	return m
}
