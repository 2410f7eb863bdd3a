package smi

import (
	"fmt"
	"strings"

	"github.com/rankgate/rankgate/topology"
)

// The plain `nvidia-smi` output is a set of boxes: a header with the driver
// and CUDA versions, one block per GPU whose rows line up with the column
// header rows above them, then "MIG devices:" and "Processes:" boxes:
//
//	| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
//	| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
//	|                                         |                        |               MIG M. |
//	|=========================================+========================+======================|
//	|   0  NVIDIA H100 80GB HBM3          On  |   00000000:00:09.0 Off |                   On |
//	| N/A   42C    P0             98W /  700W |      59MiB /  81559MiB |     N/A      Default |
//	|                                         |                        |              Enabled |
//
// Column widths changed between drivers and names are cut to fit ("NVIDIA
// A100 80G..."), so cells are found by the header text above them, not by
// position. Without a MIG-capable GPU the "MIG M." row is absent.

type tableState int

const (
	tNone tableState = iota
	tGPUHeader
	tGPUData
	tMIGHeader
	tMIGData
	tProcesses
)

// cellPos locates a header cell: its row within a GPU block and its column.
type cellPos struct{ row, col int }

func cells(t string) []string {
	p := strings.Split(t, "|")
	if len(p) < 2 {
		return nil
	}
	p = p[1:]
	if strings.HasSuffix(t, "|") {
		p = p[:len(p)-1]
	}
	return p
}

func isRule(t string) bool {
	return strings.HasPrefix(t, "+") || strings.HasPrefix(t, "|-") || strings.HasPrefix(t, "|=")
}

// tableParser reads the plain table line by line.
type tableParser struct {
	s             section
	r             *report
	state         tableState
	seenBox       bool
	hdr           [][]string
	bus, mem, mig cellPos
	row           int
	cur           *gpuFact
	byIndex       map[int]*gpuFact
	// resync: after an elision inside the GPU blocks, rows up to the next
	// GPU row are skipped (tablefaults.go).
	resync bool
	// lastRule: the last line read was a border; sawMIG: a MIG devices box
	// was seen. Both tell a cut table (truncated).
	lastRule, sawMIG bool
	// endState is the state after the last line that was not blank.
	endState tableState
}

func parseTable(s section, r *report) error {
	p := &tableParser{s: s, r: r, byIndex: map[int]*gpuFact{}}
	for k, l := range s.body() {
		if err := p.line(s.first+k, l); err != nil {
			return err
		}
		if !isBlank(l) {
			p.endState = p.state
		}
	}
	p.truncated()
	if len(r.gpus) == 0 && r.driver == "" && len(r.gaps) == 0 {
		return s.errAt(s.first, "the nvidia-smi table lists no GPU")
	}
	return nil
}

// gpuFor gives the GPU of index i, adding it when the table has not listed
// it yet (MIG rows name GPUs by index).
func (p *tableParser) gpuFor(i, line int) *gpuFact {
	if g := p.byIndex[i]; g != nil {
		return g
	}
	g := p.r.addGPU(newGPUFact(line, i))
	p.byIndex[i] = g
	return g
}

// find locates a column header cell by its text.
func (p *tableParser) find(label string) cellPos {
	for ri, rc := range p.hdr {
		for ci, c := range rc {
			if strings.Contains(c, label) {
				return cellPos{ri, ci}
			}
		}
	}
	return cellPos{-1, -1}
}

func (p *tableParser) line(i int, l string) error {
	s := p.s
	t := strings.TrimSpace(l)
	if isBlank(l) {
		p.state = tNone
		return nil
	}
	if done, err := p.outsideBoxes(i, t); done {
		return err
	}
	p.seenBox = true
	c := cells(t)
	switch {
	case strings.Contains(t, "NVIDIA-SMI") && strings.Contains(t, "Driver Version:"):
		return tableVersions(s, i, t, p.r)
	case strings.Contains(t, "MIG devices:"):
		p.state, p.sawMIG = tMIGHeader, true
		return nil
	case strings.Contains(t, "Processes:"):
		p.state = tProcesses
		return nil
	case p.state == tNone && strings.Contains(t, "Bus-Id"):
		p.state, p.hdr = tGPUHeader, [][]string{c}
		return nil
	case p.state == tNone && p.hdr == nil && looksGPURow(c):
		p.useDefaultHeader() // the header was elided
	}
	switch p.state {
	case tGPUHeader:
		if strings.HasPrefix(t, "|=") {
			p.state, p.row = tGPUData, 0
			p.bus, p.mem, p.mig = p.find("Bus-Id"), p.find("Memory-Usage"), p.find("MIG M.")
			return nil
		}
		if !isRule(t) {
			p.hdr = append(p.hdr, c)
		}
	case tGPUData:
		return p.gpuRow(i, t, c)
	case tMIGHeader:
		if strings.HasPrefix(t, "|=") {
			p.state = tMIGData
		}
	case tMIGData:
		if isRule(t) || len(c) == 0 || strings.TrimSpace(c[0]) == "" {
			return nil // separators and BAR1 continuation rows
		}
		if strings.Contains(t, "No MIG devices found") {
			return nil
		}
		return tableMIG(s, i, c, p.gpuFor)
	}
	return nil
}

// outsideBoxes handles the lines that are not rows of the boxes: an
// elision, a recovery action, the timestamp above the table, nvidia-smi's
// own error messages. done is false for a box line, which line reads.
func (p *tableParser) outsideBoxes(i int, t string) (done bool, err error) {
	if isElision(t) {
		p.elision(i, t)
		return true, nil
	}
	if v, ok := recoveryAction(t); ok && p.cur != nil {
		p.cur.setRecovery(v)
		return true, nil
	}
	p.lastRule = isRule(t)
	if strings.HasPrefix(t, "|") || strings.HasPrefix(t, "+") {
		return false, nil
	}
	if msg, ok := smiFailure(t); ok {
		return true, p.s.errAt(i, msg)
	}
	if !p.seenBox {
		return true, nil // the timestamp line above the boxes
	}
	return true, p.s.errAt(i, fmt.Sprintf("%q is not part of the nvidia-smi table", clip(t)))
}

// gpuRow reads a row of a GPU block: the first names the GPU, the others
// carry cells under the header rows they line up with.
func (p *tableParser) gpuRow(i int, t string, c []string) error {
	s := p.s
	if isRule(t) {
		p.row = 0
		return nil
	}
	if p.resync {
		if p.row != 0 || !looksGPURow(c) {
			return nil
		}
		p.resync = false
	}
	if p.row >= len(p.hdr) {
		return s.errAt(i, "a GPU block has more rows than the column header")
	}
	if p.row == 0 {
		g, err := tableGPU(s, i, c, p.bus)
		if err != nil {
			return err
		}
		if p.byIndex[g.index] != nil {
			return s.errAt(i, fmt.Sprintf("GPU %d is listed twice", g.index))
		}
		p.cur = p.r.addGPU(g)
		p.byIndex[g.index] = g
	}
	if p.cur == nil {
		return s.errAt(i, "GPU row before any GPU")
	}
	p.errCells(c)
	if p.row == p.mem.row && p.mem.col < len(c) {
		v, err := tableMemTotal(c[p.mem.col])
		if err != nil {
			return s.errAt(i, "memory: "+err.Error())
		}
		p.cur.memMiB = v
	}
	if p.row == p.mig.row && p.mig.col < len(c) {
		cur, pending, ok := parseMIGModeCell(c[p.mig.col])
		if !ok {
			return s.errAt(i, fmt.Sprintf("MIG mode %q is not Enabled, Disabled or N/A", clip(strings.TrimSpace(c[p.mig.col]))))
		}
		p.cur.migCurrent = cur
		if pending != topology.ModeUnknown {
			p.cur.migPending = pending
		}
	}
	p.row++
	return nil
}

// tableVersions reads "| NVIDIA-SMI 590.48.01  Driver Version: 590.48.01  CUDA Version: 13.1 |".
func tableVersions(s section, i int, t string, r *report) error {
	val := func(key string) string {
		_, v, ok := strings.Cut(t, key)
		if !ok {
			return ""
		}
		f := strings.Fields(strings.Trim(v, "| "))
		if len(f) == 0 || notAvailable(f[0]) {
			return ""
		}
		return f[0]
	}
	r.driver, r.cuda, r.infoLine = val("Driver Version:"), val("CUDA Version:"), lineNo(i)
	for _, v := range []string{r.driver, r.cuda} {
		if v != "" && !isVersion(v) {
			return s.errAt(i, fmt.Sprintf("%q is not a version", clip(v)))
		}
	}
	return nil
}

// isVersion accepts "590.48.01", "13.1".
func isVersion(v string) bool {
	if v == "" || v[0] == '.' || v[len(v)-1] == '.' || len(v) > 32 {
		return false
	}
	for _, c := range v {
		if c != '.' && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// tableGPU reads the first row of a GPU block.
func tableGPU(s section, i int, c []string, bus cellPos) (*gpuFact, error) {
	if len(c) == 0 {
		return nil, s.errAt(i, "empty GPU row")
	}
	f := strings.Fields(c[0])
	if len(f) < 2 {
		return nil, s.errAt(i, "a GPU row starts with the GPU index and name")
	}
	idx, err := parseIndex(f[0], maxGPUs)
	if err != nil {
		return nil, s.errAt(i, "GPU index: "+err.Error())
	}
	g := newGPUFact(i, idx)
	name := f[1:]
	switch last := f[len(f)-1]; last {
	case "On", "Off":
		g.persistence = parseOnOff(last)
		name = f[1 : len(f)-1]
	case "WDDM", "TCC", "N/A", "[N/A]", "ERR!":
		name = f[1 : len(f)-1]
	}
	g.name = strings.Join(name, " ")
	if notAvailable(g.name) {
		g.name = "" // "ERR!" where the driver could not read the name
	}
	if bus.row == 0 && bus.col >= 0 && bus.col < len(c) {
		if bf := strings.Fields(c[bus.col]); len(bf) > 0 && !notAvailable(bf[0]) {
			if g.busID, err = normBusID(bf[0]); err != nil {
				return nil, s.errAt(i, err.Error())
			}
		}
	}
	return g, nil
}

// tableMemTotal reads the total of "59MiB /  81559MiB". Drivers print "N/A"
// for the whole cell (535 on a MIG-enabled GPU), or for either side
// ("N/A / 81559MiB", "[N/A] / [N/A]"); an unavailable total is unknown.
func tableMemTotal(v string) (uint64, error) {
	if notAvailable(v) {
		return 0, nil
	}
	used, total, ok := splitUsedTotal(v)
	if !ok {
		return 0, fmt.Errorf("%q is not used / total", clip(strings.TrimSpace(v)))
	}
	if _, _, err := parseMiB(used); err != nil {
		return 0, err
	}
	n, _, err := parseMiB(total)
	return n, err
}

// splitUsedTotal splits "59MiB /  81559MiB" at the slash between the two
// values, not at the one inside "N/A".
func splitUsedTotal(v string) (string, string, bool) {
	for i := 0; i < len(v); i++ {
		if v[i] != '/' {
			continue
		}
		if i > 0 && (v[i-1] == 'N' || v[i-1] == 'n') && i+1 < len(v) && (v[i+1] == 'A' || v[i+1] == 'a') {
			continue // the slash of N/A
		}
		return v[:i], v[i+1:], true
	}
	return "", "", false
}

// tableMIG reads a "MIG devices:" row: GPU, GI, CI, MIG device index,
// memory used / total, SM count.
func tableMIG(s section, i int, c []string, gpuFor func(i, line int) *gpuFact) error {
	f := strings.Fields(c[0])
	if len(f) != 4 {
		return s.errAt(i, "a MIG device row starts with GPU, GI ID, CI ID and MIG device index")
	}
	var v [4]int
	for k, max := range [4]int{maxGPUs, maxInstanceID, maxInstanceID, maxMIGDevices} {
		n, err := parseIndex(f[k], max)
		if err != nil {
			return s.errAt(i, "MIG device row: "+err.Error())
		}
		v[k] = n
	}
	m := newMIGFact(i)
	m.gi, m.ci, m.index = v[1], v[2], v[3]
	if len(c) > 1 {
		n, err := tableMemTotal(c[1])
		if err != nil {
			return s.errAt(i, "MIG device memory: "+err.Error())
		}
		m.memMiB = n
	}
	if len(c) > 2 {
		if sf := strings.Fields(c[2]); len(sf) > 0 && !leadingNA(sf) {
			n, err := parseIndex(sf[0], 1024)
			if err != nil {
				return s.errAt(i, "MIG device SM count: "+err.Error())
			}
			m.sms = n
		}
	}
	g := gpuFor(v[0], i)
	for _, o := range g.migs {
		if o.index == m.index {
			return s.errAt(i, fmt.Sprintf("MIG device %d:%d is listed twice", v[0], m.index))
		}
	}
	g.migs = append(g.migs, m)
	return nil
}

// leadingNA reports whether a cell's fields start with a word nvidia-smi
// prints for a value it cannot read ("N/A", "[Insufficient Permissions]",
// "Not Supported").
func leadingNA(f []string) bool {
	if len(f) == 0 || notAvailable(f[0]) || strings.HasPrefix(f[0], "[") {
		return true
	}
	return len(f) > 1 && notAvailable(f[0]+" "+f[1])
}
