package smi

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/rankgate/rankgate/topology"
)

// Input is one pasted nvidia-smi output.
type Input struct {
	// Name is the file name, used in errors and in the inventory's Source.
	// For `topo -p2p` outputs without a prompt line it also tells the mode
	// ("topo-p2p-rw.txt"), since the output itself does not say.
	Name string
	Data []byte
}

// Bounds that keep hostile input from making huge inventories.
const (
	maxGPUs       = 256
	maxMIGDevices = 64
	maxInstanceID = 1 << 16
)

// Import reads nvidia-smi outputs of one node and combines them into one
// inventory. Facts are matched by GPU index, UUID and PCI bus ID, and MIG
// devices by index, UUID and GPU/compute instance IDs; outputs that
// disagree (two UUIDs for one GPU index, say) are an error naming both
// files. Where an output lacks MIG profile names (plain table, -q) they are
// inferred from the GPU model, SM count and memory with cat; a nil cat means
// the embedded catalog. Errors about the input are *topology.InputError.
func Import(inputs []Input, cat *topology.Catalog) (*topology.Inventory, error) {
	if len(inputs) == 0 {
		return nil, &topology.InputError{Msg: "no nvidia-smi outputs given; " + expected}
	}
	if cat == nil {
		cat = topology.DefaultCatalog()
	}
	var reps []*report
	names := make([]string, 0, len(inputs))
	for _, in := range inputs {
		rs, err := readInput(in)
		if err != nil {
			return nil, err
		}
		reps = append(reps, rs...)
		names = append(names, in.Name)
	}
	// Outputs that number GPUs go first, so that -q outputs, which number
	// them only by position, find their GPUs by UUID or bus ID.
	sort.SliceStable(reps, func(i, j int) bool { return !reps[i].weakIndex() && reps[j].weakIndex() })
	b := &builder{cat: cat, links: map[[2]int]*linkState{}}
	for _, r := range reps {
		if err := b.add(r); err != nil {
			return nil, err
		}
	}
	inv, err := b.finish()
	if err != nil {
		return nil, err
	}
	inv.Source = "nvidia-smi:" + strings.Join(names, ",")
	inv.Normalize()
	if err := inv.Validate(); err != nil {
		return nil, &topology.InputError{File: strings.Join(names, ", "), Msg: "the outputs do not describe one consistent node", Err: err}
	}
	return inv, nil
}

// readInput splits one input into its outputs and parses each.
func readInput(in Input) ([]*report, error) {
	d := splitDoc(string(in.Data))
	var reps []*report
	for _, s := range d.sections {
		if s.skip() {
			continue
		}
		k, err := s.detect()
		if err == nil {
			r := &report{file: in.Name, kind: k}
			err = parseSection(k, s, r, in.Name)
			reps = append(reps, r)
		}
		if err != nil {
			var ie *topology.InputError
			if errors.As(err, &ie) && ie.File == "" {
				ie.File = in.Name
			}
			return nil, err
		}
	}
	if len(reps) == 0 {
		return nil, &topology.InputError{File: in.Name, Msg: "no nvidia-smi output found; " + expected}
	}
	return reps, nil
}

func parseSection(k Kind, s section, r *report, name string) error {
	switch k {
	case KindList:
		return parseList(s, r)
	case KindTopoMatrix:
		return parseTopoMatrix(s, r)
	case KindTopoP2P:
		return parseTopoP2P(s, r, name)
	case KindQuery:
		return parseQuery(s, r)
	case KindQueryXML:
		return parseQueryXML(s, r)
	case KindMIGLGI:
		return parseLGI(s, r)
	case KindMIGLGIP:
		return parseLGIP(s, r)
	case KindMIGLCI:
		return parseLCI(s, r)
	case KindTable:
		return parseTable(s, r)
	}
	return s.errAt(s.first, "unknown output kind "+string(k))
}

// report is what one output says, before it is merged with the others.
type report struct {
	file     string
	kind     Kind
	driver   string
	cuda     string
	infoLine int // line of the driver and CUDA versions
	gpus     []*gpuFact
	links    []linkFact
}

func (r *report) weakIndex() bool {
	for _, g := range r.gpus {
		if g.weakIndex {
			return true
		}
	}
	return false
}

func (r *report) addGPU(g *gpuFact) *gpuFact {
	r.gpus = append(r.gpus, g)
	return g
}

// gpuFact is what one output says about one GPU. Zero values mean unknown.
type gpuFact struct {
	line  int
	index int
	// weakIndex is set when the index is only the GPU's position in a -q
	// output, which names GPUs by bus ID.
	weakIndex   bool
	uuid        string
	name        string
	busID       string
	memMiB      uint64
	numa        *int
	migCurrent  topology.MIGMode
	migPending  topology.MIGMode
	persistence *bool
	// migOn is set by outputs that only exist with MIG enabled (mig -lgi,
	// -lgip, -lci).
	migOn    bool
	migs     []migFact
	profiles []profileFact
}

func newGPUFact(i, index int) *gpuFact {
	return &gpuFact{line: lineNo(i), index: index}
}

// migKind says what a migFact describes.
type migKind int

const (
	migDevice  migKind = iota // a MIG device with its index (-L, table, -q)
	migCI                     // a compute instance without device index (mig -lci)
	migGIWhole                // a GPU instance (mig -lgi)
)

// migFact is what one output says about one MIG device or instance.
type migFact struct {
	line      int
	kind      migKind
	index     int // -1 unknown
	gi, ci    int // -1 unknown
	uuid      string
	profile   string
	sms       int
	memMiB    uint64
	placement *topology.Placement
}

func newMIGFact(i int) migFact {
	return migFact{line: lineNo(i), index: -1, gi: -1, ci: -1}
}

// profileFact is one row of `mig -lgip`.
type profileFact struct {
	name string
	sms  int
	p2p  bool
}

// linkFact is what one output says about the connection of GPUs a < b.
type linkFact struct {
	line     int
	a, b     int
	level    string
	nvlinks  int
	read     topology.P2PStatus
	write    topology.P2PStatus
	nvlinkOK bool // topo -p2p n said OK
}

// at locates a fact for conflict messages.
type at struct {
	file string
	line int
}

func (a at) String() string {
	if a.line > 0 {
		return fmt.Sprintf("%s:%d", a.file, a.line)
	}
	return a.file
}

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
}

type gpuState struct {
	g         topology.GPU
	from      map[string]at
	weakIndex bool
	migOn     bool
	migs      []fileMIG
	profiles  []profileFact
	devs      []*devState
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
		if gs.g.MIGCurrent == topology.ModeUnknown && (len(gs.devs) > 0 || gs.migOn) {
			// MIG devices, and the mig subcommands' outputs, exist only in
			// MIG mode.
			gs.g.MIGCurrent = topology.ModeEnabled
		}
		for _, d := range gs.devs {
			gs.g.MIGDevices = append(gs.g.MIGDevices, d.d)
		}
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

// buildMIG merges what the outputs say about one GPU's MIG devices. Outputs
// that number devices (-L, table, -q) are merged by index; `mig -lci` rows
// by GPU/compute instance ID; `mig -lgi` rows by GPU instance ID. When no
// output numbers the devices, they are numbered in ascending GPU instance
// then compute instance ID, the order nvidia-smi lists them in.
func (b *builder) buildMIG(gs *gpuState) error {
	obj := func(d *devState) string { return fmt.Sprintf("MIG device %d:%d", gs.g.Index, d.d.Index) }
	byIndex := func(i int) *devState {
		for _, d := range gs.devs {
			if d.d.Index == i {
				return d
			}
		}
		return nil
	}
	newDev := func(i int) *devState {
		d := &devState{d: topology.MIGDevice{Index: i, GPUInstanceID: -1, ComputeInstanceID: -1}, from: map[string]at{}}
		gs.devs = append(gs.devs, d)
		return d
	}
	var cis, gis []fileMIG
	for _, f := range gs.migs {
		switch f.kind {
		case migCI:
			cis = append(cis, f)
			continue
		case migGIWhole:
			gis = append(gis, f)
			continue
		}
		d := byIndex(f.index)
		if f.uuid != "" {
			for _, o := range gs.devs {
				if o != d && strings.EqualFold(o.d.UUID, f.uuid) {
					return conflict("MIG "+f.uuid, "device index", o.d.Index, o.from["index"], f.index, f.at())
				}
			}
		}
		if d == nil {
			d = newDev(f.index)
			d.from["index"] = f.at()
		}
		if err := mergeDev(obj(d), d, f); err != nil {
			return err
		}
	}
	seen := map[[2]int]*devState{}
	for _, d := range gs.devs {
		if d.d.GPUInstanceID < 0 || d.d.ComputeInstanceID < 0 {
			continue
		}
		k := [2]int{d.d.GPUInstanceID, d.d.ComputeInstanceID}
		if o := seen[k]; o != nil {
			return conflict(obj(d), "GPU/compute instance", fmt.Sprintf("%d/%d (also device %d)", k[0], k[1], o.d.Index), o.from["gi"], fmt.Sprintf("%d/%d", k[0], k[1]), d.from["gi"])
		}
		seen[k] = d
	}

	// Compute instances from mig -lci.
	var left []fileMIG
	for _, f := range cis {
		if d := seen[[2]int{f.gi, f.ci}]; d != nil {
			if err := mergeDev(obj(d), d, f); err != nil {
				return err
			}
			continue
		}
		left = append(left, f)
	}
	if len(left) > 0 {
		sortByInstance(left)
		unnumbered := devsWithoutGI(gs.devs)
		switch {
		case len(gs.devs) == 0:
			for i, f := range left {
				d := newDev(i)
				d.from["index"] = f.at()
				if err := mergeDev(obj(d), d, f); err != nil {
					return err
				}
			}
		case len(unnumbered) == len(left):
			for i, f := range left {
				if err := mergeDev(obj(unnumbered[i]), unnumbered[i], f); err != nil {
					return err
				}
			}
		default:
			f := left[0]
			return &topology.InputError{File: f.file, Line: f.line, Msg: fmt.Sprintf(
				"GPU %d: compute instance %d of GPU instance %d is no MIG device in the other outputs (they list %d devices)",
				gs.g.Index, f.ci, f.gi, len(gs.devs))}
		}
	}

	// GPU instances from mig -lgi: placements, and the profile of a
	// device that is the only one in its GPU instance.
	left = left[:0]
	for _, f := range gis {
		var in []*devState
		for _, d := range gs.devs {
			if d.d.GPUInstanceID == f.gi {
				in = append(in, d)
			}
		}
		if len(in) == 0 {
			left = append(left, f)
			continue
		}
		for _, d := range in {
			if err := mergeGI(obj(d), d, f, len(in) == 1); err != nil {
				return err
			}
		}
	}
	if len(left) > 0 {
		sortByInstance(left)
		unnumbered := devsWithoutGI(gs.devs)
		switch {
		case len(gs.devs) == 0:
			// Only -lgi: each GPU instance is taken as one MIG device with
			// a compute instance spanning it (what `-cgi ... -C` creates);
			// its compute instance ID stays unknown.
			for i, f := range left {
				d := newDev(i)
				d.from["index"] = f.at()
				d.d.GPUInstanceID = f.gi
				d.from["gi"] = f.at()
				if err := mergeGI(obj(d), d, f, true); err != nil {
					return err
				}
			}
		case len(unnumbered) == len(left):
			for i, f := range left {
				d := unnumbered[i]
				if p := d.d.Profile; p != "" && topology.GIProfileName(p) != f.profile {
					return conflict(obj(d), "GPU instance profile", p, d.from["profile"], f.profile, f.at())
				}
				d.d.GPUInstanceID = f.gi
				d.from["gi"] = f.at()
				if err := mergeGI(obj(d), d, f, true); err != nil {
					return err
				}
			}
		}
		// Otherwise the left GPU instances hold no compute instance (no
		// MIG device) or cannot be told apart; nothing is guessed.
	}

	model := modelFor(b.cat, gs.g.Name, gs.g.MemoryMiB)
	for _, d := range gs.devs {
		if d.d.Profile == "" && model != nil {
			if p, ok := model.InferProfile(d.d.SMs, d.d.MemoryMiB); ok {
				d.d.Profile = p
			}
		}
		for _, p := range gs.profiles {
			if p.name != topology.GIProfileName(d.d.Profile) {
				continue
			}
			v := p.p2p
			d.d.P2PSupported = &v
			if d.d.SMs == 0 && d.d.Profile == p.name {
				d.d.SMs = p.sms
			}
		}
	}
	sort.SliceStable(gs.devs, func(i, j int) bool { return gs.devs[i].d.Index < gs.devs[j].d.Index })
	return nil
}

func sortByInstance(fs []fileMIG) {
	sort.SliceStable(fs, func(i, j int) bool {
		if fs[i].gi != fs[j].gi {
			return fs[i].gi < fs[j].gi
		}
		return fs[i].ci < fs[j].ci
	})
}

func devsWithoutGI(devs []*devState) []*devState {
	var out []*devState
	for _, d := range devs {
		if d.d.GPUInstanceID < 0 {
			out = append(out, d)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].d.Index < out[j].d.Index })
	return out
}

func mergeDev(obj string, d *devState, f fileMIG) error {
	a := f.at()
	m := &d.d
	for _, err := range []error{
		merge(obj, "UUID", &m.UUID, d.from, f.uuid, "", a, strings.EqualFold),
		merge(obj, "GPU instance ID", &m.GPUInstanceID, d.from, f.gi, -1, a, nil),
		merge(obj, "compute instance ID", &m.ComputeInstanceID, d.from, f.ci, -1, a, nil),
		merge(obj, "profile", &m.Profile, d.from, f.profile, "", a, nil),
		merge(obj, "SM count", &m.SMs, d.from, f.sms, 0, a, nil),
		merge(obj, "memory (MiB)", &m.MemoryMiB, d.from, f.memMiB, 0, a, nil),
		mergePlacement(obj, d, f.placement, a),
	} {
		if err != nil {
			return err
		}
	}
	if _, ok := d.from["gi"]; !ok && f.gi >= 0 {
		d.from["gi"] = a
	}
	return nil
}

// mergeGI applies a `mig -lgi` row to a device of that GPU instance. The
// GPU instance profile names the device only when the device is alone in
// its GPU instance.
func mergeGI(obj string, d *devState, f fileMIG, alone bool) error {
	a := f.at()
	if err := mergePlacement(obj, d, f.placement, a); err != nil {
		return err
	}
	switch {
	case d.d.Profile == "" && alone:
		d.d.Profile = f.profile
		d.from["profile"] = a
	case d.d.Profile != "" && topology.GIProfileName(d.d.Profile) != f.profile:
		return conflict(obj, "GPU instance profile", d.d.Profile, d.from["profile"], f.profile, a)
	}
	return nil
}

func mergePlacement(obj string, d *devState, p *topology.Placement, a at) error {
	return mergePtr(obj, "placement", &d.d.Placement, d.from, p, a)
}

// modelFor finds the catalog model of a GPU. The plain table truncates long
// names ("NVIDIA A100-SXM...", "NVIDIA A100 80G..."); then the family word
// (A100, H100, ...) and the memory size pick the model when only one fits.
func modelFor(cat *topology.Catalog, name string, memMiB uint64) *topology.GPUModel {
	if name == "" {
		return nil
	}
	if m, ok := cat.Model(name); ok {
		return m
	}
	stem, truncated := strings.CutSuffix(strings.TrimSpace(name), "...")
	if !truncated || memMiB == 0 {
		return nil
	}
	var family string
	for _, w := range strings.FieldsFunc(strings.ToUpper(stem), func(r rune) bool { return r == ' ' || r == '-' }) {
		if isFamilyWord(w) {
			family = w
			break
		}
	}
	if family == "" {
		return nil
	}
	var found *topology.GPUModel
	for i := range cat.Models {
		m := &cat.Models[i]
		named := false
		for _, s := range m.Match {
			if strings.Contains(strings.ToUpper(s), family) {
				named = true
			}
		}
		diff := float64(m.MemoryMiB) - float64(memMiB)
		if !named || diff > 0.08*float64(m.MemoryMiB) || -diff > 0.08*float64(m.MemoryMiB) {
			continue
		}
		if found != nil {
			return nil
		}
		found = m
	}
	return found
}

// isFamilyWord reports whether w looks like a GPU family: letters then
// digits, "A100", "GH200", "B200".
func isFamilyWord(w string) bool {
	i := 0
	for i < len(w) && w[i] >= 'A' && w[i] <= 'Z' {
		i++
	}
	if i == 0 || i > 3 || len(w)-i < 2 {
		return false
	}
	_, err := strconv.Atoi(w[i:])
	return err == nil
}

// parseIndex reads a non-negative decimal below max.
func parseIndex(s string, max int) (int, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n >= max || strings.HasPrefix(s, "+") {
		return 0, fmt.Errorf("%q is not a number from 0 to %d", clip(s), max-1)
	}
	return n, nil
}

// parseUUID checks a GPU-/MIG- UUID. Masked UUIDs people write into
// reports ("GPU-xxxxxxxx-...", "GPU-<redacted>") read as unknown, so two
// masked GPUs do not look like one.
func parseUUID(u, prefix string) (string, error) {
	u = strings.TrimSpace(u)
	if len(u) < len(prefix) || !strings.EqualFold(u[:len(prefix)], prefix) {
		return "", fmt.Errorf("UUID %q does not start with %s", clip(u), prefix)
	}
	rest := u[len(prefix):]
	if rest == "" {
		return "", nil
	}
	for _, c := range rest {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == '-') {
			return "", nil
		}
	}
	return u, nil
}

// parseProfile checks a MIG profile name ("3g.40gb", "1c.3g.40gb",
// "1g.10gb+me").
func parseProfile(name string) (int, int, error) {
	return topology.ParseProfileName(name)
}

// parseMiB reads "81559 MiB" or "81559MiB"; "N/A" is unknown.
func parseMiB(v string) (uint64, bool, error) {
	v = strings.TrimSpace(v)
	if v == "" || v == "N/A" || strings.HasPrefix(v, "[") {
		return 0, false, nil
	}
	num, ok := strings.CutSuffix(v, "MiB")
	if !ok {
		return 0, false, fmt.Errorf("%q is not a size in MiB", clip(v))
	}
	n, err := strconv.ParseUint(strings.TrimSpace(num), 10, 64)
	if err != nil || n > 1<<40 {
		return 0, false, fmt.Errorf("%q is not a size in MiB", clip(v))
	}
	return n, true, nil
}

// normBusID writes a PCI bus ID as NVML does: "00000000:00:09.0". Inputs
// carry 4- or 8-digit domains, any case.
func normBusID(s string) (string, error) {
	s = strings.ToUpper(strings.TrimSpace(s))
	bad := fmt.Errorf("%q is not a PCI bus ID like 00000000:3B:00.0", clip(s))
	parts := strings.Split(s, ":")
	if len(parts) == 2 {
		parts = append([]string{"0"}, parts...)
	}
	if len(parts) != 3 {
		return "", bad
	}
	dev, fn, ok := strings.Cut(parts[2], ".")
	if !ok {
		return "", bad
	}
	hex := func(x string, max int) (uint64, bool) {
		if x == "" || len(x) > max {
			return 0, false
		}
		n, err := strconv.ParseUint(x, 16, 32)
		return n, err == nil
	}
	d, ok1 := hex(parts[0], 8)
	bus, ok2 := hex(parts[1], 2)
	dv, ok3 := hex(dev, 2)
	f, ok4 := hex(fn, 1)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return "", bad
	}
	return fmt.Sprintf("%08X:%02X:%02X.%X", d, bus, dv, f), nil
}

// parseMIGMode reads "Enabled", "Disabled" and "N/A" (a GPU without MIG).
func parseMIGMode(v string) (topology.MIGMode, bool) {
	switch strings.ToLower(strings.TrimSuffix(strings.TrimSpace(v), "*")) {
	case "enabled":
		return topology.ModeEnabled, true
	case "disabled":
		return topology.ModeDisabled, true
	case "n/a", "not supported":
		return topology.ModeUnsupported, true
	case "":
		return topology.ModeUnknown, true
	}
	return topology.ModeUnknown, false
}

// parseOnOff reads persistence mode: "Enabled"/"On" and "Disabled"/"Off".
func parseOnOff(v string) *bool {
	var b bool
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "enabled", "on":
		b = true
	case "disabled", "off":
	default:
		return nil
	}
	return &b
}

// cmdIndices returns the GPU indices an `-i 0,3` option selected, so that a
// -q output of selected GPUs is numbered right.
func cmdIndices(args []string) []int {
	var v string
	for i, a := range args {
		switch {
		case (a == "-i" || a == "--id") && i+1 < len(args):
			v = args[i+1]
		case strings.HasPrefix(a, "--id="):
			v = strings.TrimPrefix(a, "--id=")
		case strings.HasPrefix(a, "-i") && len(a) > 2 && a[2] >= '0' && a[2] <= '9':
			v = a[2:]
		}
	}
	if v == "" {
		return nil
	}
	var out []int
	for _, p := range strings.Split(v, ",") {
		n, err := parseIndex(p, maxGPUs)
		if err != nil {
			return nil // a UUID or bus ID: no index to learn
		}
		out = append(out, n)
	}
	return out
}
