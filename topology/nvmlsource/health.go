//go:build linux && cgo

package nvmlsource

import (
	"encoding/hex"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/rankgate/rankgate/topology"
)

// discoverHealth reads what the GPU says about its own health and its
// NVLink fabric: five calls per GPU, each under the call deadline.
//
// A query the GPU or driver does not support is recorded as such, never a
// failure. GPU_IS_LOST and RESET_REQUIRED answers are the GPU's health,
// recorded for the rank rules (GPU_LOST, GPU_RESET_REQUIRED) instead of
// ending discovery: only a rank given that GPU fails. NO_PERMISSION leaves
// the field unknown. Other codes fail discovery as every other call does.
//
// The fabric is read with nvmlDeviceGetGpuFabricInfo, not its versioned
// form: go-nvml's GetGpuFabricInfoV returns a handler bound to the
// library's own device type, which no mock can stand in for, and the
// first version already carries the state, status, cluster UUID and
// clique ID the rules read (the versions add the health mask only).
func (s *Source) discoverHealth(c *caller, i int, dev nvml.Device, g *topology.GPU) error {
	h := &topology.Health{}
	known := false
	// answerHealth turns a completed call's code into (got a value, error).
	answerHealth := func(o op, query string, r nvml.Return) (bool, error) {
		switch {
		case r == nvml.SUCCESS:
			known = true
			return true, nil
		case unsupported(r):
			h.Unsupported = append(h.Unsupported, query)
			known = true
		case r == nvml.ERROR_GPU_IS_LOST:
			h.Lost, known = true, true
		case r == nvml.ERROR_RESET_REQUIRED:
			t := true
			h.ResetRequired, known = &t, true
		case r == nvml.ERROR_NO_PERMISSION:
		default:
			return false, classify(o, r)
		}
		return false, nil
	}

	o := gpuOp("nvmlDeviceGetRemappedRows", i)
	var pending, failure bool
	var r nvml.Return
	if err := c.do(o, c.timeout, func() { _, _, pending, failure, r = dev.GetRemappedRows() }); err != nil {
		return err
	}
	if ok, err := answerHealth(o, topology.QueryRemappedRows, r); err != nil {
		return err
	} else if ok {
		h.RemapPending, h.RemapFailure = &pending, &failure
	}

	o = gpuOp("nvmlDeviceGetTotalEccErrors", i)
	o.argName = "UNCORRECTED, VOLATILE"
	ecc, r, err := call0(c, o, func() (uint64, nvml.Return) {
		return dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	})
	if err != nil {
		return err
	}
	if ok, err := answerHealth(o, topology.QueryVolatileECC, r); err != nil {
		return err
	} else if ok {
		h.VolatileUncorrectedECC = &ecc
	}

	o = gpuOp("nvmlDeviceGetRetiredPagesPendingStatus", i)
	rp, r, err := call0(c, o, dev.GetRetiredPagesPendingStatus)
	if err != nil {
		return err
	}
	if ok, err := answerHealth(o, topology.QueryRetiredPages, r); err != nil {
		return err
	} else if ok {
		p := rp == nvml.FEATURE_ENABLED
		h.RetiredPagesPending = &p
	}

	o = gpuOp("nvmlDeviceGetGpuFabricInfo", i)
	fi, r, err := call0(c, o, dev.GetGpuFabricInfo)
	if err != nil {
		return err
	}
	if ok, err := answerHealth(o, topology.QueryFabric, r); err != nil {
		return err
	} else if ok {
		g.Fabric = fabric(fi)
	}

	o = gpuOp("nvmlDeviceGetCurrentClocksEventReasons", i)
	reasons, r, err := call0(c, o, dev.GetCurrentClocksEventReasons)
	if err != nil {
		return err
	}
	if ok, err := answerHealth(o, topology.QueryClocks, r); err != nil {
		return err
	} else if ok {
		h.Throttle = throttleReasons(reasons)
	}
	if known {
		g.Health = h
	}
	return nil
}

// fabric converts NVML's fabric info. A GPU whose driver answers that it
// has no fabric (state not supported) says so: it is on no NVSwitch
// fabric, which NCCL's NVLS needs; an unknown state is nil.
func fabric(fi nvml.GpuFabricInfo) *topology.Fabric {
	f := &topology.Fabric{}
	switch fi.State {
	case nvml.GPU_FABRIC_STATE_NOT_SUPPORTED:
		return &topology.Fabric{State: topology.FabricNotSupported}
	case nvml.GPU_FABRIC_STATE_NOT_STARTED:
		f.State = topology.FabricNotStarted
	case nvml.GPU_FABRIC_STATE_IN_PROGRESS:
		f.State = topology.FabricInProgress
	case nvml.GPU_FABRIC_STATE_COMPLETED:
		f.State = topology.FabricCompleted
	default:
		return nil
	}
	// Status is an nvmlReturn_t, meaningful once registration completed.
	if f.State == topology.FabricCompleted {
		if st := nvml.Return(fi.Status); st == nvml.SUCCESS {
			f.Status = topology.FabricStatusSuccess
		} else {
			f.Status = st.Error()
		}
	}
	u := fi.ClusterUuid
	f.ClusterUUID = topology.NormalizeClusterUUID(hex.EncodeToString(u[0:4]) + "-" + hex.EncodeToString(u[4:6]) + "-" +
		hex.EncodeToString(u[6:8]) + "-" + hex.EncodeToString(u[8:10]) + "-" + hex.EncodeToString(u[10:16]))
	clique := fi.CliqueId
	f.CliqueID = &clique
	return f
}

// throttleReasons names the judged slowdown reasons set in an NVML
// clocks-event mask.
func throttleReasons(mask uint64) []string {
	var out []string
	for _, x := range []struct {
		bit  uint64
		name string
	}{
		{nvml.ClocksThrottleReasonHwSlowdown, topology.ThrottleHWSlowdown},
		{nvml.ClocksThrottleReasonHwThermalSlowdown, topology.ThrottleHWThermalSlowdown},
		{nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, topology.ThrottleHWPowerBrake},
		{nvml.ClocksEventReasonSwThermalSlowdown, topology.ThrottleSWThermalSlowdown},
	} {
		if mask&x.bit != 0 {
			out = append(out, x.name)
		}
	}
	return out
}
