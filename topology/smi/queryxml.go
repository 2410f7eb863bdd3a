package smi

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/rankgate/rankgate/topology"
)

// `nvidia-smi -q -x` is the -q tree as XML under <nvidia_smi_log>, with a
// DOCTYPE naming a DTD that is never fetched. One pass of RawToken keeps the
// text of the few elements the model needs and checks that tags match; the
// rest (the long <supported_clocks> lists above all) costs no decoding,
// which keeps a 100 KB document in a few milliseconds. Like -q it names GPUs
// by bus ID (<gpu id="...">), so GPU indices come from the position or the
// prompt's -i list.

// xmlGPU holds the text of the elements read from one <gpu>.
type xmlGPU struct {
	ID, ProductName, UUID, Persistence string
	MIGCurrent, MIGPending             string
	BusID, FBTotal                     string
	// NUMA is not in the DTDs seen so far; read if a driver adds it.
	NUMA       string
	MIGDevices []xmlMIG
	// health holds the text of the health and fabric elements (health.go).
	health []xmlHealthText
	// healthOpen: the last health entry's element is still open.
	healthOpen bool
}

type xmlHealthText struct {
	key       healthKey
	name, tag string
	val       string
}

type xmlMIG struct {
	Index, GI, CI, SMs, Mem string
}

// field returns where the text of the element at path (below <gpu>) goes,
// or nil.
func (x *xmlGPU) field(path []string) *string {
	if f := x.gpuField(path); f != nil {
		return f
	}
	if len(path) < 3 || path[0] != "mig_devices" || path[1] != "mig_device" || len(x.MIGDevices) == 0 {
		return nil
	}
	return x.MIGDevices[len(x.MIGDevices)-1].field(path[2:])
}

func (x *xmlGPU) gpuField(path []string) *string {
	if k, name := xmlHealthKey(path); k != 0 {
		// One entry per element: text split by comments joins its own.
		if n := len(x.health); n > 0 && x.health[n-1].key == k && x.health[n-1].name == name && x.healthOpen {
			return &x.health[n-1].val
		}
		if len(x.health) >= 64 {
			return nil
		}
		x.health = append(x.health, xmlHealthText{key: k, name: name, tag: path[len(path)-1]})
		x.healthOpen = true
		return &x.health[len(x.health)-1].val
	}
	switch len(path) {
	case 1:
		switch path[0] {
		case "product_name":
			return &x.ProductName
		case "uuid":
			return &x.UUID
		case "persistence_mode":
			return &x.Persistence
		case "numa_node":
			return &x.NUMA
		}
	case 2:
		switch path[0] + "/" + path[1] {
		case "mig_mode/current_mig":
			return &x.MIGCurrent
		case "mig_mode/pending_mig":
			return &x.MIGPending
		case "pci/pci_bus_id":
			return &x.BusID
		case "fb_memory_usage/total":
			return &x.FBTotal
		}
	}
	return nil
}

// field: the same for a path below <mig_device>.
func (m *xmlMIG) field(rest []string) *string {
	switch {
	case len(rest) == 1 && rest[0] == "index":
		return &m.Index
	case len(rest) == 1 && rest[0] == "gpu_instance_id":
		return &m.GI
	case len(rest) == 1 && rest[0] == "compute_instance_id":
		return &m.CI
	case len(rest) == 2 && rest[0] == "fb_memory_usage" && rest[1] == "total":
		return &m.Mem
	case len(rest) == 3 && rest[0] == "device_attributes" && rest[1] == "shared" && rest[2] == "multiprocessor_count":
		return &m.SMs
	}
	return nil
}

// xmlParser reads a -q -x document token by token.
type xmlParser struct {
	s     section
	r     *report
	d     *xml.Decoder
	idxs  []int    // GPU indices of the prompt's -i option
	stack []string // open elements, root first
	x     *xmlGPU  // the open <gpu>
	// gpuLine: the decoder's line of the open <gpu>.
	gpuLine int
	pos     int // GPUs read so far
	driver  string
	cuda    string
	infoAt  int
	// done: the root element has ended.
	done bool
}

func parseQueryXML(s section, r *report) error {
	args, _ := s.args()
	text := s.text()
	d := xml.NewDecoder(strings.NewReader(text))
	d.Entity = xml.HTMLEntity
	d.CharsetReader = func(_ string, in io.Reader) (io.Reader, error) { return in, nil }
	p := &xmlParser{s: s, r: r, d: d, idxs: cmdIndices(args)}
	for !p.done {
		tok, err := d.RawToken()
		if err == io.EOF {
			if len(p.stack) == 0 {
				return s.errAt(s.first, "no <nvidia_smi_log> element")
			}
			return p.errAt(strings.Count(text, "\n")+1, "the XML ends before </nvidia_smi_log>")
		}
		if err != nil {
			return p.bad(err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			err = p.start(t)
		case xml.EndElement:
			err = p.end(t)
		case xml.CharData:
			err = p.charData(t)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// errAt: lines of the decoder count from the section's first line.
func (p *xmlParser) errAt(line int, msg string) error {
	return p.s.errAt(p.s.first+max(line, 1)-1, msg)
}

func (p *xmlParser) line() int {
	line, _ := p.d.InputPos()
	return line
}

func (p *xmlParser) bad(err error) error {
	var se *xml.SyntaxError
	if errors.As(err, &se) {
		return p.errAt(se.Line, "not well-formed `nvidia-smi -q -x` XML: "+se.Msg)
	}
	return p.errAt(p.line(), "not well-formed `nvidia-smi -q -x` XML: "+err.Error())
}

func (p *xmlParser) start(t xml.StartElement) error {
	line := p.line()
	name := t.Name.Local
	if len(p.stack) == 0 && name != "nvidia_smi_log" {
		return p.errAt(line, fmt.Sprintf("root element is <%s>, want <nvidia_smi_log>", clip(name)))
	}
	if len(p.stack) >= 64 {
		return p.errAt(line, "elements nest too deep")
	}
	p.stack = append(p.stack, name)
	if p.x != nil {
		p.x.healthOpen = false
	}
	switch {
	case len(p.stack) == 2 && name == "gpu":
		if p.pos >= maxGPUs {
			return p.errAt(line, "too many GPUs")
		}
		p.x, p.gpuLine = &xmlGPU{}, line
		for _, a := range t.Attr {
			if a.Name.Local == "id" {
				p.x.ID = a.Value
			}
		}
	case p.x != nil && len(p.stack) == 4 && p.stack[2] == "mig_devices" && name == "mig_device":
		if len(p.x.MIGDevices) >= maxMIGDevices {
			return p.errAt(line, "too many MIG devices")
		}
		p.x.MIGDevices = append(p.x.MIGDevices, xmlMIG{})
	}
	return nil
}

func (p *xmlParser) end(t xml.EndElement) error {
	if len(p.stack) == 0 || p.stack[len(p.stack)-1] != t.Name.Local {
		return p.errAt(p.line(), fmt.Sprintf("not well-formed `nvidia-smi -q -x` XML: </%s> closes no open element", clip(t.Name.Local)))
	}
	if len(p.stack) == 2 && p.x != nil {
		g := newGPUFact(p.s.first+p.gpuLine-1, p.pos)
		g.weakIndex = true
		if p.pos < len(p.idxs) {
			g.index, g.weakIndex = p.idxs[p.pos], false
		}
		if msg := xmlFacts(g, p.x); msg != "" {
			return p.errAt(p.gpuLine, msg)
		}
		p.r.addGPU(g)
		p.pos++
		p.x = nil
	}
	p.stack = p.stack[:len(p.stack)-1]
	if len(p.stack) > 0 {
		return nil
	}
	// The root's end: what follows is not ours to read.
	if p.pos == 0 {
		return p.errAt(p.line(), "the nvidia-smi -q -x output lists no GPU")
	}
	p.r.driver, p.r.cuda, p.r.infoLine = versionOrEmpty(strings.TrimSpace(p.driver)), versionOrEmpty(strings.TrimSpace(p.cuda)), p.infoAt
	p.done = true
	return nil
}

func (p *xmlParser) charData(t xml.CharData) error {
	var dst *string
	switch {
	case len(p.stack) == 2 && p.stack[1] == "driver_version":
		dst = &p.driver
		p.infoAt = lineNo(p.s.first + p.line() - 1)
	case len(p.stack) == 2 && p.stack[1] == "cuda_version":
		dst = &p.cuda
	case p.x != nil && len(p.stack) > 2:
		dst = p.x.field(p.stack[2:])
	}
	if dst == nil {
		return nil
	}
	// Values are short; text split by comments or CDATA would otherwise be
	// joined in quadratic time.
	if len(*dst)+len(t) > 1024 {
		return p.errAt(p.line(), fmt.Sprintf("<%s> text is too long", clip(p.stack[len(p.stack)-1])))
	}
	*dst += string(t)
	return nil
}

// xmlFacts fills g from a decoded <gpu>; it returns a message for the first
// malformed value.
func xmlFacts(g *gpuFact, x *xmlGPU) string {
	var err error
	tr := strings.TrimSpace
	if id := tr(x.ID); id != "" {
		if g.busID, err = normBusID(id); err != nil {
			return "<gpu id>: " + err.Error()
		}
	}
	if b := tr(x.BusID); !notAvailable(b) {
		nb, err := normBusID(b)
		if err != nil {
			return "<pci_bus_id>: " + err.Error()
		}
		if g.busID != "" && nb != g.busID {
			return fmt.Sprintf("<pci_bus_id> %s differs from <gpu id> %s", nb, g.busID)
		}
		g.busID = nb
	}
	g.name = tr(x.ProductName)
	if u := tr(x.UUID); !notAvailable(u) {
		if g.uuid, err = parseUUID(u, "GPU-"); err != nil {
			return "<uuid>: " + err.Error()
		}
	}
	g.persistence = parseOnOff(x.Persistence)
	var ok bool
	if g.migCurrent, ok = parseMIGMode(x.MIGCurrent); !ok {
		return fmt.Sprintf("<current_mig> %q is not Enabled, Disabled or N/A", clip(tr(x.MIGCurrent)))
	}
	if g.migPending, ok = parseMIGMode(x.MIGPending); !ok {
		return fmt.Sprintf("<pending_mig> %q is not Enabled, Disabled or N/A", clip(tr(x.MIGPending)))
	}
	for _, v := range []string{x.MIGCurrent, x.MIGPending} {
		if cur, pending, _ := parseMIGModeCell(v); pending != topology.ModeUnknown {
			g.migCurrent, g.migPending = cur, pending
		}
	}
	if g.memMiB, _, err = parseMiB(x.FBTotal); err != nil {
		return "<fb_memory_usage><total>: " + err.Error()
	}
	if n, err := strconv.Atoi(tr(x.NUMA)); err == nil && n >= 0 && n < 1<<16 {
		g.numa = &n
	}
	for _, h := range x.health {
		if err := g.setHealth(h.key, h.name, h.val); err != nil {
			return fmt.Sprintf("<%s>: %v", clip(h.tag), err)
		}
	}
	g.finishHealth()
	if len(x.MIGDevices) > maxMIGDevices {
		return "too many MIG devices"
	}
	for k, xm := range x.MIGDevices {
		m, msg := xmlMIGFact(g, k, xm)
		if msg != "" {
			return msg
		}
		g.migs = append(g.migs, m)
	}
	return ""
}

// xmlMIGFact reads MIG device k of GPU g; it returns a message for the
// first malformed value or a repeated index.
func xmlMIGFact(g *gpuFact, k int, xm xmlMIG) (migFact, string) {
	tr := strings.TrimSpace
	m := migFact{line: g.line, index: k, gi: -1, ci: -1}
	for _, f := range []struct {
		v   string
		max int
		dst *int
		tag string
	}{
		{xm.Index, maxMIGDevices, &m.index, "index"},
		{xm.GI, maxInstanceID, &m.gi, "gpu_instance_id"},
		{xm.CI, maxInstanceID, &m.ci, "compute_instance_id"},
		{xm.SMs, 1024, &m.sms, "multiprocessor_count"},
	} {
		v := tr(f.v)
		if notAvailable(v) {
			continue
		}
		n, err := parseIndex(v, f.max)
		if err != nil {
			return m, fmt.Sprintf("MIG device %d <%s>: %v", k, f.tag, err)
		}
		*f.dst = n
	}
	var err error
	if m.memMiB, _, err = parseMiB(xm.Mem); err != nil {
		return m, fmt.Sprintf("MIG device %d <fb_memory_usage><total>: %v", k, err)
	}
	for _, o := range g.migs {
		if o.index == m.index {
			return m, fmt.Sprintf("MIG device index %d appears twice", m.index)
		}
	}
	return m, ""
}
