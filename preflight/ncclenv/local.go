package ncclenv

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// LocalRank is one process tree's view for ScopeLocal: its environment,
// the devices its preflight report judged (with what the report says of
// their NVSwitch fabric and NVLinks), and the node's network when read
// (nil: unknown). Rank is 0: the local rank set is one NCCL host.
func LocalRank(env *Env, r verdict.Report, nw *Net) Rank {
	return Rank{Rank: 0, Name: "this rank", Env: env, Net: nw, DevicesKnown: true, Replicas: 1, Devices: ReportDevices(r)}
}

// ReportDevices are the devices of a rank's preflight report as the rules
// see them: MIG or full GPU, the physical GPU, its NVLink domain, whether
// it is on an NVSwitch fabric and has an NVLink to another GPU of the rank.
func ReportDevices(r verdict.Report) []Device {
	out := make([]Device, 0, len(r.Devices))
	for _, d := range r.Devices {
		out = append(out, Device{
			ID: d.ID, MIG: d.Kind == string(topology.KindMIG), GPUUUID: d.GPUUUID,
			FabricCluster: d.FabricCluster, FabricClique: d.FabricClique,
			NVSwitch: d.NVSwitch, NVLinkPeers: d.NVLinkPeer,
		})
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
