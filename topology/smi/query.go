package smi

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rankgate/rankgate/topology"
)

// `nvidia-smi -q` is an indented tree of "Key : value" lines and section
// names, one top-level "GPU <bus id>" section per GPU:
//
//	GPU 00000000:00:09.0
//	    Product Name                   : NVIDIA H100 80GB HBM3
//	    MIG Mode
//	        Current                    : Enabled
//	    MIG Device
//	        Index                      : 0
//	        GPU Instance ID            : 2
//	        Device Attributes
//	            Shared
//	                Multiprocessor count : 60
//	        Shared FB Memory Usage
//	            Total                  : 40448 MiB
//
// Older drivers nest the MIG Device blocks in "MIG Devices" and call the
// memory block "FB Memory Usage"; both are read. Sections nvidia-smi adds
// over time are skipped. -q names GPUs by bus ID only: the GPU index is the
// position in the output (nvidia-smi lists GPUs in index order), or the
// `-i` list of the prompt line when there is one; an output of selected
// GPUs without its prompt line is numbered from 0, unless another input
// names the same bus ID or UUID.

// splitKV splits "Product Name   : NVIDIA H100"; a line without ": " is a
// section name. "GPU 00000000:00:09.0" is a section: its colons are not
// followed by a space.
func splitKV(t string) (key, val string, ok bool) {
	i := strings.Index(t, ": ")
	if i < 0 {
		if strings.HasSuffix(t, ":") && !strings.HasSuffix(t, "::") {
			return strings.TrimSpace(t[:len(t)-1]), "", true
		}
		return "", "", false
	}
	return strings.TrimSpace(t[:i]), strings.TrimSpace(t[i+2:]), true
}

func indentOf(l string) int {
	n := 0
	for _, c := range l {
		switch c {
		case ' ':
			n++
		case '\t':
			n += 4
		default:
			return n
		}
	}
	return n
}

// queryParser reads a -q tree line by line.
type queryParser struct {
	s     section
	r     *report
	idxs  []int // GPU indices of the prompt's -i option
	stack []frame
	g     *gpuFact
	mig   *migFact
	// migDepth is the stack depth of the open MIG Device section.
	migDepth int
	// pos is the number of GPU sections so far.
	pos int
}

func parseQuery(s section, r *report) error {
	args, _ := s.args()
	p := &queryParser{s: s, r: r, idxs: cmdIndices(args), migDepth: -1}
	for k, l := range s.body() {
		if isBlank(l) {
			continue
		}
		if err := p.line(s.first+k, l); err != nil {
			return err
		}
	}
	if p.g != nil {
		p.closeMIG()
	}
	for _, g := range p.r.gpus {
		g.finishHealth()
	}
	if p.pos == 0 {
		return s.errAt(s.first, "the nvidia-smi -q output lists no GPU")
	}
	return nil
}

func (p *queryParser) closeMIG() {
	if p.mig == nil {
		return
	}
	if p.mig.index < 0 {
		p.mig.index = len(p.g.migs)
	}
	p.g.migs = append(p.g.migs, *p.mig)
	p.mig, p.migDepth = nil, -1
}

func (p *queryParser) line(i int, l string) error {
	ind := indentOf(l)
	t := strings.TrimSpace(l)
	key, val, isKV := splitKV(t)
	for len(p.stack) > 0 && p.stack[len(p.stack)-1].indent >= ind {
		if len(p.stack)-1 == p.migDepth {
			p.closeMIG()
		}
		p.stack = p.stack[:len(p.stack)-1]
	}
	if ind == 0 || len(p.stack) == 0 {
		return p.topLine(i, ind, t, key, val, isKV)
	}
	if p.g == nil {
		if !isKV {
			p.stack = append(p.stack, frame{ind, t})
		}
		return nil
	}
	if !isKV {
		p.stack = append(p.stack, frame{ind, t})
		if t == "MIG Device" && p.mig == nil {
			if len(p.g.migs) >= maxMIGDevices {
				return p.s.errAt(i, "too many MIG devices")
			}
			m := newMIGFact(i)
			p.mig, p.migDepth = &m, len(p.stack)-1
		}
		return nil
	}
	var err error
	if p.mig != nil {
		err = queryMIGField(p.mig, p.stack[p.migDepth+1:], key, val)
	} else {
		err = queryGPUField(p.g, p.stack[1:], key, val)
	}
	if err != nil {
		return p.s.errAt(i, fmt.Sprintf("%s: %v", key, err))
	}
	return nil
}

// topLine reads a line outside any GPU section: a "GPU <bus id>" section,
// the driver and CUDA versions, or an nvidia-smi failure.
func (p *queryParser) topLine(i, ind int, t, key, val string, isKV bool) error {
	s, r := p.s, p.r
	p.closeMIG()
	p.g = nil
	switch {
	case !isKV && strings.HasPrefix(t, "GPU "):
		if p.pos >= maxGPUs {
			return s.errAt(i, "too many GPUs")
		}
		bus, err := normBusID(strings.TrimPrefix(t, "GPU "))
		if err != nil {
			return s.errAt(i, err.Error())
		}
		g := newGPUFact(i, p.pos)
		g.weakIndex = true
		if p.pos < len(p.idxs) {
			g.index, g.weakIndex = p.idxs[p.pos], false
		}
		g.busID = bus
		p.g = r.addGPU(g)
		p.pos++
	case isKV && key == "Driver Version":
		r.driver, r.infoLine = versionOrEmpty(val), lineNo(i)
	case isKV && key == "CUDA Version":
		r.cuda = versionOrEmpty(val)
	}
	if !isKV {
		p.stack = append(p.stack, frame{ind, t})
	}
	if msg, ok := smiFailure(t); ok {
		return s.errAt(i, msg)
	}
	return nil
}

func versionOrEmpty(v string) string {
	if isVersion(v) {
		return v
	}
	return ""
}

// frame is an open section of the -q tree.
type frame struct {
	indent int
	name   string
}

// sectionPath joins the names of open sections: "MIG Mode",
// "Device Attributes/Shared".
func sectionPath(fs []frame) string {
	switch len(fs) {
	case 0:
		return ""
	case 1:
		return fs[0].name
	}
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.name
	}
	return strings.Join(out, "/")
}

func queryGPUField(g *gpuFact, path []frame, key, val string) error {
	if k, name := queryHealthKey(sectionPath(path), key); k != 0 {
		return g.setHealth(k, name, val)
	}
	switch sectionPath(path) {
	case "":
		return queryGPUTopField(g, key, val)
	case "MIG Mode":
		if key != "Current" && key != "Pending" {
			return nil
		}
		mode, ok := parseMIGMode(val)
		if !ok {
			return fmt.Errorf("%q is not Enabled, Disabled or N/A", clip(val))
		}
		if cur, pending, _ := parseMIGModeCell(val); pending != topology.ModeUnknown {
			// "Disabled*": the word is the pending mode, the GPU is still
			// in the other one, whichever field carries the asterisk.
			g.migCurrent, g.migPending = cur, pending
		} else if key == "Current" {
			g.migCurrent = mode
		} else {
			g.migPending = mode
		}
	case "PCI":
		if key == "Bus Id" && !notAvailable(val) {
			b, err := normBusID(val)
			if err != nil {
				return err
			}
			if g.busID != "" && b != g.busID {
				return fmt.Errorf("bus ID %s differs from the GPU's %s", b, g.busID)
			}
			g.busID = b
		}
		queryNUMA(g, key, val)
	case "FB Memory Usage":
		if key == "Total" {
			n, _, err := parseMiB(val)
			if err != nil {
				return err
			}
			g.memMiB = n
		}
	}
	return nil
}

// queryGPUTopField reads a field directly under the GPU section.
func queryGPUTopField(g *gpuFact, key, val string) error {
	switch key {
	case "Product Name":
		g.name = val
	case "GPU UUID", "UUID":
		if notAvailable(val) {
			return nil
		}
		u, err := parseUUID(val, "GPU-")
		if err != nil {
			return err
		}
		g.uuid = u
	case "Persistence Mode":
		g.persistence = parseOnOff(val)
	default:
		queryNUMA(g, key, val)
	}
	return nil
}

// queryNUMA reads the GPU's NUMA node, which drivers put under the GPU or
// under PCI, by several names.
func queryNUMA(g *gpuFact, key, val string) {
	if key != "NUMA Node" && key != "NUMA Affinity" && key != "NUMA Node ID" {
		return
	}
	if n, err := strconv.Atoi(val); err == nil && n >= 0 && n < 1<<16 {
		g.numa = &n
	}
}

func queryMIGField(m *migFact, path []frame, key, val string) error {
	p := sectionPath(path)
	num := func(max int) (int, bool, error) {
		if notAvailable(val) {
			return 0, false, nil
		}
		n, err := parseIndex(val, max)
		return n, err == nil, err
	}
	var err error
	var n int
	var ok bool
	switch {
	case p == "" && key == "Index":
		if n, ok, err = num(maxMIGDevices); ok {
			m.index = n
		}
	case p == "" && key == "GPU Instance ID":
		if n, ok, err = num(maxInstanceID); ok {
			m.gi = n
		}
	case p == "" && key == "Compute Instance ID":
		if n, ok, err = num(maxInstanceID); ok {
			m.ci = n
		}
	case strings.HasPrefix(p, "Device Attributes") && key == "Multiprocessor count":
		if n, ok, err = num(1024); ok {
			m.sms = n
		}
	case (p == "Shared FB Memory Usage" || p == "FB Memory Usage") && key == "Total":
		var v uint64
		v, _, err = parseMiB(val)
		m.memMiB = v
	}
	return err
}
