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
		out[i].NVSwitch = nvswitch(inv, d.GPU)
		out[i].NVLinkPeer = d.Kind != topology.KindMIG && nvlinkPeer(inv, d, ds)
	}
	return out
}

// nvswitch says whether g is on an NVSwitch fabric: what NVML's fabric
// state says where it reports one; otherwise no when g has no active
// NVLink and reaches every GPU it has a known link to over PCIe or the
// CPU (no NVSwitch joins it to them); nil when it cannot be told (NVLinks
// may run to a bridge or a switch, a GPU alone has no links to judge).
func nvswitch(inv *topology.Inventory, g *topology.GPU) *bool {
	if fb := g.Fabric; fb != nil && fb.State != "" {
		on := fb.Supported()
		return &on
	}
	if inv == nil {
		return nil
	}
	for _, l := range g.NVLinks {
		if l.Active {
			return nil
		}
	}
	known := 0
	for _, l := range inv.Links {
		if l.A != g.Index && l.B != g.Index {
			continue
		}
		if nvlink(l) {
			return nil
		}
		if l.Level != "" {
			known++
		}
	}
	if known == 0 {
		return nil
	}
	off := false
	return &off
}

func nvlink(l topology.Link) bool { return l.NVLinks > 0 || strings.HasPrefix(l.Level, "NV") }

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
		if l, ok := inv.Link(d.GPU.Index, o.GPU.Index); ok && nvlink(l) {
			return true
		}
	}
	return false
}
