package smi

import (
	"fmt"

	"github.com/rankgate/rankgate/topology"
)

// Facts: what each parsed nvidia-smi output says, before the outputs are
// merged (merge.go). The parsers (list.go, table.go, query.go, ...) fill
// them; zero values mean the output does not say.

// report is what one output says, before it is merged with the others.
type report struct {
	file     string
	kind     Kind
	driver   string
	cuda     string
	infoLine int // line of the driver and CUDA versions
	gpus     []*gpuFact
	links    []linkFact
	handles  []handleFact
	// gaps say what the output leaves out (elisions, a cut table).
	gaps []string
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
	migOn bool
	// health and fabric: -q and -q -x only (health.go).
	health   *topology.Health
	fabric   *topology.Fabric
	migs     []migFact
	profiles []profileFact
	// nvlinks: nvidia-smi nvlink -s only (nvlink.go).
	nvlinks []topology.NVLink
	// migUnknown: the output was cut before its MIG devices section.
	migUnknown bool
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
	name         string
	sms          int
	p2p          bool
	memMiB       uint64
	maxInstances int
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
