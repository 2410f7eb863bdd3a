package ncclenv

import (
	"net"
	"os"
	"sort"
	"strings"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// LocalRank is one process tree's view for ScopeLocal: its environment,
// the devices its preflight report judged (with what the node's inventory
// says of their NVSwitch fabric and NVLinks), and the node's network when
// read (nil: unknown). Rank is 0: the local rank set is one NCCL host.
func LocalRank(env *Env, r verdict.Report, inv *topology.Inventory, nw *Net) Rank {
	out := Rank{Rank: 0, Name: "this rank", Env: env, Net: nw, DevicesKnown: true, Replicas: 1}
	for _, d := range r.Devices {
		dev := Device{ID: d.ID, MIG: d.Kind == string(topology.KindMIG), GPUUUID: d.GPUUUID, FabricCluster: d.FabricCluster, FabricClique: d.FabricClique}
		if inv != nil {
			if g, ok := inv.GPUByIndex(d.GPU); ok && g.Fabric != nil && g.Fabric.State != "" {
				on := g.Fabric.Supported()
				dev.NVSwitch = &on
			}
		}
		out.Devices = append(out.Devices, dev)
	}
	if inv == nil {
		return out
	}
	for i := range out.Devices {
		for j := range out.Devices {
			a, b := r.Devices[i], r.Devices[j]
			if i == j || out.Devices[i].MIG || out.Devices[j].MIG || a.GPU == b.GPU {
				continue
			}
			if l, ok := inv.Link(a.GPU, b.GPU); ok && (l.NVLinks > 0 || strings.HasPrefix(l.Level, "NV")) {
				out.Devices[i].NVLinkPeers = true
			}
		}
	}
	return out
}

// ReadLocalNet reads this host's network as NCCL would see it: IP
// interface names, and RDMA devices under sysfs/class/infiniband (sysfs
// is normally /sys). An unreadable interface list is an unknown network
// (nil).
func ReadLocalNet(sysfs string) *Net {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	n := &Net{}
	for _, i := range ifs {
		n.Interfaces = append(n.Interfaces, i.Name)
	}
	sort.Strings(n.Interfaces)
	entries, err := os.ReadDir(sysfs + "/class/infiniband")
	switch {
	case err == nil:
		for _, e := range entries {
			n.HCAs = append(n.HCAs, e.Name())
		}
		sort.Strings(n.HCAs)
		n.HCAsKnown = true
	case os.IsNotExist(err):
		n.HCAsKnown = true // no RDMA stack: no HCAs
	}
	return n
}
