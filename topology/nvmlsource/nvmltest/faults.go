package nvmltest

import (
	"sort"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Method names for Fault and Hang are go-nvml's method names. A plain name
// ("GetUUID") matches that method on every object that has it; a name
// qualified by the object kind ("MIG.GetUUID", "Device.GetUUID",
// "GpuInstance.GetInfo") matches one kind only. Kinds: Interface (the
// library), Device (a full GPU), MIG (a MIG device handle), GpuInstance,
// ComputeInstance.
var methods = map[string][]string{
	"Interface": {"Init", "Shutdown", "SystemGetDriverVersion", "SystemGetNVMLVersion",
		"SystemGetCudaDriverVersion", "DeviceGetCount", "DeviceGetHandleByIndex",
		"DeviceGetHandleByUUID", "DeviceGetHandleByPciBusId"},
	"Device": {"GetIndex", "GetMinorNumber", "GetUUID", "GetName", "GetBrand", "GetArchitecture",
		"GetCudaComputeCapability", "GetMemoryInfo", "GetPciInfo", "GetMigMode", "SetMigMode",
		"GetGpuInstanceProfileInfo", "GetGpuInstancePossiblePlacements", "CreateGpuInstance",
		"CreateGpuInstanceWithPlacement", "GetGpuInstances", "GetGpuInstanceById",
		"GetMaxMigDeviceCount", "GetMigDeviceHandleByIndex", "GetAttributes", "GetNumaNodeId",
		"GetMemoryAffinity", "GetPersistenceMode", "GetNvLinkState", "GetNvLinkRemotePciInfo",
		"GetNvLinkRemoteDeviceType", "GetTopologyCommonAncestor", "GetP2PStatus",
		"IsMigDeviceHandle", "GetDeviceHandleFromMigDeviceHandle", "GetRemappedRows",
		"GetTotalEccErrors", "GetRetiredPagesPendingStatus", "GetGpuFabricInfo",
		"GetCurrentClocksEventReasons"},
	"MIG": {"GetUUID", "GetName", "GetGpuInstanceId", "GetComputeInstanceId", "GetAttributes",
		"GetMemoryInfo", "IsMigDeviceHandle", "GetDeviceHandleFromMigDeviceHandle"},
	"GpuInstance": {"GetInfo", "GetComputeInstanceProfileInfo", "GetComputeInstancePossiblePlacements",
		"CreateComputeInstance", "GetComputeInstances", "GetComputeInstanceById", "Destroy"},
	"ComputeInstance": {"GetInfo", "Destroy"},
}

// Methods lists the names Fault and Hang accept, qualified and plain.
func Methods() []string {
	seen := map[string]bool{}
	for kind, ms := range methods {
		for _, m := range ms {
			seen[m] = true
			seen[kind+"."+m] = true
		}
	}
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

func knownMethod(name string) bool {
	kind, m, qualified := strings.Cut(name, ".")
	for k, ms := range methods {
		if qualified && k != kind {
			continue
		}
		if !qualified {
			m = name
		}
		for _, x := range ms {
			if x == m {
				return true
			}
		}
	}
	return false
}

type faultKey struct {
	method string
	gpu    int // -1: any
}

type hang struct {
	ch   chan struct{}
	once sync.Once
}

// Fault makes every later call of method answer ret (with zero values),
// until ClearFaults. nvml.SUCCESS removes the fault.
func (s *Server) Fault(method string, ret nvml.Return) { s.fault(method, -1, ret) }

// FaultGPU is Fault for the objects of one GPU only: the GPU, its MIG
// devices and its GPU and compute instances.
func (s *Server) FaultGPU(method string, gpu int, ret nvml.Return) {
	s.GPU(gpu)
	s.fault(method, gpu, ret)
}

func (s *Server) fault(method string, gpu int, ret nvml.Return) {
	s.t.Helper()
	if !knownMethod(method) {
		s.t.Fatalf("nvmltest: no method %q to fault (see nvmltest.Methods)", method)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ret == nvml.SUCCESS {
		delete(s.faults, faultKey{method, gpu})
	} else {
		s.faults[faultKey{method, gpu}] = ret
	}
	s.armed.Store(true)
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.faults)
}

// Hang makes every later call of method block until release is called (or
// the test ends), then proceed normally. release may be called many times.
func (s *Server) Hang(method string) (release func()) {
	s.t.Helper()
	if !knownMethod(method) {
		s.t.Fatalf("nvmltest: no method %q to hang (see nvmltest.Methods)", method)
	}
	h := &hang{ch: make(chan struct{})}
	s.mu.Lock()
	s.hangs[method] = h
	s.mu.Unlock()
	s.armed.Store(true)
	release = func() {
		h.once.Do(func() {
			s.mu.Lock()
			if s.hangs[method] == h {
				delete(s.hangs, method)
			}
			s.mu.Unlock()
			close(h.ch)
		})
	}
	s.t.Cleanup(release)
	return release
}

// hook is one method of one object.
type hook struct {
	s    *Server
	kind string
	name string
	gpu  int
}

// before counts the call, waits out a hang and returns the fault, if any.
func (h hook) before() (nvml.Return, bool) {
	h.s.calls.Add(1)
	if !h.s.armed.Load() {
		return 0, false
	}
	q := h.kind + "." + h.name
	h.s.mu.Lock()
	hg := h.s.hangs[q]
	if hg == nil {
		hg = h.s.hangs[h.name]
	}
	h.s.mu.Unlock()
	if hg != nil {
		<-hg.ch
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	for _, k := range []faultKey{{q, h.gpu}, {h.name, h.gpu}, {q, -1}, {h.name, -1}} {
		if k.gpu == -1 || h.gpu >= 0 {
			if r, ok := h.s.faults[k]; ok {
				return r, true
			}
		}
	}
	return 0, false
}

func (s *Server) hookFor(kind string, gpu int) func(string) hook {
	return func(name string) hook {
		if !knownMethod(kind + "." + name) {
			panic("nvmltest: hook for unlisted method " + kind + "." + name)
		}
		return hook{s: s, kind: kind, name: name, gpu: gpu}
	}
}

func hookR(h hook, f *func() nvml.Return) {
	orig := *f
	if orig == nil {
		return
	}
	*f = func() nvml.Return {
		if r, ok := h.before(); ok {
			return r
		}
		return orig()
	}
}

func hook0[A any](h hook, f *func() (A, nvml.Return)) {
	orig := *f
	if orig == nil {
		return
	}
	*f = func() (A, nvml.Return) {
		if r, ok := h.before(); ok {
			var a A
			return a, r
		}
		return orig()
	}
}

func hook02[A, B any](h hook, f *func() (A, B, nvml.Return)) {
	orig := *f
	if orig == nil {
		return
	}
	*f = func() (A, B, nvml.Return) {
		if r, ok := h.before(); ok {
			var a A
			var b B
			return a, b, r
		}
		return orig()
	}
}

func hook1[X, A any](h hook, f *func(X) (A, nvml.Return)) {
	orig := *f
	if orig == nil {
		return
	}
	*f = func(x X) (A, nvml.Return) {
		if r, ok := h.before(); ok {
			var a A
			return a, r
		}
		return orig(x)
	}
}

func hook2[X, Y, A any](h hook, f *func(X, Y) (A, nvml.Return)) {
	orig := *f
	if orig == nil {
		return
	}
	*f = func(x X, y Y) (A, nvml.Return) {
		if r, ok := h.before(); ok {
			var a A
			return a, r
		}
		return orig(x, y)
	}
}

func (s *Server) hookInterface() {
	m := s.mock
	h := s.hookFor("Interface", -1)
	hookR(h("Init"), &m.InitFunc)
	hookR(h("Shutdown"), &m.ShutdownFunc)
	hook0(h("SystemGetDriverVersion"), &m.SystemGetDriverVersionFunc)
	hook0(h("SystemGetNVMLVersion"), &m.SystemGetNVMLVersionFunc)
	hook0(h("SystemGetCudaDriverVersion"), &m.SystemGetCudaDriverVersionFunc)
	hook0(h("DeviceGetCount"), &m.DeviceGetCountFunc)
	hook1(h("DeviceGetHandleByIndex"), &m.DeviceGetHandleByIndexFunc)
	hook1(h("DeviceGetHandleByUUID"), &m.DeviceGetHandleByUUIDFunc)
	hook1(h("DeviceGetHandleByPciBusId"), &m.DeviceGetHandleByPciBusIdFunc)
}

func (s *Server) hookDevice(i int, d *server.Device) {
	h := s.hookFor("Device", i)
	hook0(h("GetIndex"), &d.GetIndexFunc)
	hook0(h("GetMinorNumber"), &d.GetMinorNumberFunc)
	hook0(h("GetUUID"), &d.GetUUIDFunc)
	hook0(h("GetName"), &d.GetNameFunc)
	hook0(h("GetBrand"), &d.GetBrandFunc)
	hook0(h("GetArchitecture"), &d.GetArchitectureFunc)
	hook02(h("GetCudaComputeCapability"), &d.GetCudaComputeCapabilityFunc)
	hook0(h("GetMemoryInfo"), &d.GetMemoryInfoFunc)
	hook0(h("GetPciInfo"), &d.GetPciInfoFunc)
	hook02(h("GetMigMode"), &d.GetMigModeFunc)
	hook1(h("SetMigMode"), &d.SetMigModeFunc)
	hook1(h("GetGpuInstanceProfileInfo"), &d.GetGpuInstanceProfileInfoFunc)
	hook1(h("GetGpuInstancePossiblePlacements"), &d.GetGpuInstancePossiblePlacementsFunc)
	hook1(h("CreateGpuInstance"), &d.CreateGpuInstanceFunc)
	hook2(h("CreateGpuInstanceWithPlacement"), &d.CreateGpuInstanceWithPlacementFunc)
	hook1(h("GetGpuInstances"), &d.GetGpuInstancesFunc)
	hook1(h("GetGpuInstanceById"), &d.GetGpuInstanceByIdFunc)
	hook0(h("GetMaxMigDeviceCount"), &d.GetMaxMigDeviceCountFunc)
	hook1(h("GetMigDeviceHandleByIndex"), &d.GetMigDeviceHandleByIndexFunc)
	hook0(h("GetAttributes"), &d.GetAttributesFunc)
	hook0(h("GetNumaNodeId"), &d.GetNumaNodeIdFunc)
	hook2(h("GetMemoryAffinity"), &d.GetMemoryAffinityFunc)
	hook0(h("GetPersistenceMode"), &d.GetPersistenceModeFunc)
	hook1(h("GetNvLinkState"), &d.GetNvLinkStateFunc)
	hook1(h("GetNvLinkRemotePciInfo"), &d.GetNvLinkRemotePciInfoFunc)
	hook1(h("GetNvLinkRemoteDeviceType"), &d.GetNvLinkRemoteDeviceTypeFunc)
	hook1(h("GetTopologyCommonAncestor"), &d.GetTopologyCommonAncestorFunc)
	hook2(h("GetP2PStatus"), &d.GetP2PStatusFunc)
	hook0(h("IsMigDeviceHandle"), &d.IsMigDeviceHandleFunc)
	hook0(h("GetDeviceHandleFromMigDeviceHandle"), &d.GetDeviceHandleFromMigDeviceHandleFunc)
	hookRemap(h("GetRemappedRows"), &d.GetRemappedRowsFunc)
	hook2(h("GetTotalEccErrors"), &d.GetTotalEccErrorsFunc)
	hook0(h("GetRetiredPagesPendingStatus"), &d.GetRetiredPagesPendingStatusFunc)
	hook0(h("GetGpuFabricInfo"), &d.GetGpuFabricInfoFunc)
	hook0(h("GetCurrentClocksEventReasons"), &d.GetCurrentClocksEventReasonsFunc)
}

// hookRemap hooks GetRemappedRows, the one method of four results.
func hookRemap(h hook, f *func() (int, int, bool, bool, nvml.Return)) {
	orig := *f
	if orig == nil {
		return
	}
	*f = func() (int, int, bool, bool, nvml.Return) {
		if r, ok := h.before(); ok {
			return 0, 0, false, false, r
		}
		return orig()
	}
}

// hookGI hooks a GPU instance once, whoever created it.
func (s *Server) hookGI(gpu int, gi *server.GpuInstance) {
	s.mu.Lock()
	done := s.hooked[gi]
	s.hooked[gi] = true
	s.mu.Unlock()
	if done {
		return
	}
	gi.GetComputeInstanceByIdFunc = func(id int) (nvml.ComputeInstance, nvml.Return) {
		for _, ci := range computeInstances(gi) {
			if int(ci.Info.Id) == id {
				s.hookCI(gpu, ci)
				return ci, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	if s.cfg.driverIDs {
		info := gi.GetInfoFunc
		gi.GetInfoFunc = func() (nvml.GpuInstanceInfo, nvml.Return) {
			i, r := info()
			i.ProfileId = driverProfileID[int(i.ProfileId)]
			return i, r
		}
	}
	h := s.hookFor("GpuInstance", gpu)
	hook0(h("GetInfo"), &gi.GetInfoFunc)
	hook2(h("GetComputeInstanceProfileInfo"), &gi.GetComputeInstanceProfileInfoFunc)
	hook1(h("GetComputeInstancePossiblePlacements"), &gi.GetComputeInstancePossiblePlacementsFunc)
	hook1(h("CreateComputeInstance"), &gi.CreateComputeInstanceFunc)
	hook1(h("GetComputeInstances"), &gi.GetComputeInstancesFunc)
	hook1(h("GetComputeInstanceById"), &gi.GetComputeInstanceByIdFunc)
	hookR(h("Destroy"), &gi.DestroyFunc)
}

func (s *Server) hookCI(gpu int, ci *server.ComputeInstance) {
	s.mu.Lock()
	done := s.hooked[ci]
	s.hooked[ci] = true
	s.mu.Unlock()
	if done {
		return
	}
	h := s.hookFor("ComputeInstance", gpu)
	hook0(h("GetInfo"), &ci.GetInfoFunc)
	hookR(h("Destroy"), &ci.DestroyFunc)
}
