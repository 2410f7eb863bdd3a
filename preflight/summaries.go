package preflight

import (
	"strings"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// summaries describe the rank's devices for its report, with the facts of
// their GPUs that the gang verdict's NCCL settings rules need: the NVLink
// domain, whether the GPU is on an NVSwitch fabric, and whether it has an
// NVLink to another full GPU of the rank.
func summaries(inv *topology.Inventory, ds []topology.Device) []verdict.DeviceSummary {
	out := make([]verdict.DeviceSummary, len(ds))
	for i, d := range ds {
		out[i] = verdict.DeviceSummary{ID: d.ID(), Kind: string(d.Kind), GPU: d.GPU.Index, GPUUUID: d.GPU.UUID,
			Profile: d.Profile(), SMs: d.SMs(), MemoryMiB: d.MemoryMiB()}
		fb := d.GPU.Fabric
		if fb.MultiNode() {
			out[i].FabricCluster, out[i].FabricClique = fb.ClusterUUID, fb.CliqueID
		}
		if fb != nil && fb.State != "" {
			on := fb.Supported()
			out[i].NVSwitch = &on
		}
		out[i].NVLinkPeer = d.Kind != topology.KindMIG && nvlinkPeer(inv, d, ds)
	}
	return out
}

// nvlinkPeer: d's GPU has an NVLink to the GPU of another full-GPU device
// of ds.
func nvlinkPeer(inv *topology.Inventory, d topology.Device, ds []topology.Device) bool {
	for _, o := range ds {
		if o.Kind == topology.KindMIG || o.GPU.Index == d.GPU.Index {
			continue
		}
		if inv == nil {
			return false
		}
		if l, ok := inv.Link(d.GPU.Index, o.GPU.Index); ok && (l.NVLinks > 0 || strings.HasPrefix(l.Level, "NV")) {
			return true
		}
	}
	return false
}
