package dra

import (
	"slices"
	"sort"
	"sync"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/rankgate/rankgate/topology"
)

// Pools remembers, per pool of devices, what every rank on the pool's
// node reads of it: its devices by name and the node's inventory they
// describe. The ranks of one node are then judged on one inventory, built
// once, and a rank's own report is compared with its allocation without
// building it again.
//
// An entry stands while its pool's ResourceSlices are the same objects at
// the same resourceVersions (an informer replaces an object that changes,
// never writes it); it is built again when they change and dropped when
// the pool is gone. Entries of pools no rank asks for again are checked
// against their pools whenever the memo has doubled since the last check
// (sweep), so it holds at most about twice the pools that exist. Safe for
// concurrent use; the zero value is ready.
type Pools struct {
	mu      sync.Mutex
	entries map[poolKey]*poolEntry
	// sweepAt is the size at which the entries are next checked.
	sweepAt int
}

// minSweep: a memo this small is not swept.
const minSweep = 16

type poolKey struct {
	catalog      *topology.Catalog // the inventory's GPU models come from it
	driver, pool string
}

// poolEntry is one pool as its slices were when it was read. Its devices
// and inventory are built on first use, once, and read only after.
type poolEntry struct {
	key      poolKey
	objects  Objects // where the pool was read, to check it again (sweep)
	slices   []*resourcev1.ResourceSlice
	versions []string // the slices' resourceVersions
	// ordered: a device is published twice (in two slices, an older
	// generation's lingering, or twice in one): what the pool says then
	// depends on the order of its slices, and the entry stands only for
	// that order. Otherwise for any order (a cache lists a pool's slices
	// in no set order).
	ordered bool

	indexed sync.Once
	named   map[string]found // find's answers, by device name
	devs    []pooled         // the GPU and MIG devices, by ID, stable, duplicates kept
	dynamic map[string]bool  // IDs of dynamic MIG placements

	built sync.Once
	inv   *topology.Inventory // of the pool without any dynamic placement; read only
	refs  map[string]string   // device ID -> its ref in inv
}

// found is a device find finds, in a slice of generation gen.
type found struct {
	d   device
	gen int64
}

// pooled is a GPU or MIG device of a pool with what sorting and
// filtering it asks for.
type pooled struct {
	device
	id      string
	dynamic bool // a dynamic MIG placement
}

// pool is the entry of driver's pool named pool as objs list it now; nil
// when the pool has no slice.
func (p *Pools) pool(objs Objects, c *topology.Catalog, driver, pool string) *poolEntry {
	now := objs.Pool(driver, pool)
	k := poolKey{catalog: c, driver: driver, pool: pool}
	p.mu.Lock()
	e := p.entries[k]
	if e != nil && e.current(now) {
		p.mu.Unlock()
		return e
	}
	if len(now) == 0 {
		delete(p.entries, k)
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	fresh := newPoolEntry(objs, k, now)
	p.mu.Lock()
	if e := p.entries[k]; e != nil && e.current(now) {
		p.mu.Unlock() // another reader stored it meanwhile
		return e
	}
	if p.entries == nil {
		p.entries = map[poolKey]*poolEntry{}
	}
	p.entries[k] = fresh
	sweep := len(p.entries) > max(p.sweepAt, minSweep)
	if sweep {
		p.sweepAt = int(^uint(0) >> 1) // one sweep at a time
	}
	p.mu.Unlock()
	if sweep {
		p.sweep()
	}
	return fresh
}

// sweep drops the entries whose pools are gone or changed.
func (p *Pools) sweep() {
	p.mu.Lock()
	all := make([]*poolEntry, 0, len(p.entries))
	for _, e := range p.entries {
		all = append(all, e)
	}
	p.mu.Unlock()
	var stale []*poolEntry
	for _, e := range all {
		if !e.current(e.objects.Pool(e.key.driver, e.key.pool)) {
			stale = append(stale, e)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range stale {
		if p.entries[e.key] == e {
			delete(p.entries, e.key)
		}
	}
	p.sweepAt = 2 * len(p.entries)
}

// size is how many pools the memo holds.
func (p *Pools) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}

func newPoolEntry(objs Objects, k poolKey, now []*resourcev1.ResourceSlice) *poolEntry {
	e := &poolEntry{key: k, objects: objs, slices: now, versions: make([]string, len(now))}
	n := 0
	for i, sl := range now {
		e.versions[i] = sl.ResourceVersion
		n += len(sl.Spec.Devices)
		// A slice of another pool: its IDs are not told apart by name.
		e.ordered = e.ordered || sl.Spec.Driver != k.driver || sl.Spec.Pool.Name != k.pool
	}
	if !e.ordered && len(now) == 1 {
		e.ordered = !uniqueNames(now[0].Spec.Devices, nil)
	} else if !e.ordered {
		names := make(map[string]bool, n)
		for _, sl := range now {
			if !uniqueNames(sl.Spec.Devices, names) {
				e.ordered = true
				break
			}
		}
	}
	return e
}

// uniqueNames: no device name of devs is in seen, nor twice in devs; it
// adds them to seen (nil: devs alone).
func uniqueNames(devs []resourcev1.Device, seen map[string]bool) bool {
	if seen == nil {
		seen = make(map[string]bool, len(devs))
	}
	for i := range devs {
		if seen[devs[i].Name] {
			return false
		}
		seen[devs[i].Name] = true
	}
	return true
}

// current: now are the slices e was read from, in the same order where
// the order matters.
func (e *poolEntry) current(now []*resourcev1.ResourceSlice) bool {
	if len(now) != len(e.slices) {
		return false
	}
	same := true
	for i, s := range now {
		if s != e.slices[i] || s.ResourceVersion != e.versions[i] {
			same = false
			break
		}
	}
	if same || e.ordered {
		return same
	}
	// Each of now is one of e.slices not matched yet (k slices: k*k
	// compares; a node's pool has a few).
	matched := make([]bool, len(e.slices))
next:
	for _, s := range now {
		for i, x := range e.slices {
			if x == s && !matched[i] && s.ResourceVersion == e.versions[i] {
				matched[i] = true
				continue next
			}
		}
		return false
	}
	return true
}

// index builds e's devices by name and by ID.
func (e *poolEntry) index() {
	e.indexed.Do(func() {
		e.named, e.dynamic = map[string]found{}, map[string]bool{}
		for _, sl := range e.slices {
			if sl.Spec.Driver == e.key.driver && sl.Spec.Pool.Name == e.key.pool {
				e.name(sl)
			}
			for i := range sl.Spec.Devices {
				d := device{slice: sl, dev: &sl.Spec.Devices[i]}
				k := d.kind()
				if k == "" {
					continue
				}
				p := pooled{device: d, id: d.id(), dynamic: k == topology.KindMIG && d.dynamic()}
				if p.dynamic {
					e.dynamic[p.id] = true
				}
				e.devs = append(e.devs, p)
			}
		}
		sort.SliceStable(e.devs, func(i, j int) bool { return e.devs[i].id < e.devs[j].id })
	})
}

// name adds sl's devices to e.named as Source.find finds them: the
// first of a name in a slice, in the last slice of the latest generation
// that has it (walking the slice backwards, the first one is set last).
func (e *poolEntry) name(sl *resourcev1.ResourceSlice) {
	gen := sl.Spec.Pool.Generation
	for i := len(sl.Spec.Devices) - 1; i >= 0; i-- {
		n := sl.Spec.Devices[i].Name
		if f, ok := e.named[n]; (ok && gen < f.gen) || (!ok && gen < -1) {
			continue
		}
		e.named[n] = found{d: device{slice: sl, dev: &sl.Spec.Devices[i]}, gen: gen}
	}
}

// find is Source.find on e's pool.
func (e *poolEntry) find(name string) (device, bool) {
	e.index()
	f, ok := e.named[name]
	return f.d, ok && f.gen >= 0
}

// static is the pool's inventory without any dynamic placement, and the
// refs of its devices in it.
func (e *poolEntry) static() (*topology.Inventory, map[string]string) {
	e.built.Do(func() {
		e.index()
		b := newInventoryBuilder(e.key.catalog)
		for _, d := range present(e.devs, nil) {
			b.add(d.device)
		}
		e.inv, e.refs = b.inv, b.refs
	})
	return e.inv, e.refs
}

// present are the devices of devs (sorted by ID) an inventory has: one of
// each ID, and of dynamic MIG placements only those allocated.
func present(devs []pooled, allocated map[string]bool) []pooled {
	out := make([]pooled, 0, len(devs))
	for _, d := range devs {
		if d.dynamic && !allocated[d.id] {
			continue
		}
		if len(out) > 0 && out[len(out)-1].id == d.id {
			continue
		}
		out = append(out, d)
	}
	return out
}

// poolView is one Rank call's reading of the pools: through s.Pools where
// the Source has one, straight from s.Objects otherwise.
type poolView struct {
	s       *Source
	entries []*poolEntry // those read in this call
}

func (v *poolView) entry(driver, pool string) *poolEntry {
	for _, e := range v.entries {
		if e.key.driver == driver && e.key.pool == pool {
			return e
		}
	}
	e := v.s.Pools.pool(v.s.Objects, v.s.catalog(), driver, pool)
	if e != nil {
		v.entries = append(v.entries, e)
	}
	return e
}

// find is device name of driver's pool, in the pool's latest generation.
func (v *poolView) find(driver, pool, name string) (device, bool) {
	if v.s.Pools == nil {
		return v.s.find(driver, pool, name)
	}
	e := v.entry(driver, pool)
	if e == nil {
		return device{}, false
	}
	return e.find(name)
}

// inventory is Source.inventory: the node of the allocated devices (read
// only where it is the pool's, shared).
func (v *poolView) inventory(allocated []device) (*topology.Inventory, []string) {
	if v.s.Pools == nil {
		return v.s.inventory(allocated)
	}
	var pools []*poolEntry
	isAllocated := make(map[string]bool, len(allocated))
	dynamic := false
	for _, d := range allocated {
		e := v.entry(d.slice.Spec.Driver, d.slice.Spec.Pool.Name)
		if !slices.Contains(pools, e) {
			pools = append(pools, e)
		}
		e.index()
		id := d.id()
		isAllocated[id] = true
		dynamic = dynamic || e.dynamic[id]
	}
	refs := make([]string, len(allocated))
	if len(pools) == 1 && !dynamic {
		inv, byID := pools[0].static()
		for i, d := range allocated {
			if r, ok := byID[d.id()]; ok {
				refs[i] = r
			} else {
				refs[i] = d.id()
			}
		}
		return inv, refs
	}
	// Dynamic placements, or devices of several pools: this rank's own.
	var all []pooled
	for _, e := range pools {
		all = append(all, e.devs...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].id < all[j].id })
	b := newInventoryBuilder(v.s.catalog())
	for _, d := range all {
		b.number(d.device)
	}
	for _, d := range present(all, isAllocated) {
		b.add(d.device)
	}
	for i, d := range allocated {
		refs[i] = b.ref(d)
	}
	return b.inv, refs
}
