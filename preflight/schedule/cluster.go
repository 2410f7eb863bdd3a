package schedule

import (
	"fmt"
	"sort"
	"strings"

	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// Engine judges workloads against clusters. It holds only read-only data
// (MIG catalog, known-bad drivers), so one Engine serves concurrent calls.
type Engine struct {
	catalog *topology.Catalog
	drivers *preflight.DriverTable
	// maxNames bounds the node and pod names quoted in one message.
	maxNames int
}

// Option configures an Engine.
type Option func(*Engine)

// WithCatalog replaces the embedded MIG profile catalog.
func WithCatalog(c *topology.Catalog) Option { return func(e *Engine) { e.catalog = c } }

// WithDriverTable replaces the embedded known-bad driver table.
func WithDriverTable(t *preflight.DriverTable) Option { return func(e *Engine) { e.drivers = t } }

// New returns an Engine with the embedded data tables unless replaced.
func New(opts ...Option) *Engine {
	e := &Engine{maxNames: 5}
	for _, o := range opts {
		o(e)
	}
	if e.catalog == nil {
		e.catalog = topology.DefaultCatalog()
	}
	if e.drivers == nil {
		e.drivers = preflight.DefaultDriverTable()
	}
	return e
}

// Cluster is a snapshot prepared for judging: per-node free capacity and
// GPU facts are computed once, then any number of workloads are judged
// against it. It is read-only after NewCluster and safe for concurrent
// Diagnose calls.
type Cluster struct {
	nodes []nodeInfo
	// Resources are interned: alloc and free are dense rows of len(res).
	res     map[string]int
	resName []string
	alloc   []int64 // len(nodes)*len(res)
	free    []int64
	// LabelErrors lists nodes whose GPU labels could not be read; those
	// nodes are judged as if the labels were absent.
	LabelErrors []error
}

type migState uint8

const (
	migOK migState = iota
	migPending
	migFailed
)

type nodeInfo struct {
	node  *Node
	gpu   GPU
	model *topology.GPUModel // nil: not in the catalog
	state migState
	tgt   target
	shape preflight.NodeShape
	// driver entries matching the node, by severity.
	badFail, badWarn []preflight.DriverEntry
	// gpuAlloc is the sum of the node's allocatable GPU resources.
	gpuAlloc int64
}

// NodeCount is the number of nodes in the snapshot.
func (c *Cluster) NodeCount() int { return len(c.nodes) }

// NewCluster prepares nodes for judging. The nodes are referenced, not
// copied: do not change them while the Cluster is in use.
func (e *Engine) NewCluster(nodes []Node) *Cluster {
	memo := newPrepMemo()
	infos := make([]nodeInfo, len(nodes))
	var errs []error
	for i := range nodes {
		ni, err := e.prepare(&nodes[i], memo)
		if err != nil {
			errs = append(errs, err)
		}
		infos[i] = ni
	}
	c := assemble(infos)
	c.LabelErrors = errs
	return c
}

// prepMemo shares what fleets repeat (GPU models, MIG targets, known-bad
// driver matches) between the nodes prepared with it. It grows with the
// distinct products, configs and node shapes only.
type prepMemo struct {
	models  map[string]*topology.GPUModel
	targets map[targetKey]target
	bad     map[string][2][]preflight.DriverEntry
}

type targetKey struct {
	config string
	model  *topology.GPUModel
}

func newPrepMemo() *prepMemo {
	return &prepMemo{models: map[string]*topology.GPUModel{}, targets: map[targetKey]target{}, bad: map[string][2][]preflight.DriverEntry{}}
}

// prepare computes one node's GPU facts; the error is its label error
// (the node is then judged as if the labels were absent).
func (e *Engine) prepare(n *Node, memo *prepMemo) (nodeInfo, error) {
	g, err := ParseGPULabels(n.Labels)
	if err != nil {
		err = fmt.Errorf("node %s: %w", n.Name, err)
	}
	ni := nodeInfo{node: n, gpu: g}
	base := g.BaseProduct()
	m, seen := memo.models[base]
	if !seen {
		m = e.modelOf(base)
		memo.models[base] = m
	}
	ni.model = m
	switch {
	case g.MIGConfigState == MIGStateFailed:
		ni.state = migFailed
	case g.MIGConfigState == MIGStatePending || g.MIGConfigState == MIGStateRebooting || g.PausedForMIGChange:
		ni.state = migPending
	}
	// Fleets have few distinct configs and shapes: compute each once.
	tk := targetKey{g.MIGConfig, m}
	t, ok := memo.targets[tk]
	if !ok {
		t = targetOf(g.MIGConfig, m)
		memo.targets[tk] = t
	}
	ni.tgt = t
	ni.shape = shapeOf(n, g)
	sk := fmt.Sprint(ni.shape.Driver, ni.shape.HasMIG, ni.shape.HasFull, ni.shape.Products, ni.shape.Profiles)
	bad, ok := memo.bad[sk]
	if !ok {
		for _, d := range e.drivers.Match(ni.shape) {
			if d.Severity == verdict.SeverityFail {
				bad[0] = append(bad[0], d)
			} else {
				bad[1] = append(bad[1], d)
			}
		}
		memo.bad[sk] = bad
	}
	ni.badFail, ni.badWarn = bad[0], bad[1]
	for r, v := range n.Allocatable {
		if topology.IsGPUResource(r) && v > 0 {
			ni.gpuAlloc += v
		}
	}
	return ni, err
}

// assemble lays prepared nodes out as a Cluster: interned resources and
// the dense capacity rows. It reads no labels.
func assemble(infos []nodeInfo) *Cluster {
	c := &Cluster{nodes: infos, res: map[string]int{}}
	intern := func(name string) {
		if _, ok := c.res[name]; !ok {
			c.res[name] = len(c.resName)
			c.resName = append(c.resName, name)
		}
	}
	var labelsOnly bool
	for i := range infos {
		n := infos[i].node
		for r := range n.Allocatable {
			intern(r)
		}
		for r := range n.Capacity {
			intern(r)
		}
		labelsOnly = labelsOnly || n.LabelsOnly
	}
	if labelsOnly {
		for _, r := range labelsOnlyUnknown {
			intern(r)
		}
	}
	nr := len(c.resName)
	c.alloc = make([]int64, len(infos)*nr)
	c.free = make([]int64, len(infos)*nr)
	for i := range infos {
		n := infos[i].node
		row := i * nr
		if n.LabelsOnly {
			for _, r := range labelsOnlyUnknown {
				j := c.res[r]
				c.alloc[row+j], c.free[row+j] = Unknown, Unknown
			}
		}
		for r, v := range n.Allocatable {
			j := c.res[r]
			c.alloc[row+j] = v
			c.free[row+j] = v - n.Used[r]
		}
	}
	return c
}

// labelsOnlyUnknown are the resources every node has that labels do not
// tell.
var labelsOnlyUnknown = []string{ResourceCPU, ResourceMem, ResourcePods, "ephemeral-storage"}

func (e *Engine) modelOf(product string) *topology.GPUModel {
	if product == "" {
		return nil
	}
	if m, ok := e.catalog.Model(product); ok {
		return m
	}
	// GFD writes spaces as dashes; the catalog matches either way.
	if m, ok := e.catalog.Model(strings.ReplaceAll(product, "-", " ")); ok {
		return m
	}
	return nil
}

// shapeOf fills the known-bad-driver shape from labels and resources.
func shapeOf(n *Node, g GPU) preflight.NodeShape {
	s := preflight.NodeShape{Driver: g.Driver}
	if g.Product != "" {
		s.Products = []string{g.BaseProduct()}
	}
	seen := map[string]bool{}
	addProfile := func(p string) {
		if !seen[p] {
			seen[p] = true
			s.Profiles = append(s.Profiles, p)
		}
	}
	for p, l := range g.MIGProfiles {
		if l.Count > 0 {
			s.HasMIG = true
			addProfile(p)
		}
	}
	for _, rl := range []Resources{n.Capacity, n.Allocatable} {
		for r, v := range rl {
			if p, ok := MIGProfileOf(r); ok && v > 0 {
				s.HasMIG = true
				addProfile(p)
			}
		}
	}
	if sp := g.SingleProfile(); sp != "" {
		s.HasMIG = true
		addProfile(sp)
	} else if !g.Invalid() {
		if n.Capacity[ResourceGPU] > 0 || n.Allocatable[ResourceGPU] > 0 {
			s.HasFull = true
		}
	}
	if g.Invalid() {
		s.HasMIG = true
	}
	sort.Strings(s.Profiles)
	return s
}

// allocOf and freeOf read the dense rows; an unknown resource is 0.
func (c *Cluster) allocOf(node, res int) int64 {
	if res < 0 {
		return 0
	}
	return c.alloc[node*len(c.resName)+res]
}

func (c *Cluster) freeOf(node, res int) int64 {
	if res < 0 {
		return 0
	}
	return c.free[node*len(c.resName)+res]
}

func (c *Cluster) resIndex(name string) int {
	if i, ok := c.res[name]; ok {
		return i
	}
	return -1
}

// kindOf says what nvidia.com/gpu means on a node: a full GPU, or under the
// single strategy a MIG instance of one profile.
func (n *nodeInfo) gpuMeaning() string {
	if p := n.gpu.SingleProfile(); p != "" {
		return "MIG " + p
	}
	return "full GPU"
}

// migDescribe is the node's MIG setup for messages.
func (n *nodeInfo) migDescribe() string {
	parts := []string{"mig.strategy=" + orUnset(n.gpu.Strategy), "mig.config=" + orUnset(n.gpu.MIGConfig)}
	return strings.Join(parts, ", ")
}

// describe is a short description of a node's GPUs for messages.
func (n *nodeInfo) describe() string {
	var parts []string
	if m := n.model; m != nil {
		parts = append(parts, m.Name)
	} else if p := n.gpu.BaseProduct(); p != "" {
		parts = append(parts, p)
	}
	if n.gpu.Strategy != "" {
		parts = append(parts, "mig.strategy="+n.gpu.Strategy)
	}
	if n.gpu.MIGConfig != "" {
		parts = append(parts, "mig.config="+n.gpu.MIGConfig)
	}
	return strings.Join(parts, ", ")
}
