package nvmltest

import (
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// gpuHealth is what one GPU answers to the health queries.
type gpuHealth struct {
	remapPending, remapFailure bool
	volatileUncorrected        uint64
	retiredPending             bool
	clocks                     uint64
	persistenceOff             bool
	fabric                     *nvml.GpuFabricInfo // nil: NOT_SUPPORTED
}

// fabricKinds are the kinds whose driver reports NVLink fabric
// registration (Hopper and later with NVSwitches); the A100 kinds answer
// NOT_SUPPORTED, as their drivers do.
func fabricKind(kind string) bool {
	return kind == DGXH100 || kind == DGXH200 || kind == DGXB200
}

// initHealth sets every GPU healthy: no remaps, no volatile uncorrected
// errors, idle clocks, persistence on and, on fabric kinds, a completed
// registration in no multi-node cluster (zero cluster UUID, clique 0).
func (s *Server) initHealth() {
	s.health = make([]gpuHealth, len(s.mock.Devices))
	for i := range s.health {
		s.health[i].clocks = nvml.ClocksEventReasonGpuIdle
		if fabricKind(s.kind) && s.cfg.nvlink == nvswitch {
			s.health[i].fabric = &nvml.GpuFabricInfo{State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: uint32(nvml.SUCCESS)}
		}
	}
	if s.cfg.cluster != "" {
		for i := range s.health {
			s.health[i].fabric = &nvml.GpuFabricInfo{State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: uint32(nvml.SUCCESS),
				ClusterUuid: parseUUID(s.cfg.cluster), CliqueId: s.cfg.clique}
		}
	}
}

// WithFabricCluster makes every GPU report a completed registration in a
// multi-node NVLink cluster (a GB200 NVL72-class rack) with that cluster
// UUID and clique ID. Two servers with one cluster and different cliques
// are two nodes that cannot reach each other over NVLink.
func WithFabricCluster(clusterUUID string, clique uint32) Option {
	return func(c *config) { c.cluster, c.clique = clusterUUID, clique }
}

func parseUUID(u string) [16]uint8 {
	var out [16]uint8
	h := strings.ReplaceAll(u, "-", "")
	for k := 0; k < 16 && 2*k+1 < len(h); k++ {
		out[k] = hexByte(h[2*k])<<4 | hexByte(h[2*k+1])
	}
	return out
}

func hexByte(c byte) uint8 {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10
	}
	return 0
}

func (s *Server) withHealth(gpu int, f func(h *gpuHealth)) {
	s.GPU(gpu)
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.health[gpu])
}

func (s *Server) readHealth(gpu int) gpuHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.health[gpu]
	if h.fabric != nil {
		f := *h.fabric
		h.fabric = &f
	}
	return h
}

// SetRemap makes GPU gpu report a row remap pending (waiting for a reset)
// and, or, a remap failure.
func (s *Server) SetRemap(gpu int, pending, failure bool) {
	s.withHealth(gpu, func(h *gpuHealth) { h.remapPending, h.remapFailure = pending, failure })
}

// SetVolatileUncorrectedECC sets GPU gpu's count of uncorrectable ECC
// errors since its last reset.
func (s *Server) SetVolatileUncorrectedECC(gpu int, n uint64) {
	s.withHealth(gpu, func(h *gpuHealth) { h.volatileUncorrected = n })
}

// SetRetiredPagesPending makes GPU gpu report pages waiting for
// retirement. The server's GPUs retire rows, not pages: the query answers
// NOT_SUPPORTED until this is called.
func (s *Server) SetRetiredPagesPending(gpu int, pending bool) {
	s.withHealth(gpu, func(h *gpuHealth) { h.retiredPending = pending })
	s.mu.Lock()
	s.pagesSupported = true
	s.mu.Unlock()
}

// SetClocksEventReasons sets GPU gpu's active clocks event reasons
// (nvml.ClocksEventReason* / ClocksThrottleReason* bits).
func (s *Server) SetClocksEventReasons(gpu int, mask uint64) {
	s.withHealth(gpu, func(h *gpuHealth) { h.clocks = mask })
}

// SetPersistence turns GPU gpu's persistence mode on or off.
func (s *Server) SetPersistence(gpu int, on bool) {
	s.withHealth(gpu, func(h *gpuHealth) { h.persistenceOff = !on })
}

// SetFabric makes GPU gpu report this fabric registration: state
// (nvml.GPU_FABRIC_STATE_*) and status (an nvml.Return). The cluster and
// clique stay what they were.
func (s *Server) SetFabric(gpu int, state uint8, status nvml.Return) {
	s.withHealth(gpu, func(h *gpuHealth) {
		if h.fabric == nil {
			h.fabric = &nvml.GpuFabricInfo{}
		}
		h.fabric.State, h.fabric.Status = state, uint32(status)
	})
}

// extendHealth sets the health queries on GPU i.
func (s *Server) extendHealth(i int, d *server.Device) {
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) {
		h := s.readHealth(i)
		unc := 0
		if h.remapPending || h.remapFailure {
			unc = 1
		}
		return 0, unc, h.remapPending, h.remapFailure, nvml.SUCCESS
	}
	d.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
		if t != nvml.MEMORY_ERROR_TYPE_UNCORRECTED || c != nvml.VOLATILE_ECC {
			return 0, nvml.SUCCESS
		}
		return s.readHealth(i).volatileUncorrected, nvml.SUCCESS
	}
	d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) {
		s.mu.Lock()
		supported := s.pagesSupported
		s.mu.Unlock()
		if !supported {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		if s.readHealth(i).retiredPending {
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_DISABLED, nvml.SUCCESS
	}
	d.GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) {
		h := s.readHealth(i)
		if h.fabric == nil {
			return nvml.GpuFabricInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return *h.fabric, nvml.SUCCESS
	}
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return s.readHealth(i).clocks, nvml.SUCCESS }
	d.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) {
		if s.readHealth(i).persistenceOff {
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
}
