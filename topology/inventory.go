// Package topology is rankgate's model of one node's GPUs: full GPUs, their
// MIG instances and the links between GPUs, with the driver that serves them.
// It knows nothing of Kubernetes. Sources (NVML, nvidia-smi outputs,
// snapshots) fill an Inventory; preflight rules read it.
package topology

import (
	"fmt"
	"sort"
	"strings"

	"github.com/rankgate/rankgate/internal/fileformat"
)

// The inventory snapshot format (`rankgate inspect -o json`, read back by
// --inventory): its header is SnapshotAPIVersion and SnapshotKind. Decoding
// refuses any other apiVersion or kind; snapshots written before the header
// had a kind carry `"version": "rankgate.io/v1"` and still load.
const (
	SnapshotAPIVersion = "rankgate.io/v1"
	SnapshotKind       = "NodeInventory"
)

// SnapshotVersion is SnapshotAPIVersion under its earlier name, from when
// every rankgate file shared one version constant. New code names the
// format's own constant.
const SnapshotVersion = SnapshotAPIVersion

// SnapshotFormat is the snapshot's header as this build checks it.
var SnapshotFormat = fileformat.Format{
	APIVersion: SnapshotAPIVersion, Kind: SnapshotKind,
	LegacyVersion: "rankgate.io/v1",
}

// MIGMode is a GPU's MIG mode as NVML reports it.
type MIGMode string

// MIG modes. ModeUnknown means the source did not say (a pasted `nvidia-smi -L`
// for example); rules never fire on an unknown mode.
const (
	ModeUnknown  MIGMode = ""
	ModeEnabled  MIGMode = "enabled"
	ModeDisabled MIGMode = "disabled"
	// ModeUnsupported is a GPU that cannot do MIG at all (NVML NOT_SUPPORTED).
	ModeUnsupported MIGMode = "unsupported"
)

// P2PStatus is the answer to "can GPU A read from / write to GPU B directly".
// The values follow `nvidia-smi topo -p2p` legends.
type P2PStatus string

// P2P statuses.
const (
	P2PUnknown P2PStatus = ""
	P2POK      P2PStatus = "OK"
	// P2PChipsetNotSupported and the others below are the NVML
	// GPU_P2P_STATUS_* reasons that P2P is not available.
	P2PChipsetNotSupported  P2PStatus = "CNS"
	P2PGPUNotSupported      P2PStatus = "GNS"
	P2PTopologyNotSupported P2PStatus = "TNS"
	P2PDisabledByRegkey     P2PStatus = "DBR"
	P2PNotSupported         P2PStatus = "NS"
)

// Supported reports whether the status means P2P works.
func (s P2PStatus) Supported() bool { return s == P2POK }

// Known reports whether the source said anything about P2P.
func (s P2PStatus) Known() bool { return s != P2PUnknown }

// Inventory is everything rankgate knows about one node's GPUs.
type Inventory struct {
	// APIVersion and Kind are the snapshot header (SnapshotAPIVersion,
	// SnapshotKind); Normalize sets them.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Source says where the facts came from: "nvml", "nvidia-smi" or
	// "snapshot", with detail after a colon (file names, for example).
	Source   string `json:"source,omitempty"`
	Hostname string `json:"hostname,omitempty"`
	// DriverVersion is the kernel driver version, e.g. "570.133.20".
	DriverVersion string `json:"driverVersion,omitempty"`
	// CUDADriverVersion is the CUDA version the driver supports, e.g. "12.8".
	CUDADriverVersion string `json:"cudaDriverVersion,omitempty"`
	NVMLVersion       string `json:"nvmlVersion,omitempty"`
	GPUs              []GPU  `json:"gpus"`
	// Links holds one entry per unordered GPU pair (A < B), when known.
	Links []Link `json:"links,omitempty"`
	// Gaps say what the source left out: parts of a pasted output elided
	// ("...", "[...]") or cut off. What a gap hides is not judged.
	Gaps []string `json:"gaps,omitempty"`
}

// GPU is one physical GPU.
type GPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// Name is the product name as NVML reports it, e.g. "NVIDIA H100 80GB HBM3".
	Name      string `json:"name,omitempty"`
	PCIBusID  string `json:"pciBusId,omitempty"`
	MemoryMiB uint64 `json:"memoryMiB,omitempty"`
	// SMs is the multiprocessor count of the whole GPU; 0 when unknown.
	SMs int `json:"sms,omitempty"`
	// ComputeCapability is "major.minor", e.g. "9.0".
	ComputeCapability string `json:"computeCapability,omitempty"`
	// NUMANode is the CPU NUMA node; nil when unknown or not applicable.
	NUMANode    *int    `json:"numaNode,omitempty"`
	MIGCurrent  MIGMode `json:"migCurrent,omitempty"`
	MIGPending  MIGMode `json:"migPending,omitempty"`
	Persistence *bool   `json:"persistence,omitempty"`
	// MIGDevices are the MIG instances (GPU instance + compute instance) on
	// this GPU. Their order is the MIG device index order nvidia-smi uses.
	MIGDevices []MIGDevice `json:"migDevices,omitempty"`
	// MIGDevicesUnknown: the source was cut before it listed the GPU's MIG
	// devices, so an empty MIGDevices says nothing.
	MIGDevicesUnknown bool `json:"migDevicesUnknown,omitempty"`
	// MIGProfiles are the GPU-instance profiles the GPU itself reported
	// (`nvidia-smi mig -lgip`): name, SMs, memory and instance count. They
	// stand before the catalog's, and serve GPUs the catalog lacks.
	MIGProfiles []Profile `json:"migProfiles,omitempty"`
	// NVLinks lists the GPU's NVLinks; empty when it has none or it is unknown.
	NVLinks []NVLink `json:"nvlinks,omitempty"`
	// Health is the GPU's own health report; nil when the source said
	// nothing about it.
	Health *Health `json:"health,omitempty"`
	// Fabric is the GPU's NVLink fabric registration; nil when the source
	// said nothing or the GPU reports no fabric.
	Fabric *Fabric `json:"fabric,omitempty"`
}

// MIGDevice is one MIG device: a compute instance inside a GPU instance.
type MIGDevice struct {
	// Index is the MIG device index within its parent, as in nvidia-smi's
	// "MIG 3g.40gb Device 0" lines and the N:M device notation.
	Index int    `json:"index"`
	UUID  string `json:"uuid,omitempty"`
	// GPUInstanceID and ComputeInstanceID are NVML's GI and CI IDs; -1 unknown.
	GPUInstanceID     int `json:"gpuInstanceId"`
	ComputeInstanceID int `json:"computeInstanceId"`
	// Profile is the MIG profile name: "3g.40gb" when the compute instance
	// spans its GPU instance, "1c.3g.40gb" when it is a part of it.
	Profile   string     `json:"profile,omitempty"`
	SMs       int        `json:"sms,omitempty"`
	MemoryMiB uint64     `json:"memoryMiB,omitempty"`
	Placement *Placement `json:"placement,omitempty"`
	// P2PSupported is NVML's GpuInstanceProfileInfo.IsP2pSupported; nil unknown.
	P2PSupported *bool `json:"p2pSupported,omitempty"`
}

// Placement is where a GPU instance sits in the GPU's memory slices.
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// NVLink is one NVLink of a GPU.
type NVLink struct {
	Link   int  `json:"link"`
	Active bool `json:"active"`
	// RemotePCIBusID is the bus ID of the peer (a GPU or an NVSwitch).
	RemotePCIBusID string `json:"remotePciBusId,omitempty"`
}

// Link is what connects two GPUs.
type Link struct {
	A int `json:"a"`
	B int `json:"b"`
	// Level is the `nvidia-smi topo -m` class: NV<n>, PIX, PXB, PHB, NODE,
	// SYS; empty when unknown.
	Level    string    `json:"level,omitempty"`
	NVLinks  int       `json:"nvlinks,omitempty"`
	P2PRead  P2PStatus `json:"p2pRead,omitempty"`
	P2PWrite P2PStatus `json:"p2pWrite,omitempty"`
}

// GPUByIndex returns the GPU with that index.
func (inv *Inventory) GPUByIndex(i int) (*GPU, bool) {
	for k := range inv.GPUs {
		if inv.GPUs[k].Index == i {
			return &inv.GPUs[k], true
		}
	}
	return nil, false
}

// Link returns the link between GPUs a and b, in either order.
func (inv *Inventory) Link(a, b int) (Link, bool) {
	if a > b {
		a, b = b, a
	}
	for _, l := range inv.Links {
		if l.A == a && l.B == b {
			return l, true
		}
	}
	return Link{}, false
}

// SetLink merges l into the inventory's link table; known fields of l win.
func (inv *Inventory) SetLink(l Link) {
	if l.A > l.B {
		l.A, l.B = l.B, l.A
	}
	for k := range inv.Links {
		cur := &inv.Links[k]
		if cur.A != l.A || cur.B != l.B {
			continue
		}
		if l.Level != "" {
			cur.Level = l.Level
		}
		if l.NVLinks != 0 {
			cur.NVLinks = l.NVLinks
		}
		if l.P2PRead.Known() {
			cur.P2PRead = l.P2PRead
		}
		if l.P2PWrite.Known() {
			cur.P2PWrite = l.P2PWrite
		}
		return
	}
	inv.Links = append(inv.Links, l)
}

// Normalize sorts GPUs, MIG devices and links into their canonical order and
// sets the snapshot header. Sources call it before handing an inventory out.
func (inv *Inventory) Normalize() {
	inv.APIVersion, inv.Kind = SnapshotAPIVersion, SnapshotKind
	sort.SliceStable(inv.GPUs, func(i, j int) bool { return inv.GPUs[i].Index < inv.GPUs[j].Index })
	for k := range inv.GPUs {
		m := inv.GPUs[k].MIGDevices
		sort.SliceStable(m, func(i, j int) bool { return m[i].Index < m[j].Index })
	}
	sort.SliceStable(inv.Links, func(i, j int) bool {
		if inv.Links[i].A != inv.Links[j].A {
			return inv.Links[i].A < inv.Links[j].A
		}
		return inv.Links[i].B < inv.Links[j].B
	})
}

// Validate checks the invariants rules rely on: unique GPU indices and UUIDs,
// unique MIG UUIDs, links between known GPUs.
func (inv *Inventory) Validate() error {
	idx := map[int]bool{}
	uuids := map[string]string{}
	seen := func(id, what string) error {
		if id == "" {
			return nil
		}
		key := strings.ToLower(id)
		if prev, ok := uuids[key]; ok {
			return fmt.Errorf("UUID %s appears twice (%s and %s)", id, prev, what)
		}
		uuids[key] = what
		return nil
	}
	for _, g := range inv.GPUs {
		if g.Index < 0 {
			return fmt.Errorf("GPU %q has negative index %d", g.UUID, g.Index)
		}
		if idx[g.Index] {
			return fmt.Errorf("GPU index %d appears twice", g.Index)
		}
		idx[g.Index] = true
		if g.UUID != "" && !strings.HasPrefix(strings.ToUpper(g.UUID), "GPU-") {
			return fmt.Errorf("GPU %d: UUID %q does not start with GPU-", g.Index, g.UUID)
		}
		if err := seen(g.UUID, fmt.Sprintf("GPU %d", g.Index)); err != nil {
			return err
		}
		midx := map[int]bool{}
		for _, m := range g.MIGDevices {
			if m.Index < 0 || midx[m.Index] {
				return fmt.Errorf("GPU %d: MIG device index %d is negative or appears twice", g.Index, m.Index)
			}
			midx[m.Index] = true
			// NVML names MIG devices MIG-<uuid> (MIG-GPU-<uuid>/<gi>/<ci> on
			// old drivers); anything else would be read back as an index.
			if m.UUID != "" && !strings.HasPrefix(strings.ToUpper(m.UUID), "MIG-") {
				return fmt.Errorf("MIG device %d:%d: UUID %q does not start with MIG-", g.Index, m.Index, m.UUID)
			}
			if err := seen(m.UUID, fmt.Sprintf("MIG device %d:%d", g.Index, m.Index)); err != nil {
				return err
			}
		}
	}
	for _, l := range inv.Links {
		if l.A == l.B || !idx[l.A] || !idx[l.B] {
			return fmt.Errorf("link %d-%d names an unknown GPU or the same GPU twice", l.A, l.B)
		}
	}
	return nil
}

// MIGProfile returns the GPU-instance profile by name ("1c.3g.40gb" is
// its "3g.40gb") from the GPU's reported profiles, then from the catalog's
// model of the GPU; false when neither knows it.
func (g *GPU) MIGProfile(cat *Catalog, name string) (*Profile, bool) {
	if len(g.MIGProfiles) > 0 {
		m := GPUModel{Profiles: g.MIGProfiles}
		if p, ok := m.Profile(name); ok {
			return p, true
		}
	}
	if cat != nil {
		if m, ok := cat.Model(g.Name); ok {
			return m.Profile(name)
		}
	}
	return nil, false
}
