package schedule

import (
	"slices"
	"sort"
)

// Model is a cluster kept current one node at a time, for a caller that
// watches nodes (the controller's informers): a node change prepares that
// node only (labels parsed, GPU facts, known-bad drivers), and Cluster lays
// the prepared nodes out as a snapshot, without reading any labels again.
// A Model's Cluster judges exactly as NewCluster over the same nodes in
// name order.
//
// A Model is not safe for concurrent use; the Clusters it returns are
// read-only and stay valid (and unchanged) after later Set and Delete calls.
type Model struct {
	e     *Engine
	memo  *prepMemo
	nodes map[string]*prepared
	names []string // sorted
	snap  *Cluster // nil: changed since the last Cluster
}

type prepared struct {
	node Node
	info nodeInfo
	err  error
}

// NewModel returns an empty Model.
func (e *Engine) NewModel() *Model {
	return &Model{e: e, memo: newPrepMemo(), nodes: map[string]*prepared{}}
}

// Set adds or replaces the node named n.Name. The node's maps are
// referenced, not copied: do not change them afterwards.
func (m *Model) Set(n Node) {
	p := &prepared{node: n}
	p.info, p.err = m.e.prepare(&p.node, m.memo)
	if _, ok := m.nodes[n.Name]; !ok {
		i, _ := slices.BinarySearch(m.names, n.Name)
		m.names = slices.Insert(m.names, i, n.Name)
	}
	m.nodes[n.Name] = p
	m.snap = nil
}

// Delete removes a node; it reports whether the node was there.
func (m *Model) Delete(name string) bool {
	if _, ok := m.nodes[name]; !ok {
		return false
	}
	delete(m.nodes, name)
	if i, ok := slices.BinarySearch(m.names, name); ok {
		m.names = slices.Delete(m.names, i, i+1)
	}
	m.snap = nil
	return true
}

// Len is the number of nodes.
func (m *Model) Len() int { return len(m.nodes) }

// Cluster is the current snapshot, assembled once per change.
func (m *Model) Cluster() *Cluster {
	if m.snap != nil {
		return m.snap
	}
	infos := make([]nodeInfo, len(m.names))
	var errs []error
	for i, name := range m.names {
		p := m.nodes[name]
		infos[i] = p.info
		if p.err != nil {
			errs = append(errs, p.err)
		}
	}
	c := assemble(infos)
	c.LabelErrors = errs
	m.snap = c
	return c
}

// WithUsed is c with more requests held on some nodes (by node name;
// unknown nodes are ignored), as if they were in those nodes' Used. It
// shares everything with c but the free capacity; c is unchanged.
func (c *Cluster) WithUsed(used map[string]Resources) *Cluster {
	if len(used) == 0 {
		return c
	}
	out := *c
	out.free = slices.Clone(c.free)
	out.LabelErrors = slices.Clip(c.LabelErrors)
	nr := len(c.resName)
	for name, rs := range used {
		i := sort.Search(len(c.nodes), func(i int) bool { return c.nodes[i].node.Name >= name })
		if i == len(c.nodes) || c.nodes[i].node.Name != name {
			// Not in name order (NewCluster keeps the caller's order).
			i = slices.IndexFunc(c.nodes, func(n nodeInfo) bool { return n.node.Name == name })
			if i < 0 {
				continue
			}
		}
		// As NewCluster: Used counts against allocatable resources only.
		alloc := c.nodes[i].node.Allocatable
		for r, v := range rs {
			if _, ok := alloc[r]; ok {
				out.free[i*nr+c.res[r]] -= v
			}
		}
	}
	return &out
}
