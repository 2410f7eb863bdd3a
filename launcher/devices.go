package launcher

import (
	"strings"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// AllocatedDevices describes a rank's devices from their references alone
// (no inventory: launch --no-preflight), for the NPROC_EXCEEDS_DEVICES
// check. nil when the devices are unknown or "all" (the check is skipped);
// empty, not nil, when the rank has none.
func AllocatedDevices(a topology.Allocation) []verdict.DeviceSummary {
	if a.All {
		return nil
	}
	out := make([]verdict.DeviceSummary, 0, len(a.Refs))
	for _, r := range a.Refs {
		r = topology.StripSharing(r)
		kind := string(topology.KindGPU)
		if strings.HasPrefix(strings.ToUpper(r), "MIG-") || strings.Contains(r, ":") {
			kind = string(topology.KindMIG)
		}
		out = append(out, verdict.DeviceSummary{ID: r, Kind: kind, GPU: -1})
	}
	return out
}
