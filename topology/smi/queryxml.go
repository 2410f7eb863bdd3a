package smi

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// `nvidia-smi -q -x` is the -q tree as XML under <nvidia_smi_log>, with a
// DOCTYPE naming a DTD that is never fetched. Only the elements the model
// needs are decoded; the rest (the long <supported_clocks> lists above all)
// are skipped. Like -q it names GPUs by bus ID (<gpu id="...">), so GPU
// indices come from the position or the prompt's -i list.

type xmlGPU struct {
	ID          string `xml:"id,attr"`
	ProductName string `xml:"product_name"`
	UUID        string `xml:"uuid"`
	Persistence string `xml:"persistence_mode"`
	MIGCurrent  string `xml:"mig_mode>current_mig"`
	MIGPending  string `xml:"mig_mode>pending_mig"`
	MIGDevices  []struct {
		Index string `xml:"index"`
		GI    string `xml:"gpu_instance_id"`
		CI    string `xml:"compute_instance_id"`
		SMs   string `xml:"device_attributes>shared>multiprocessor_count"`
		Mem   string `xml:"fb_memory_usage>total"`
	} `xml:"mig_devices>mig_device"`
	BusID   string `xml:"pci>pci_bus_id"`
	FBTotal string `xml:"fb_memory_usage>total"`
	// Not in the DTDs seen so far; read if a driver adds it.
	NUMA string `xml:"numa_node"`
}

func parseQueryXML(s section, r *report) error {
	args, _ := s.args()
	idxs := cmdIndices(args)
	d := xml.NewDecoder(strings.NewReader(s.text()))
	d.Entity = xml.HTMLEntity
	d.CharsetReader = func(_ string, in io.Reader) (io.Reader, error) { return in, nil }
	// Lines of the decoder count from the section's first line.
	errAt := func(line int, msg string) error { return s.errAt(s.first+max(line, 1)-1, msg) }
	syntax := func(err error) error {
		var se *xml.SyntaxError
		if errors.As(err, &se) {
			return errAt(se.Line, "not well-formed `nvidia-smi -q -x` XML: "+se.Msg)
		}
		line, _ := d.InputPos()
		return errAt(line, "not well-formed `nvidia-smi -q -x` XML: "+err.Error())
	}
	inRoot := false
	pos := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			if !inRoot {
				return s.errAt(s.first, "no <nvidia_smi_log> element")
			}
			return errAt(strings.Count(s.text(), "\n")+1, "the XML ends before </nvidia_smi_log>")
		}
		if err != nil {
			return syntax(err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			line, _ := d.InputPos()
			if !inRoot {
				if t.Name.Local != "nvidia_smi_log" {
					return errAt(line, fmt.Sprintf("root element is <%s>, want <nvidia_smi_log>", clip(t.Name.Local)))
				}
				inRoot = true
				continue
			}
			var err error
			switch t.Name.Local {
			case "driver_version":
				var v string
				if err = d.DecodeElement(&v, &t); err == nil {
					r.driver, r.infoLine = versionOrEmpty(strings.TrimSpace(v)), lineNo(s.first+line-1)
				}
			case "cuda_version":
				var v string
				if err = d.DecodeElement(&v, &t); err == nil {
					r.cuda = versionOrEmpty(strings.TrimSpace(v))
				}
			case "gpu":
				if pos >= maxGPUs {
					return errAt(line, "too many GPUs")
				}
				var x xmlGPU
				if err = d.DecodeElement(&x, &t); err == nil {
					g := newGPUFact(s, s.first+line-1, pos)
					g.weakIndex = true
					if pos < len(idxs) {
						g.index, g.weakIndex = idxs[pos], false
					}
					if msg := xmlFacts(g, &x); msg != "" {
						return errAt(line, msg)
					}
					r.addGPU(g)
					pos++
				}
			default:
				err = d.Skip()
			}
			if err != nil {
				return syntax(err)
			}
		case xml.EndElement:
			// The root's end: what follows is not ours to read.
			if pos == 0 {
				line, _ := d.InputPos()
				return errAt(line, "the nvidia-smi -q -x output lists no GPU")
			}
			return nil
		}
	}
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
	if b := tr(x.BusID); b != "" && b != "N/A" {
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
	if u := tr(x.UUID); u != "" && u != "N/A" {
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
	if g.memMiB, _, err = parseMiB(x.FBTotal); err != nil {
		return "<fb_memory_usage><total>: " + err.Error()
	}
	if n, err := strconv.Atoi(tr(x.NUMA)); err == nil && n >= 0 && n < 1<<16 {
		g.numa = &n
	}
	if len(x.MIGDevices) > maxMIGDevices {
		return "too many MIG devices"
	}
	for k, xm := range x.MIGDevices {
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
			if v == "" || v == "N/A" {
				continue
			}
			n, err := parseIndex(v, f.max)
			if err != nil {
				return fmt.Sprintf("MIG device %d <%s>: %v", k, f.tag, err)
			}
			*f.dst = n
		}
		if m.memMiB, _, err = parseMiB(xm.Mem); err != nil {
			return fmt.Sprintf("MIG device %d <fb_memory_usage><total>: %v", k, err)
		}
		for _, o := range g.migs {
			if o.index == m.index {
				return fmt.Sprintf("MIG device index %d appears twice", m.index)
			}
		}
		g.migs = append(g.migs, m)
	}
	return ""
}
