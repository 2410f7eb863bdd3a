package smi

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/rankgate/rankgate/topology"
)

// `nvidia-smi topo -m` prints a matrix of GPUs (and NICs) with the class of
// the path between each pair, then the CPU and NUMA affinity of each GPU:
//
//	        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity   GPU NUMA ID
//	GPU0     X      NV12    NODE    0-23,48-71      0               N/A
//
// Columns are separated by tabs or, once pasted, by runs of spaces; no cell
// holds a space, so whitespace splits them. NIC rows and columns are skipped.
// `topo -p2p <cap>` prints the same shape with P2P statuses (OK, CNS, ...)
// and does not say which capability it shows: the prompt line or the file
// name must.

// topoLevel reads a `topo -m` cell: X, NV<n>, PIX, PXB, PHB, NODE, SYS (SOC
// on old drivers).
func topoLevel(c string) (string, int, error) {
	switch c {
	case "X", "PIX", "PXB", "PHB", "NODE", "SYS":
		return c, 0, nil
	case "SOC":
		return "SYS", 0, nil
	}
	if n, ok := strings.CutPrefix(c, "NV"); ok {
		k, err := strconv.Atoi(n)
		if err == nil && k > 0 && k <= 64 && !strings.HasPrefix(n, "+") {
			return "NV" + strconv.Itoa(k), k, nil
		}
	}
	return "", 0, fmt.Errorf("%q is not a topology class (X, NV#, PIX, PXB, PHB, NODE, SYS)", clip(c))
}

// p2pStatus reads a `topo -p2p` cell. "U" (unknown) reads as
// P2PUnknown; the legend's "DR" is P2PDisabledByRegkey.
func p2pStatus(c string) (topology.P2PStatus, bool) {
	switch c {
	case "OK":
		return topology.P2POK, true
	case "CNS":
		return topology.P2PChipsetNotSupported, true
	case "GNS":
		return topology.P2PGPUNotSupported, true
	case "TNS":
		return topology.P2PTopologyNotSupported, true
	case "NS":
		return topology.P2PNotSupported, true
	case "DR", "DBR":
		return topology.P2PDisabledByRegkey, true
	case "U", "X":
		return topology.P2PUnknown, true
	}
	return topology.P2PUnknown, false
}

// gpuLabel reads a "GPU3" row or column label.
func gpuLabel(s string) (int, bool) {
	n, ok := strings.CutPrefix(s, "GPU")
	if !ok || n == "" || n[0] < '0' || n[0] > '9' {
		return 0, false
	}
	i, err := parseIndex(n, maxGPUs)
	return i, err == nil
}

// matrix is a parsed GPU matrix of either kind.
type matrix struct {
	gpus   []int            // GPU index of each device column, -1 for NICs
	cells  map[int][]string // GPU index -> its row's device cells
	rowAt  map[int]int      // GPU index -> line index of its row
	extras map[int][]string // GPU index -> cells after the device columns
	trail  []string         // names of the columns after the device columns
}

func parseMatrix(s section, isCell func(string) bool) (*matrix, error) {
	body := s.body()
	hi := 0
	for hi < len(body) && isBlank(body[hi]) {
		hi++
	}
	if hi == len(body) {
		return nil, s.errAt(s.first, "empty GPU matrix")
	}
	m := &matrix{cells: map[int][]string{}, rowAt: map[int]int{}, extras: map[int][]string{}}
	seen, err := m.header(s, hi, strings.Fields(body[hi]))
	if err != nil {
		return nil, err
	}
	for k := hi + 1; k < len(body); k++ {
		l := body[k]
		if isBlank(l) {
			continue
		}
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "Legend") || strings.HasPrefix(t, "NIC Legend") {
			break
		}
		if err := m.row(s, s.first+k, strings.Fields(t), seen, isCell); err != nil {
			return nil, err
		}
	}
	for _, g := range m.gpus {
		if _, ok := m.cells[g]; g >= 0 && !ok {
			return nil, s.errAt(s.first+hi, fmt.Sprintf("GPU%d has a column but no row", g))
		}
	}
	return m, nil
}

// header reads the column header (line hi of the body): device columns,
// then the trailing columns. It returns the GPUs that have a column.
func (m *matrix) header(s section, hi int, hdr []string) (map[int]bool, error) {
	k := 0
	seen := map[int]bool{}
	for ; k < len(hdr); k++ {
		w := hdr[k]
		if w == "CPU" || w == "NUMA" || w == "GPU" {
			break
		}
		g, ok := gpuLabel(w)
		if !ok {
			g = -1 // a NIC
		} else if seen[g] {
			return nil, s.errAt(s.first+hi, fmt.Sprintf("column %s appears twice", w))
		}
		seen[g] = true
		m.gpus = append(m.gpus, g)
	}
	for k < len(hdr) {
		switch {
		case k+1 < len(hdr) && (hdr[k] == "CPU" || hdr[k] == "NUMA") && hdr[k+1] == "Affinity":
			m.trail = append(m.trail, hdr[k]+" Affinity")
			k += 2
		case k+2 < len(hdr) && hdr[k] == "GPU" && hdr[k+1] == "NUMA" && hdr[k+2] == "ID":
			m.trail = append(m.trail, "GPU NUMA ID")
			k += 3
		default:
			m.trail = append(m.trail, hdr[k])
			k++
		}
	}
	if firstGPU(m.gpus) < 0 {
		return nil, s.errAt(s.first+hi, "the matrix header names no GPU column (want GPU0 GPU1 ...)")
	}
	return seen, nil
}

// row reads the row of line i with fields f; NIC rows are skipped.
func (m *matrix) row(s section, i int, f []string, seen map[int]bool, isCell func(string) bool) error {
	n := len(m.gpus)
	if len(f) < n+1 {
		return s.errAt(i, fmt.Sprintf("matrix row has %d cells, want %d", len(f)-1, n))
	}
	g, isGPU := gpuLabel(f[0])
	if !isGPU {
		return nil // a NIC row
	}
	if !seen[g] {
		return s.errAt(i, fmt.Sprintf("row %s has no column", f[0]))
	}
	if _, dup := m.cells[g]; dup {
		return s.errAt(i, fmt.Sprintf("row %s appears twice", f[0]))
	}
	for j, c := range f[1 : n+1] {
		gj := m.gpus[j]
		switch {
		case gj < 0:
		case gj == g && c != "X":
			return s.errAt(i, fmt.Sprintf("%s to itself is %q, want X", f[0], clip(c)))
		case gj != g && (c == "X" || !isCell(c)):
			return s.errAt(i, fmt.Sprintf("%s to GPU%d: %q is not a cell of this matrix", f[0], gj, clip(c)))
		}
	}
	m.cells[g] = f[1 : n+1]
	m.rowAt[g] = i
	m.extras[g] = f[n+1:]
	return nil
}

func firstGPU(gs []int) int {
	for _, g := range gs {
		if g >= 0 {
			return g
		}
	}
	return -1
}

// pairs calls fn for every GPU pair a < b with the cells of both directions.
func (m *matrix) pairs(fn func(a, b int, ab, ba string, line int) error) error {
	col := map[int]int{}
	for j, g := range m.gpus {
		if g >= 0 {
			col[g] = j
		}
	}
	for _, a := range m.gpus {
		for _, b := range m.gpus {
			if a < 0 || b < 0 || a >= b {
				continue
			}
			if err := fn(a, b, m.cells[a][col[b]], m.cells[b][col[a]], max(m.rowAt[a], m.rowAt[b])); err != nil {
				return err
			}
		}
	}
	return nil
}

func parseTopoMatrix(s section, r *report) error {
	m, err := parseMatrix(s, func(c string) bool { _, _, err := topoLevel(c); return err == nil })
	if err != nil {
		return err
	}
	numaCol := -1
	for i, t := range m.trail {
		if t == "NUMA Affinity" {
			numaCol = i
		}
	}
	for _, g := range m.gpus {
		if g < 0 {
			continue
		}
		f := newGPUFact(m.rowAt[g], g)
		// Only when every trailing column has a value can they be told
		// apart; an empty CPU affinity would shift the NUMA column.
		if ex := m.extras[g]; numaCol >= 0 && len(ex) == len(m.trail) {
			if n, err := strconv.Atoi(ex[numaCol]); err == nil && n >= 0 && n < 1<<16 {
				f.numa = &n
			}
		}
		r.addGPU(f)
	}
	return m.pairs(func(a, b int, ab, ba string, line int) error {
		if ab != ba {
			return s.errAt(line, fmt.Sprintf("GPU%d-GPU%d is %s one way and %s the other", a, b, ab, ba))
		}
		level, nv, _ := topoLevel(ab)
		r.links = append(r.links, linkFact{line: lineNo(line), a: a, b: b, level: level, nvlinks: nv})
		return nil
	})
}

// p2pMode returns the capability a `topo -p2p` output shows: from the
// prompt line, else from the file name ("topo-p2p-rw.txt").
func p2pMode(args []string, name string) string {
	for i, a := range args {
		if (a == "-p2p" || a == "--p2pstatus") && i+1 < len(args) {
			return strings.ToLower(args[i+1])
		}
		if v, ok := strings.CutPrefix(a, "--p2pstatus="); ok {
			return strings.ToLower(v)
		}
	}
	base := strings.ToLower(path.Base(strings.ReplaceAll(name, "\\", "/")))
	for i := strings.Index(base, "p2p"); i >= 0; {
		rest := strings.TrimLeft(base[i+3:], "-_. ")
		for _, mode := range []string{"rw", "r", "w", "n", "a", "p"} {
			if tail, ok := strings.CutPrefix(rest, mode); ok && (tail == "" || !isLetter(tail[0])) {
				return mode
			}
		}
		j := strings.Index(base[i+3:], "p2p")
		if j < 0 {
			break
		}
		i += 3 + j
	}
	return ""
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// parseTopoP2P reads `topo -p2p <cap>`. What is stored, by capability:
// r sets Link.P2PRead, w sets P2PWrite, rw sets both; n (P2P over NVLink)
// sets read and write to OK where it says OK and the r/w outputs said
// nothing (a "not supported" over NVLink says nothing about PCIe P2P); a
// (atomics) and p (PCIe) have no place in the model and are only checked.
// When the two directions of a pair differ, the one that is not OK is kept.
func parseTopoP2P(s section, r *report, name string) error {
	args, _ := s.args()
	mode := p2pMode(args, name)
	switch mode {
	case "r", "w", "rw", "n", "a", "p":
	case "":
		return s.errAt(s.first, "a `topo -p2p` output does not say which capability it shows; "+
			"put the command line (`$ nvidia-smi topo -p2p rw`) above it or name the file like topo-p2p-rw.txt")
	default:
		return s.errAt(s.first, fmt.Sprintf("unknown `topo -p2p` capability %q (want r, w, rw, n, a or p)", clip(mode)))
	}
	m, err := parseMatrix(s, func(c string) bool { _, ok := p2pStatus(c); return ok })
	if err != nil {
		return err
	}
	for _, g := range m.gpus {
		if g >= 0 {
			r.addGPU(newGPUFact(m.rowAt[g], g))
		}
	}
	return m.pairs(func(a, b int, ab, ba string, line int) error {
		st, _ := p2pStatus(ab)
		if sb, _ := p2pStatus(ba); sb != st && st.Supported() {
			st = sb
		}
		l := linkFact{line: lineNo(line), a: a, b: b}
		switch mode {
		case "r":
			l.read = st
		case "w":
			l.write = st
		case "rw":
			l.read, l.write = st, st
		case "n":
			l.nvlinkOK = st.Supported()
		}
		r.links = append(r.links, l)
		return nil
	})
}
