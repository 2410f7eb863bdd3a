package smi

import (
	"errors"
	"sort"
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
	b.finishHandles()
	inv, err := b.finish()
	if err != nil {
		return nil, err
	}
	inv.Source = "nvidia-smi:" + strings.Join(names, ",")
	inv.Gaps = b.gaps
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
	if len(d.handles) > 0 {
		reps = append(reps, &report{file: in.Name, kind: KindDeviceHandle, handles: d.handles})
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
	case KindNVLinkStatus:
		return parseNVLinkStatus(s, r)
	}
	return s.errAt(s.first, "unknown output kind "+string(k))
}
