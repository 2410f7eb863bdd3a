package smi

import (
	"sort"
	"strings"

	"github.com/rankgate/rankgate/topology"
)

// When NVML cannot open a GPU, nvidia-smi prints one line for it instead
// of its rows, in any output (alone, above the table, among the -L lines):
//
//	Unable to determine the device handle for GPU0000:07:00.0: Unknown Error
//	Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. Reboot the system to recover this GPU
//
// (Windows builds say "Unable to detect the device handle"; bus IDs come
// with 3-, 4- or 8-digit domains, and people mask them.) Unknown Error and
// GPU is lost are a GPU fallen off the bus (Xid 79): a health fact, read
// as Health.Lost. "GPU requires reset" is Health.ResetRequired. Any other
// reason (Insufficient Permissions, ...) says nothing about the GPU and
// stays an error about the input.

// handleFact is one GPU that nvidia-smi could not open.
type handleFact struct {
	line  int
	index int // -1: the line gives no index ("GPU 2: Unable to ..." does)
	busID string
	text  string // the line as nvidia-smi printed it
	lost  bool   // else: reset required
}

var handlePrefixes = []string{"Unable to determine the device handle for", "Unable to detect the device handle for"}

// parseHandleLine reads a device-handle failure line. ok is false for any
// other line, and for a failure whose reason is not about the GPU's state.
func parseHandleLine(t string) (handleFact, bool) {
	f := handleFact{index: -1}
	t = strings.TrimSpace(t)
	var rest string
	found := false
	for _, p := range handlePrefixes {
		if i := strings.Index(t, p); i >= 0 {
			if pre := strings.TrimSpace(t[:i]); pre != "" {
				// "GPU 2: Unable to ..." carries the index.
				num, ok := strings.CutPrefix(pre, "GPU ")
				num, ok2 := strings.CutSuffix(strings.TrimSpace(num), ":")
				if !ok || !ok2 {
					return f, false
				}
				n, err := parseIndex(num, maxGPUs)
				if err != nil {
					return f, false
				}
				f.index = n
			}
			rest, found = strings.TrimSpace(t[i+len(p):]), true
			break
		}
	}
	if !found {
		return f, false
	}
	bus, reason, ok := strings.Cut(rest, ": ")
	if !ok {
		return f, false
	}
	switch r := strings.ToLower(reason); {
	case strings.Contains(r, "lost"), strings.Contains(r, "unknown error"):
		f.lost = true
	case strings.Contains(r, "requires reset"), strings.Contains(r, "reset required"):
	default:
		return f, false
	}
	bus = strings.TrimSpace(bus)
	if len(bus) >= 3 && strings.EqualFold(bus[:3], "gpu") {
		bus = strings.TrimSpace(bus[3:])
	}
	if b, err := normBusID(bus); err == nil {
		f.busID = b // a masked bus ID ("******") stays unknown
	}
	f.text = clip(t)
	return f, true
}

// takeHandleLines finds the device-handle failure lines of a document,
// records them and blanks them, so that the parsers of the outputs around
// them read the other GPUs' rows as usual.
//
// With a lost GPU, "No devices were found" that may follow says that no
// other GPU could be listed: it is blanked too.
func (d *doc) takeHandleLines() {
	for i, l := range d.lines {
		if !strings.Contains(l, "device handle for") {
			continue
		}
		if f, ok := parseHandleLine(l); ok {
			f.line = lineNo(i)
			d.handles = append(d.handles, f)
			d.lines[i] = ""
		}
	}
	if len(d.handles) == 0 {
		return
	}
	for i, l := range d.lines {
		if strings.TrimSpace(l) == "No devices were found" {
			d.lines[i] = ""
		}
	}
}

// addHandles records GPUs that nvidia-smi could not open; finishHandles
// puts them into the inventory once every output is merged.
func (b *builder) addHandles(file string, hs []handleFact) {
	for _, h := range hs {
		b.handles = append(b.handles, fileHandle{h, file})
	}
}

type fileHandle struct {
	handleFact
	file string
}

// finishHandles marks the GPUs nvidia-smi could not open: the GPU another
// output lists with that bus ID (or index), or a GPU of its own. Such a GPU
// has no index in the failure line; nvidia-smi numbers GPUs in PCI bus
// order, so it takes its place in that order when that index is free, and
// the lowest free index otherwise.
func (b *builder) finishHandles() {
	for _, h := range b.handles {
		var m *gpuState
		if h.busID != "" {
			m = b.find(func(g *gpuState) bool { return g.g.PCIBusID == h.busID })
		}
		if m == nil && h.index >= 0 {
			m = b.find(func(g *gpuState) bool { return g.g.Index == h.index })
		}
		if m == nil {
			idx := h.index
			if idx < 0 {
				idx = b.busOrderIndex(h.busID)
			}
			m = &gpuState{g: topology.GPU{Index: idx, PCIBusID: h.busID}, from: map[string]at{"index": {h.file, h.line}}}
			b.gpus = append(b.gpus, m)
		}
		if m.g.Health == nil {
			m.g.Health = &topology.Health{}
		}
		hl := m.g.Health
		if h.lost {
			hl.Lost = true
		} else {
			t := true
			hl.ResetRequired = &t
		}
		if hl.LostReason == "" {
			hl.LostReason = "nvidia-smi: " + h.text
		}
	}
}

// busOrderIndex is the index a GPU with bus ID bus has among the GPUs
// known so far in PCI bus order, when free; else the lowest free index.
func (b *builder) busOrderIndex(bus string) int {
	used := map[int]bool{}
	buses := []string{}
	allBus := bus != ""
	for _, g := range b.gpus {
		used[g.g.Index] = true
		if g.g.PCIBusID == "" {
			allBus = false
		}
		buses = append(buses, g.g.PCIBusID)
	}
	if allBus {
		buses = append(buses, bus)
		sort.Strings(buses)
		p := sort.SearchStrings(buses, bus)
		if !used[p] && p < maxGPUs {
			return p
		}
	}
	for i := 0; ; i++ {
		if !used[i] {
			return i
		}
	}
}
