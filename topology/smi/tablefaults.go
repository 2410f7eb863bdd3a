package smi

import (
	"fmt"
	"strings"
)

// What a pasted table shows besides values: cells nvidia-smi printed as
// ERR! (it failed to read the value from the GPU), the driver's
// recommended recovery action, elision lines people put in place of rows
// they cut, and a table cut off inside its GPU blocks.

// defaultHeader is the column header of the 535 and later tables, for a
// paste whose header was elided ("[...]" above the first GPU block).
var defaultHeader = [][]string{
	{" GPU  Name                 Persistence-M ", " Bus-Id          Disp.A ", " Volatile Uncorr. ECC "},
	{" Fan  Temp   Perf          Pwr:Usage/Cap ", "           Memory-Usage ", " GPU-Util  Compute M. "},
	{"                                         ", "                        ", "               MIG M. "},
}

// looksGPURow reports whether the cells are the first row of a GPU block:
// "|   0  NVIDIA H100 ...  On |   00000000:18:00.0 Off |   0 |".
func looksGPURow(c []string) bool {
	if len(c) < 2 {
		return false
	}
	f, b := strings.Fields(c[0]), strings.Fields(c[1])
	if len(f) < 2 || len(b) == 0 {
		return false
	}
	if _, err := parseIndex(f[0], maxGPUs); err != nil {
		return false
	}
	_, err := normBusID(b[0])
	return err == nil
}

// useDefaultHeader starts reading GPU blocks under the usual header.
func (p *tableParser) useDefaultHeader() {
	p.hdr = nil
	for _, r := range defaultHeader {
		p.hdr = append(p.hdr, append([]string(nil), r...))
	}
	p.state, p.row = tGPUData, 0
	p.bus, p.mem, p.mig = p.find("Bus-Id"), p.find("Memory-Usage"), p.find("MIG M.")
}

// elision records a line that stands for cut rows. Inside the GPU blocks
// the rows after it may start anywhere in a block: reading resumes at the
// next GPU row.
func (p *tableParser) elision(i int, t string) {
	p.r.gaps = append(p.r.gaps, fmt.Sprintf("%s:%d: an elision (%q) in the nvidia-smi table: the GPU rows it stands for are not judged", p.r.file, lineNo(i), clip(t)))
	if p.state == tGPUData {
		p.row, p.cur, p.resync = 0, nil, true
	}
}

// recoveryAction reads a "Recovery action: Reset" line or cell of a GPU
// block; ok is false for other lines.
func recoveryAction(t string) (string, bool) {
	i := strings.Index(strings.ToLower(t), "recovery action")
	if i < 0 {
		return "", false
	}
	v := strings.TrimSpace(t[i+len("recovery action"):])
	v = strings.TrimSpace(strings.TrimPrefix(v, ":"))
	if j := strings.IndexByte(v, '|'); j >= 0 {
		v = strings.TrimSpace(v[:j])
	}
	return v, true
}

// errCells records the cells of a GPU block row that read ERR!, named by
// the header labels above them.
func (p *tableParser) errCells(c []string) {
	if p.cur == nil || p.row >= len(p.hdr) {
		return
	}
	for col, cell := range c {
		if !strings.Contains(cell, "ERR!") {
			continue
		}
		var labels []string
		if col < len(p.hdr[p.row]) {
			labels = headerLabels(p.hdr[p.row][col])
		}
		toks := cellTokens(cell)
		for k, tok := range toks {
			if tok != "ERR!" && !strings.HasPrefix(tok, "ERR!/") && !strings.HasSuffix(tok, "/ERR!") {
				continue
			}
			p.cur.addErrField(errFieldName(labelFor(labels, k, len(toks))))
		}
	}
}

// headerLabels splits a header cell at runs of two or more spaces:
// "Fan  Temp   Perf          Pwr:Usage/Cap" -> Fan, Temp, Perf, Pwr:Usage/Cap.
func headerLabels(h string) []string {
	var out []string
	for _, part := range strings.Split(strings.TrimSpace(h), "  ") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// cellTokens splits a data cell into its values, "99W / 130W" being one.
func cellTokens(c string) []string {
	f := strings.Fields(c)
	var out []string
	for k := 0; k < len(f); k++ {
		if f[k] == "/" && len(out) > 0 && k+1 < len(f) {
			out[len(out)-1] += "/" + f[k+1]
			k++
			continue
		}
		out = append(out, f[k])
	}
	return out
}

// labelFor pairs the k-th of n values with its header label: one to one
// when the counts agree; otherwise the last value goes with the last
// label (the name of a GPU row spans several words).
func labelFor(labels []string, k, n int) string {
	switch {
	case len(labels) == 0:
		return ""
	case n == len(labels) || k < len(labels)-1:
		return labels[min(k, len(labels)-1)]
	case k == n-1:
		return labels[len(labels)-1]
	}
	return labels[len(labels)-2]
}

// errFieldName is a header label as a report says it.
func errFieldName(label string) string {
	for _, m := range []struct{ in, name string }{
		{"Fan", "fan"}, {"Temp", "temperature"}, {"Perf", "performance state"}, {"Pwr", "power"},
		{"Memory", "memory usage"}, {"ECC", "volatile uncorrectable ECC"}, {"MIG", "MIG mode"},
		{"Persistence", "persistence mode"}, {"Bus", "bus ID"}, {"Disp", "display"},
		{"Util", "utilization"}, {"Compute", "compute mode"}, {"Name", "name"},
	} {
		if strings.Contains(label, m.in) {
			return m.name
		}
	}
	if label == "" {
		return "a value"
	}
	return strings.ToLower(label)
}

func (g *gpuFact) addErrField(name string) {
	h := g.healthFact()
	for _, f := range h.ErrFields {
		if f == name {
			return
		}
	}
	h.ErrFields = append(h.ErrFields, name)
}

// truncated marks a table cut inside its GPU blocks (its last line a GPU
// row, no closing border, no MIG devices box): the MIG devices of its
// MIG-enabled GPUs are unknown, not absent.
func (p *tableParser) truncated() {
	if p.endState != tGPUData || p.lastRule || p.sawMIG {
		return
	}
	for _, g := range p.r.gpus {
		g.migUnknown = true
	}
	p.r.gaps = append(p.r.gaps, fmt.Sprintf("%s: the nvidia-smi table is cut after its last GPU row (no closing border, no MIG devices box): GPUs and MIG devices after the cut are not judged", p.r.file))
}
