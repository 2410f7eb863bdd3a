package ncclenv

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
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
// (nil); an unreadable RDMA device list leaves the HCAs unknown
// (HCAsKnown false). The error says what could not be read.
func ReadLocalNet(sysfs string) (*Net, error) {
	return readNet(sysfs, net.Interfaces)
}

// readNet is ReadLocalNet with the interface list injected.
func readNet(sysfs string, interfaces func() ([]net.Interface, error)) (*Net, error) {
	ifs, err := interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing network interfaces: %w", err)
	}
	n := &Net{Interfaces: make([]string, 0, len(ifs))}
	for _, i := range ifs {
		n.Interfaces = append(n.Interfaces, i.Name)
	}
	sort.Strings(n.Interfaces)
	dir := filepath.Join(sysfs, "class", "infiniband")
	entries, err := os.ReadDir(dir)
	switch {
	case err == nil:
		for _, e := range entries {
			n.HCAs = append(n.HCAs, e.Name())
		}
		sort.Strings(n.HCAs)
		n.HCAsKnown = true
	case errors.Is(err, fs.ErrNotExist):
		n.HCAsKnown = true // no RDMA stack: no HCAs
	default:
		return n, fmt.Errorf("listing RDMA devices in %s: %w", dir, err)
	}
	return n, nil
}
