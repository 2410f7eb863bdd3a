package clustertest

import (
	"fmt"
	"sort"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// Dynamic MIG (the driver's DynamicMIG feature gate, KEP-4815
// partitionable devices): the driver does not publish MIG devices that
// exist, but every placement of every MIG profile the GPU supports, each
// consuming counters of its GPU's counter set; it creates the MIG device
// when a claim allocated to it is prepared. The full GPU is published too
// and consumes the whole counter set, so allocating it leaves no
// placement, and any placement allocated leaves the full GPU out.
//
// As v0.4.1 publishes on Kubernetes 1.35 and later: one pool per node
// holding G+1 slices for G GPUs, the first with every GPU's counter set
// (spec.sharedCounters, no devices), then one slice per GPU with its
// devices (the full GPU gpu-<minor> and its placements
// gpu-<minor>-mig-<profile>-<profile ID>-<placement start>, sorted by
// name). A placement has no uuid attribute: it is not a MIG device until
// allocated and prepared.

// MIGProfile is a MIG profile of a GPU model, as NVML describes it: its
// GPU instance profile ID, what one instance has, how many memory slices
// it takes and where it may start.
type MIGProfile struct {
	Name                                       string
	ID                                         int
	SMs, CopyEngines, Decoders, Encoders, JPEG int
	OFA                                        int
	MemoryMiB                                  int
	Size                                       int   // memory slices taken
	Starts                                     []int // possible placements (first memory slice)
}

// H100Profiles are the profiles of an H100 80GB HBM3 (8 memory slices,
// 132 SMs) that dynamic MIG publishes (its +me and 1g.20gb profiles are
// left out of the test fleet).
var H100Profiles = []MIGProfile{
	{Name: "1g.10gb", ID: 19, SMs: 16, CopyEngines: 1, Decoders: 1, JPEG: 1, MemoryMiB: 9984, Size: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}},
	{Name: "2g.20gb", ID: 14, SMs: 32, CopyEngines: 2, Decoders: 2, JPEG: 2, MemoryMiB: 20096, Size: 2, Starts: []int{0, 2, 4}},
	{Name: "3g.40gb", ID: 9, SMs: 60, CopyEngines: 3, Decoders: 3, JPEG: 3, MemoryMiB: 40448, Size: 4, Starts: []int{0, 4}},
	{Name: "4g.40gb", ID: 5, SMs: 64, CopyEngines: 4, Decoders: 4, JPEG: 4, MemoryMiB: 40448, Size: 4, Starts: []int{0}},
	{Name: "7g.80gb", ID: 0, SMs: 132, CopyEngines: 8, Decoders: 7, JPEG: 7, OFA: 1, MemoryMiB: 81152, Size: 8, Starts: []int{0}},
}

// DRADynamicGPU is a MIG-capable GPU under dynamic MIG: Profiles are the
// profiles it supports (H100Profiles when nil).
type DRADynamicGPU struct {
	UUID, Product, Driver string
	Profiles              []MIGProfile
}

// DynamicMIGSlices are the slices the driver publishes for node's GPUs
// under dynamic MIG (the GPU's minor is its index in gpus): the counters'
// slice first, then one slice of devices per GPU.
func DynamicMIGSlices(node string, gpus ...DRADynamicGPU) []*resourcev1.ResourceSlice {
	counters := nodeSlice(node, "-counters")
	out := []*resourcev1.ResourceSlice{counters}
	for i, g := range gpus {
		profiles := g.Profiles
		if profiles == nil {
			profiles = H100Profiles
		}
		set := CounterSetName(i)
		whole := wholeGPUCounters(profiles)
		counters.Spec.SharedCounters = append(counters.Spec.SharedCounters, resourcev1.CounterSet{Name: set, Counters: whole})
		s := nodeSlice(node, fmt.Sprintf("-gpu-%d", i))
		gpu := resourcev1.Device{
			Name:             fmt.Sprintf("gpu-%d", i),
			Attributes:       dynAttrs(g, "gpu"),
			Capacity:         wholeGPUCapacity(profiles),
			ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: set, Counters: whole}},
		}
		gpu.Attributes["uuid"] = resourcev1.DeviceAttribute{StringValue: ptr.To(g.UUID)}
		s.Spec.Devices = append(s.Spec.Devices, gpu)
		for _, p := range profiles {
			for _, start := range p.Starts {
				d := resourcev1.Device{
					Name:             fmt.Sprintf("gpu-%d-mig-%s-%d-%d", i, strings.ReplaceAll(p.Name, ".", ""), p.ID, start),
					Attributes:       dynAttrs(g, "mig"),
					Capacity:         p.capacity(),
					ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: set, Counters: p.counters(start)}},
				}
				d.Attributes["parentUUID"] = resourcev1.DeviceAttribute{StringValue: ptr.To(g.UUID)}
				d.Attributes["profile"] = resourcev1.DeviceAttribute{StringValue: ptr.To(p.Name)}
				s.Spec.Devices = append(s.Spec.Devices, d)
			}
		}
		sort.Slice(s.Spec.Devices, func(a, b int) bool { return s.Spec.Devices[a].Name < s.Spec.Devices[b].Name })
		out = append(out, s)
	}
	for _, s := range out {
		s.Spec.Pool.ResourceSliceCount = int64(len(out))
	}
	return out
}

// CounterSetName is the name of the counter set of the GPU of minor.
func CounterSetName(minor int) string { return fmt.Sprintf("gpu-%d-counter-set", minor) }

// dynAttrs are the attributes a GPU and its placements share, with type.
func dynAttrs(g DRADynamicGPU, typ string) map[resourcev1.QualifiedName]resourcev1.DeviceAttribute {
	return map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
		"type":                  {StringValue: ptr.To(typ)},
		"productName":           {StringValue: ptr.To(g.Product)},
		"brand":                 {StringValue: ptr.To("Nvidia")},
		"architecture":          {StringValue: ptr.To("Hopper")},
		"driverVersion":         {VersionValue: ptr.To(g.Driver)},
		"cudaComputeCapability": {VersionValue: ptr.To("9.0.0")},
		"cudaDriverVersion":     {VersionValue: ptr.To("13.0.0")},
	}
}

func count(n int) resource.Quantity { return *resource.NewQuantity(int64(n), resource.BinarySI) }

func mib(n int) resource.Quantity { return *resource.NewQuantity(int64(n)<<20, resource.BinarySI) }

// capacity is what one instance of the profile has, named as the driver
// names device capacities.
func (p MIGProfile) capacity() map[resourcev1.QualifiedName]resourcev1.DeviceCapacity {
	return map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
		"multiprocessors": {Value: count(p.SMs)},
		"copyEngines":     {Value: count(p.CopyEngines)},
		"decoders":        {Value: count(p.Decoders)},
		"encoders":        {Value: count(p.Encoders)},
		"jpegEngines":     {Value: count(p.JPEG)},
		"ofaEngines":      {Value: count(p.OFA)},
		"memory":          {Value: mib(p.MemoryMiB)},
	}
}

// counters is what the placement of the profile at start consumes: its
// capacities (as counters, their names in DNS form) and one counter per
// memory slice it takes.
func (p MIGProfile) counters(start int) map[string]resourcev1.Counter {
	out := map[string]resourcev1.Counter{}
	for name, c := range p.capacity() {
		out[dnsName(string(name))] = resourcev1.Counter{Value: c.Value}
	}
	for k := start; k < start+p.Size; k++ {
		out[fmt.Sprintf("memory-slice-%d", k)] = resourcev1.Counter{Value: count(1)}
	}
	return out
}

// dnsName: copyEngines -> copy-engines.
func dnsName(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// wholeGPUCapacity is the full GPU's capacity under dynamic MIG: of each
// dimension, the most any profile has.
func wholeGPUCapacity(profiles []MIGProfile) map[resourcev1.QualifiedName]resourcev1.DeviceCapacity {
	out := map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{}
	for _, p := range profiles {
		for name, c := range p.capacity() {
			if cur, ok := out[name]; !ok || c.Value.Cmp(cur.Value) > 0 {
				out[name] = c
			}
		}
	}
	return out
}

// wholeGPUCounters is the GPU's counter set, which the full GPU consumes
// whole: its capacities and one counter per memory slice (as many as the
// largest placement takes).
func wholeGPUCounters(profiles []MIGProfile) map[string]resourcev1.Counter {
	out := map[string]resourcev1.Counter{}
	for name, c := range wholeGPUCapacity(profiles) {
		out[dnsName(string(name))] = resourcev1.Counter{Value: c.Value}
	}
	slices := 0
	for _, p := range profiles {
		slices = max(slices, p.Size)
	}
	for k := 0; k < slices; k++ {
		out[fmt.Sprintf("memory-slice-%d", k)] = resourcev1.Counter{Value: count(1)}
	}
	return out
}
