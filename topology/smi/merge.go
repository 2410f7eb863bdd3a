package smi

import (
	"fmt"
	"strings"

	"github.com/rankgate/rankgate/topology"
)

// Merging: the builder combines the facts of every output into one
// inventory; two outputs that disagree are a conflict naming both.

func conflict(obj, field string, old any, oldAt at, val any, valAt at) error {
	return &topology.InputError{
		File: valAt.file,
		Line: valAt.line,
		Msg: fmt.Sprintf("%s: %s is %v here but %v in %s; were the outputs taken on different machines or at different times?",
			obj, field, val, old, oldAt),
	}
}

// merge sets *cur to val when *cur is unknown, and reports a conflict when
// both are known and differ.
func merge[T comparable](obj, field string, cur *T, from map[string]at, val, unknown T, a at, eq func(x, y T) bool) error {
	if val == unknown {
		return nil
	}
	if *cur == unknown {
		*cur = val
		from[field] = a
		return nil
	}
	if eq != nil && eq(*cur, val) || eq == nil && *cur == val {
		return nil
	}
	return conflict(obj, field, *cur, from[field], val, a)
}

func mergePtr[T comparable](obj, field string, cur **T, from map[string]at, val *T, a at) error {
	if val == nil {
		return nil
	}
	if *cur == nil {
		v := *val
		*cur = &v
		from[field] = a
		return nil
	}
	if **cur != *val {
		return conflict(obj, field, **cur, from[field], *val, a)
	}
	return nil
}

// builder merges reports into one inventory.
type builder struct {
	cat      *topology.Catalog
	driver   string
	cuda     string
	from     map[string]at
	gpus     []*gpuState
	links    map[[2]int]*linkState
	linkList [][2]int
	handles  []fileHandle
	gaps     []string
}

type gpuState struct {
	g         topology.GPU
	from      map[string]at
	weakIndex bool
	migOn     bool
	// migUnknown: an output was cut before it listed the MIG devices.
	migUnknown bool
	migs       []fileMIG
	profiles   []profileFact
	devs       []*devState
}

type fileMIG struct {
	migFact
	file string
}

func (f fileMIG) at() at { return at{f.file, f.line} }

type devState struct {
	d    topology.MIGDevice
	from map[string]at
}

type linkState struct {
	l        topology.Link
	nvlinkOK bool
	from     map[string]at
}

func (b *builder) add(r *report) error {
	if b.from == nil {
		b.from = map[string]at{}
	}
	a := at{r.file, r.infoLine}
	if err := merge("node", "driver version", &b.driver, b.from, r.driver, "", a, nil); err != nil {
		return err
	}
	if err := merge("node", "CUDA version", &b.cuda, b.from, r.cuda, "", a, nil); err != nil {
		return err
	}
	for _, g := range r.gpus {
		if err := b.addGPU(r.file, g); err != nil {
			return err
		}
	}
	for _, l := range r.links {
		if err := b.addLink(r.file, l); err != nil {
			return err
		}
	}
	b.addHandles(r.file, r.handles)
	b.gaps = append(b.gaps, r.gaps...)
	return nil
}

func (b *builder) find(match func(*gpuState) bool) *gpuState {
	for _, g := range b.gpus {
		if match(g) {
			return g
		}
	}
	return nil
}

func (b *builder) addGPU(file string, f *gpuFact) error {
	a := at{file, f.line}
	var m *gpuState
	if f.uuid != "" {
		m = b.find(func(g *gpuState) bool { return strings.EqualFold(g.g.UUID, f.uuid) })
	}
	if m == nil && f.busID != "" {
		m = b.find(func(g *gpuState) bool { return g.g.PCIBusID == f.busID })
	}
	if m != nil && !f.weakIndex && m.g.Index != f.index {
		if !m.weakIndex {
			return conflict(gpuName(m.g), "GPU index", m.g.Index, m.from["index"], f.index, a)
		}
		if o := b.find(func(g *gpuState) bool { return g.g.Index == f.index }); o != nil && o != m {
			return conflict(gpuName(m.g), "GPU index", m.g.Index, m.from["index"], f.index, a)
		}
		m.g.Index, m.weakIndex, m.from["index"] = f.index, false, a
	}
	if m == nil {
		m = b.find(func(g *gpuState) bool { return g.g.Index == f.index })
	}
	if m == nil {
		m = &gpuState{g: topology.GPU{Index: f.index}, from: map[string]at{"index": a}, weakIndex: f.weakIndex}
		b.gpus = append(b.gpus, m)
	} else if m.weakIndex && !f.weakIndex {
		m.weakIndex, m.from["index"] = false, a
	}
	obj := fmt.Sprintf("GPU %d", m.g.Index)
	g := &m.g
	for _, err := range []error{
		merge(obj, "UUID", &g.UUID, m.from, f.uuid, "", a, strings.EqualFold),
		mergeName(obj, &g.Name, m.from, f.name, a),
		merge(obj, "PCI bus ID", &g.PCIBusID, m.from, f.busID, "", a, nil),
		merge(obj, "memory (MiB)", &g.MemoryMiB, m.from, f.memMiB, 0, a, nil),
		mergePtr(obj, "NUMA node", &g.NUMANode, m.from, f.numa, a),
		merge(obj, "MIG mode", &g.MIGCurrent, m.from, f.migCurrent, topology.ModeUnknown, a, nil),
		merge(obj, "pending MIG mode", &g.MIGPending, m.from, f.migPending, topology.ModeUnknown, a, nil),
		mergePtr(obj, "persistence mode", &g.Persistence, m.from, f.persistence, a),
	} {
		if err != nil {
			return err
		}
	}
	mergeHealth(g, f.health, f.fabric)
	if len(g.NVLinks) == 0 {
		g.NVLinks = f.nvlinks
	}
	m.migUnknown = m.migUnknown || f.migUnknown
	if f.migOn {
		m.migOn = true
		if _, ok := m.from["migOn"]; !ok {
			m.from["migOn"] = a
		}
	}
	for _, mf := range f.migs {
		m.migs = append(m.migs, fileMIG{mf, file})
	}
	m.profiles = append(m.profiles, f.profiles...)
	return nil
}

func gpuName(g topology.GPU) string {
	if g.UUID != "" {
		return fmt.Sprintf("GPU %d (%s)", g.Index, g.UUID)
	}
	return fmt.Sprintf("GPU %d", g.Index)
}

// mergeName accepts the plain table's truncated names ("NVIDIA A100
// 80G...") as agreeing with the full name, which wins.
func mergeName(obj string, cur *string, from map[string]at, val string, a at) error {
	if val == "" {
		return nil
	}
	if *cur == "" || strings.EqualFold(*cur, val) {
		if *cur == "" {
			from["name"] = a
		}
		*cur = val
		return nil
	}
	stem := func(s string) (string, bool) {
		t, ok := strings.CutSuffix(s, "...")
		return strings.ToUpper(strings.TrimSpace(t)), ok
	}
	cs, ctrunc := stem(*cur)
	vs, vtrunc := stem(val)
	switch {
	case ctrunc && strings.HasPrefix(strings.ToUpper(val), cs):
		*cur = val
		from["name"] = a
		return nil
	case vtrunc && strings.HasPrefix(strings.ToUpper(*cur), vs):
		return nil
	}
	return conflict(obj, "product name", *cur, from["name"], val, a)
}

func (b *builder) addLink(file string, f linkFact) error {
	a := at{file, f.line}
	key := [2]int{f.a, f.b}
	ls := b.links[key]
	if ls == nil {
		ls = &linkState{l: topology.Link{A: f.a, B: f.b}, from: map[string]at{}}
		b.links[key] = ls
		b.linkList = append(b.linkList, key)
	}
	obj := fmt.Sprintf("link GPU%d-GPU%d", f.a, f.b)
	for _, err := range []error{
		merge(obj, "topology level", &ls.l.Level, ls.from, f.level, "", a, nil),
		merge(obj, "NVLink count", &ls.l.NVLinks, ls.from, f.nvlinks, 0, a, nil),
		merge(obj, "P2P read", &ls.l.P2PRead, ls.from, f.read, topology.P2PUnknown, a, nil),
		merge(obj, "P2P write", &ls.l.P2PWrite, ls.from, f.write, topology.P2PUnknown, a, nil),
	} {
		if err != nil {
			return err
		}
	}
	ls.nvlinkOK = ls.nvlinkOK || f.nvlinkOK
	return nil
}

func (b *builder) finish() (*topology.Inventory, error) {
	inv := &topology.Inventory{DriverVersion: b.driver, CUDADriverVersion: b.cuda}
	for _, gs := range b.gpus {
		if err := b.buildMIG(gs); err != nil {
			return nil, err
		}
		if gs.g.SMs == 0 && b.cat != nil {
			// An output without the SM count (-L, the table): the embedded
			// catalog's, when the name names one model.
			if m := modelFor(b.cat, gs.g.Name, gs.g.MemoryMiB); m != nil {
				gs.g.SMs = m.SMs
			}
		}
		if gs.g.MIGCurrent == topology.ModeUnknown && (len(gs.devs) > 0 || gs.migOn) {
			// MIG devices, and the mig subcommands' outputs, exist only in
			// MIG mode.
			gs.g.MIGCurrent = topology.ModeEnabled
		}
		for _, d := range gs.devs {
			gs.g.MIGDevices = append(gs.g.MIGDevices, d.d)
		}
		gs.g.MIGDevicesUnknown = gs.migUnknown && len(gs.g.MIGDevices) == 0
		inv.GPUs = append(inv.GPUs, gs.g)
	}
	for _, key := range b.linkList {
		ls := b.links[key]
		if ls.nvlinkOK {
			// topo -p2p n: P2P over NVLink works, so reads and writes do,
			// unless r or w said otherwise.
			if !ls.l.P2PRead.Known() {
				ls.l.P2PRead = topology.P2POK
			}
			if !ls.l.P2PWrite.Known() {
				ls.l.P2PWrite = topology.P2POK
			}
		}
		inv.Links = append(inv.Links, ls.l)
	}
	return inv, nil
}
