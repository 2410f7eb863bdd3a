// Package dra is the device source of ranks whose GPUs come through
// Kubernetes DRA: a rank pod's ResourceClaims, once the scheduler has
// allocated them, name the devices (driver, pool, device) that the
// devices' driver publishes in ResourceSlices with their facts. NVIDIA's
// DRA driver (gpu.nvidia.com) publishes, per device, `type` (gpu, mig),
// `uuid`, `parentUUID` (MIG), `productName`, `profile`, `driverVersion`,
// `cudaDriverVersion`, `cudaComputeCapability` and the capacities
// `memory` and `multiprocessors`, and marks unhealthy devices with taints.
//
// The source builds, for the rank's node, the inventory those facts
// describe and runs the rank rules of package preflight on the allocated
// devices, as the rank's init container runs them on what NVML shows;
// only the rules the published facts can decide are kept (the node's
// links, health and fabric are NVML's to report).
package dra

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// Objects are the cluster's DRA objects the source reads. Returned
// objects are read only.
type Objects interface {
	// Claim is ResourceClaim namespace/name; nil when there is none.
	Claim(namespace, name string) *resourcev1.ResourceClaim
	// Pool is the ResourceSlices of driver's pool named pool.
	Pool(driver, pool string) []*resourcev1.ResourceSlice
	// TaintRules are the cluster's DeviceTaintRules: their taints apply
	// to the devices they select as the driver's own do (taintrules.go).
	TaintRules() []*resourcev1.DeviceTaintRule
}

// Source resolves ranks' devices from their DRA allocations.
type Source struct {
	Objects Objects
	// Drivers is the known-bad driver table; nil: not judged.
	Drivers *preflight.DriverTable
	// Catalog gives full GPUs their SM count where the driver publishes
	// none; nil: the default catalog.
	Catalog *topology.Catalog
	// Pools remembers the pools' devices and inventories across calls
	// (and Sources that share it); nil: each call reads them anew.
	Pools *Pools
}

var _ devicesource.Source = (*Source)(nil)

// Driver is the name of NVIDIA's GPU DRA driver, the driver of the
// devices this source reads facts from.
const Driver = "gpu.nvidia.com"

// Name implements devicesource.Source.
func (*Source) Name() string { return devicesource.DRA }

// allocFrom is the allocation's origin as findings name it.
const allocFrom = "the pod's DRA allocation"

// Rank implements devicesource.Source: the rank's report from its pod's
// allocated claims. A pod with no claim, or whose claims hold no GPU
// (other drivers' devices, vfio GPUs), is not known with nothing to wait
// for; one whose claims are not all created or allocated yet, or whose
// devices are no longer published, waits.
func (s *Source) Rank(_ context.Context, pod *corev1.Pod, rank int) (devicesource.Rank, error) {
	names, waiting := claimNames(pod)
	if waiting != "" || len(names) == 0 {
		return devicesource.Rank{Waiting: waiting}, nil
	}
	var allocated []device
	v := &poolView{s: s}
	for _, n := range names {
		c := s.Objects.Claim(pod.Namespace, n)
		switch {
		case c == nil:
			return devicesource.Rank{Waiting: fmt.Sprintf("ResourceClaim %s/%s is not seen yet", pod.Namespace, n)}, nil
		case c.Status.Allocation == nil:
			return devicesource.Rank{Waiting: fmt.Sprintf("ResourceClaim %s/%s is not allocated yet", pod.Namespace, n)}, nil
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			d, ok := v.find(r.Driver, r.Pool, r.Device)
			if !ok {
				return devicesource.Rank{Waiting: fmt.Sprintf("device %s/%s/%s of ResourceClaim %s/%s is not published in any ResourceSlice", r.Driver, r.Pool, r.Device, pod.Namespace, n)}, nil
			}
			if d.kind() == "" {
				continue // not a GPU
			}
			d.claim = pod.Namespace + "/" + n
			allocated = append(allocated, d)
		}
	}
	if len(allocated) == 0 {
		return devicesource.Rank{}, nil
	}
	return devicesource.Rank{Known: true, Report: s.report(pod, rank, allocated, v)}, nil
}

// UsesClaims: p gets devices through DRA: resource claims, or an
// extended resource the scheduler served through DRA (known once it
// did).
func UsesClaims(p *corev1.Pod) bool {
	return len(p.Spec.ResourceClaims) > 0 || p.Status.ExtendedResourceClaimStatus != nil
}

// claimNames are the names of the ResourceClaims pod uses: those its spec
// names, those made for it from templates (its status names them) and
// the one the scheduler made for its DRA-served extended resources. It
// says what it waits for when a claim made from a template is not named
// yet.
func claimNames(pod *corev1.Pod) (names []string, waiting string) {
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			names = append(names, *pc.ResourceClaimName)
			continue
		}
		i := slices.IndexFunc(pod.Status.ResourceClaimStatuses, func(st corev1.PodResourceClaimStatus) bool { return st.Name == pc.Name })
		switch {
		case i < 0:
			return nil, fmt.Sprintf("the claim %q of pod %s/%s is not created yet", pc.Name, pod.Namespace, pod.Name)
		case pod.Status.ResourceClaimStatuses[i].ResourceClaimName != nil:
			names = append(names, *pod.Status.ResourceClaimStatuses[i].ResourceClaimName)
		}
	}
	if e := pod.Status.ExtendedResourceClaimStatus; e != nil && e.ResourceClaimName != "" {
		names = append(names, e.ResourceClaimName)
	}
	slices.Sort(names)
	return slices.Compact(names), ""
}

// device is one published device.
type device struct {
	slice *resourcev1.ResourceSlice
	dev   *resourcev1.Device
	claim string // the claim it is allocated to (allocated devices only)
}

// find is device name of driver's pool, in the pool's latest generation
// (read straight from the slices: a Source without Pools).
func (s *Source) find(driver, pool, name string) (device, bool) {
	var best device
	var gen int64 = -1
	for _, sl := range s.Objects.Pool(driver, pool) {
		if sl.Spec.Driver != driver || sl.Spec.Pool.Name != pool || sl.Spec.Pool.Generation < gen {
			continue
		}
		for i := range sl.Spec.Devices {
			if sl.Spec.Devices[i].Name == name {
				best, gen = device{slice: sl, dev: &sl.Spec.Devices[i]}, sl.Spec.Pool.Generation
				break
			}
		}
	}
	return best, gen >= 0
}

// Attribute reads attribute name of dev, a device of driver, by its bare
// name (the driver's own domain) or qualified with the driver's name.
func Attribute(driver string, dev *resourcev1.Device, name string) (resourcev1.DeviceAttribute, bool) {
	for _, k := range []string{name, driver + "/" + name} {
		if a, ok := dev.Attributes[resourcev1.QualifiedName(k)]; ok {
			return a, true
		}
	}
	return resourcev1.DeviceAttribute{}, false
}

// AttributeString is attribute name of dev (Attribute) as a string: its
// string or version value, "" for none or another type.
func AttributeString(driver string, dev *resourcev1.Device, name string) string {
	a, ok := Attribute(driver, dev, name)
	switch {
	case !ok:
		return ""
	case a.StringValue != nil:
		return *a.StringValue
	case a.VersionValue != nil:
		return *a.VersionValue
	}
	return ""
}

func (d device) str(name string) string { return AttributeString(d.slice.Spec.Driver, d.dev, name) }

// kind is the device's topology kind; empty for what is not a GPU or a
// MIG device (vfio GPUs are passed to VMs, not to CUDA).
func (d device) kind() topology.DeviceKind {
	switch d.str("type") {
	case "gpu":
		return topology.KindGPU
	case "mig":
		return topology.KindMIG
	}
	return ""
}

func (d device) capacity(name string) (int64, bool) {
	for _, k := range []string{name, d.slice.Spec.Driver + "/" + name} {
		if c, ok := d.dev.Capacity[resourcev1.QualifiedName(k)]; ok {
			return c.Value.Value(), true
		}
	}
	return 0, false
}

func (d device) memoryMiB() uint64 {
	if v, ok := d.capacity("memory"); ok && v > 0 {
		return uint64(v) >> 20
	}
	return 0
}

func (d device) sms() int {
	if v, ok := d.capacity("multiprocessors"); ok && v > 0 && v < 1<<20 {
		return int(v)
	}
	return 0
}

// dynamic: a placement of dynamic MIG, which exists only once allocated
// (it consumes its GPU's shared counters).
func (d device) dynamic() bool { return len(d.dev.ConsumesCounters) > 0 }

func (d device) id() string {
	return d.slice.Spec.Driver + "/" + d.slice.Spec.Pool.Name + "/" + d.dev.Name
}

var gpuPrefix = regexp.MustCompile(`^gpu-(\d{1,4})(-|$)`)

// report is the rank's report on its allocated devices.
func (s *Source) report(pod *corev1.Pod, rank int, allocated []device, v *poolView) preflight.RankReport {
	inv, refs := v.inventory(allocated)
	rep := preflight.RankRules(preflight.RankInput{
		Inventory: inv, Allocation: topology.Allocation{From: allocFrom, Refs: refs},
		Catalog: s.catalog(), Drivers: s.Drivers,
	})
	findings := slices.DeleteFunc(rep.Findings, func(f verdict.Finding) bool { return !judged[f.Rule] })
	findings = append(findings, taintFindings(allocated, s.Objects.TaintRules())...)
	out := verdict.NewReport(fmt.Sprintf("rank %d: %d device(s) from %s", rank, len(refs), allocFrom), findings)
	out.Mode, out.Devices = rep.Mode, rep.Devices
	byRef := make(map[string]string, len(refs))
	for i, r := range refs {
		byRef[r] = allocated[i].id()
	}
	for i := range out.Devices {
		out.Devices[i].DRA = byRef[out.Devices[i].ID]
	}
	node := pod.Spec.NodeName
	if n := allocated[0].slice.Spec.NodeName; n != nil && *n != "" {
		node = *n
	}
	return preflight.RankReport{
		Rank: rank, Pod: pod.Name, Node: node, Source: devicesource.DRA,
		DriverVersion: inv.DriverVersion, CUDADriverVersion: inv.CUDADriverVersion, Report: out,
	}
}

// judged are the rank rules the published facts decide.
var judged = map[string]bool{
	verdict.RuleDeviceNotFound: true, verdict.RuleMIGMixedWithFull: true, verdict.RuleMIGSpansGPUs: true,
	verdict.RuleMIGMultiplePerProcess: true, verdict.RuleMIGParentAllocated: true,
	verdict.RuleProfileHeterogeneous: true, verdict.RuleDriverKnownBad: true,
}

func (s *Source) catalog() *topology.Catalog {
	if s.Catalog != nil {
		return s.Catalog
	}
	return defaultCatalog
}

var defaultCatalog = topology.DefaultCatalog()

// inventory is the node of the allocated devices as their pools publish
// it: its GPUs and their MIG devices (of dynamic MIG, only the allocated
// placements exist), and refs naming the allocated devices in it, in
// allocated's order (built anew: a Source without Pools).
func (s *Source) inventory(allocated []device) (*topology.Inventory, []string) {
	pools := map[[2]string]bool{}
	for _, d := range allocated {
		pools[[2]string{d.slice.Spec.Driver, d.slice.Spec.Pool.Name}] = true
	}
	isAllocated := map[string]bool{}
	for _, d := range allocated {
		isAllocated[d.id()] = true
	}
	var all []device
	for p := range pools {
		for _, sl := range s.Objects.Pool(p[0], p[1]) {
			for i := range sl.Spec.Devices {
				if d := (device{slice: sl, dev: &sl.Spec.Devices[i]}); d.kind() != "" {
					all = append(all, d)
				}
			}
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].id() < all[j].id() })
	all = slices.CompactFunc(all, func(a, b device) bool { return a.id() == b.id() })
	b := newInventoryBuilder(s.catalog())
	for _, d := range all {
		b.number(d)
		if d.kind() == topology.KindMIG && d.dynamic() && !isAllocated[d.id()] {
			continue
		}
		b.add(d)
	}
	refs := make([]string, len(allocated))
	for i, d := range allocated {
		refs[i] = b.ref(d)
	}
	return b.inv, refs
}

// inventoryBuilder builds an inventory from published devices.
type inventoryBuilder struct {
	inv     *topology.Inventory
	catalog *topology.Catalog
	byUUID  map[string]int // GPU UUID -> index in inv.GPUs
	refs    map[string]string
	// placement numbers the dynamic MIG placements of each GPU (number),
	// next counts them by parent UUID.
	placement map[string]int
	next      map[string]int
}

func newInventoryBuilder(c *topology.Catalog) *inventoryBuilder {
	return &inventoryBuilder{inv: &topology.Inventory{Source: "dra"}, catalog: c, byUUID: map[string]int{}, refs: map[string]string{},
		placement: map[string]int{}, next: map[string]int{}}
}

// number gives a dynamic MIG placement its MIG device index: its place
// among its GPU's published placements, in the order of their IDs (every
// placement numbered, allocated or not, once each). A placement has no
// uuid and no index of its own until the driver creates it; numbered by
// its place in the inventory of one rank's devices, placements of one
// GPU given to two ranks would both read as MIG device 0 of that GPU, the
// same device.
func (b *inventoryBuilder) number(d device) {
	if d.kind() != topology.KindMIG || !d.dynamic() {
		return
	}
	if _, ok := b.placement[d.id()]; ok {
		return
	}
	parent := d.str("parentUUID")
	b.placement[d.id()] = b.next[parent]
	b.next[parent]++
}

// migIndex is the index of MIG device d of GPU g: the placement's number
// where it has one free on g, else the next after g's MIG devices.
func (b *inventoryBuilder) migIndex(g *topology.GPU, d device) int {
	next := 0
	for _, m := range g.MIGDevices {
		next = max(next, m.Index+1)
	}
	k, ok := b.placement[d.id()]
	if !ok || d.str("uuid") != "" || slices.ContainsFunc(g.MIGDevices, func(m topology.MIGDevice) bool { return m.Index == k }) {
		return next
	}
	return k
}

// gpu is the inventory's GPU with uuid, added on first sight with the
// device's facts.
func (b *inventoryBuilder) gpu(uuid string, d device) *topology.GPU {
	if i, ok := b.byUUID[uuid]; ok {
		return &b.inv.GPUs[i]
	}
	idx := len(b.inv.GPUs)
	if m := gpuPrefix.FindStringSubmatch(d.dev.Name); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil && !slices.ContainsFunc(b.inv.GPUs, func(g topology.GPU) bool { return g.Index == n }) {
			idx = n
		}
	}
	g := topology.GPU{Index: idx, UUID: uuid, Name: d.str("productName"), ComputeCapability: majorMinor(d.str("cudaComputeCapability"))}
	if m := modelOf(b.catalog, g.Name); m != nil {
		g.SMs, g.MemoryMiB = m.SMs, m.MemoryMiB
	}
	b.inv.GPUs = append(b.inv.GPUs, g)
	b.byUUID[uuid] = len(b.inv.GPUs) - 1
	if b.inv.DriverVersion == "" {
		b.inv.DriverVersion, b.inv.CUDADriverVersion = d.str("driverVersion"), majorMinor(d.str("cudaDriverVersion"))
	}
	return &b.inv.GPUs[len(b.inv.GPUs)-1]
}

func (b *inventoryBuilder) add(d device) {
	uuid := d.str("uuid")
	if d.kind() == topology.KindGPU {
		if uuid == "" {
			uuid = d.id()
		}
		g := b.gpu(uuid, d)
		if m := d.memoryMiB(); m > 0 {
			g.MemoryMiB = m
		}
		if n := d.sms(); n > 0 {
			g.SMs = n
		}
		if g.MIGCurrent == topology.ModeUnknown {
			g.MIGCurrent = topology.ModeDisabled
		}
		b.refs[d.id()] = uuid
		return
	}
	parent := d.str("parentUUID")
	if parent == "" {
		parent = "parent of " + d.id()
	}
	g := b.gpu(parent, d)
	g.MIGCurrent = topology.ModeEnabled
	m := topology.MIGDevice{Index: b.migIndex(g, d), UUID: uuid, GPUInstanceID: -1, ComputeInstanceID: -1,
		Profile: d.str("profile"), SMs: d.sms(), MemoryMiB: d.memoryMiB()}
	g.MIGDevices = append(g.MIGDevices, m)
	if uuid == "" {
		b.refs[d.id()] = fmt.Sprintf("%d:%d", g.Index, m.Index)
		return
	}
	b.refs[d.id()] = uuid
}

// ref names d in the inventory.
func (b *inventoryBuilder) ref(d device) string {
	if r, ok := b.refs[d.id()]; ok {
		return r
	}
	return d.id()
}

// models remembers the catalog's model of each product name (a fleet has
// few; matching a name against the catalog is the costliest part of a
// rank's report), for at most maxModels names.
var (
	modelsMu sync.Mutex
	models   = map[modelKey]*topology.GPUModel{}
)

type modelKey struct {
	catalog *topology.Catalog
	product string
}

const maxModels = 256

// modelOf is c's model of product (nil when the catalog has none).
func modelOf(c *topology.Catalog, product string) *topology.GPUModel {
	k := modelKey{c, product}
	modelsMu.Lock()
	m, ok := models[k]
	modelsMu.Unlock()
	if ok {
		return m
	}
	if found, ok := c.Model(product); ok {
		m = found
	}
	modelsMu.Lock()
	if len(models) >= maxModels {
		clear(models)
	}
	models[k] = m
	modelsMu.Unlock()
	return m
}

// majorMinor is "9.0" of "9.0.0".
func majorMinor(v string) string {
	p := strings.SplitN(v, ".", 3)
	if len(p) < 2 {
		return v
	}
	return p[0] + "." + p[1]
}

// taintFindings: DEVICE_TAINTED for each allocated device its driver
// tainted, or that a DeviceTaintRule taints NoSchedule or NoExecute (the
// claim tolerated it, or the taint came later). A rule's taint of effect
// None is informational, as it is to the scheduler.
func taintFindings(allocated []device, rules []*resourcev1.DeviceTaintRule) []verdict.Finding {
	var f []verdict.Finding
	for _, d := range allocated {
		var byRule []RuleTaint
		for _, rt := range RuleTaints(rules, d.slice.Spec.Driver, d.slice.Spec.Pool.Name, d.dev.Name) {
			if Keeps(rt.Taint) {
				byRule = append(byRule, rt)
			}
		}
		// Effect None is informational, the driver's as a rule's (the
		// scheduler allocates such a device).
		var own []resourcev1.DeviceTaint
		for _, t := range d.dev.Taints {
			if Keeps(t) {
				own = append(own, t)
			}
		}
		if len(own) == 0 && len(byRule) == 0 {
			continue
		}
		ts := make([]string, 0, len(own)+len(byRule))
		for _, t := range own {
			ts = append(ts, TaintString(t))
		}
		var names []string
		for _, rt := range byRule {
			ts = append(ts, rt.String())
			names = append(names, rt.Rule)
		}
		name := d.id()
		if u := d.str("uuid"); u != "" {
			name += " (" + u + ")"
		}
		f = append(f, verdict.Finding{
			Rule: verdict.RuleDeviceTainted, Severity: verdict.SeverityFail, Devices: []string{d.id()},
			Message:     fmt.Sprintf("device %s of ResourceClaim %s carries the taint(s) %s: %s", name, d.claim, strings.Join(ts, ", "), taintCause(len(own) > 0, names)),
			Remediation: taintFix(len(own) > 0, names),
		})
	}
	return f
}

// taintCause says who tainted a device: its driver, rules, or both.
func taintCause(driver bool, rules []string) string {
	const sick = "its driver marked it unhealthy"
	if len(rules) == 0 {
		return sick
	}
	// A rule puts one taint: the names are those of distinct rules.
	s := "DeviceTaintRule " + strings.Join(rules, ", ") + " took it out of service"
	if len(rules) > 1 {
		s = "DeviceTaintRules " + strings.Join(rules, ", ") + " took it out of service"
	}
	if driver {
		return sick + ", and " + s
	}
	return s
}

func taintFix(driver bool, rules []string) string {
	const realloc = "delete the pod so that its claim is allocated again on an untainted device, and drop the claim's toleration of the taint"
	const sick = "have the node's GPU checked (Xid errors in dmesg, nvidia-smi -q)"
	if len(rules) == 0 {
		return "delete the pod so that its claim is allocated again on a healthy device, and drop the claim's toleration of the driver's health taints; " + sick
	}
	fix := realloc + "; delete the DeviceTaintRule once the device is serviced (kubectl delete devicetaintrule " + rules[0] + ")"
	if driver {
		fix += "; " + sick
	}
	return fix
}
