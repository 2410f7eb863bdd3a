package schedule

import (
	"strings"

	"github.com/rankgate/rankgate/topology"
)

// Classification: what the cluster offers each pod set and the job, from
// the cluster and the workload alone. It adds no finding; the explain_*
// files turn its classes into findings.

// setVerdict is the family of a pod set's class.
type setVerdict int

const (
	// setNoNodeFits: no node could hold one pod even empty.
	setNoNodeFits setVerdict = iota
	// setLosingShape: the only nodes that hold a pod are being changed by
	// mig-manager to a layout without its shape.
	setLosingShape
	// setExcluded: nodes hold a pod, but the pod's placement rules or the
	// nodes' state exclude all of them.
	setExcluded
	// setUsable: some nodes are usable now or after a change, or are only
	// held back by a failed MIG change or a known-bad driver.
	setUsable
)

// setClass is the classification of one pod set.
type setClass struct {
	verdict setVerdict
	// fitting counts the nodes that hold one pod when empty.
	fitting int
	// maxAlloc and maxNode: per job resource, the most one node offers and
	// where (setNoNodeFits).
	maxAlloc []int64
	maxNode  []int
	// missing: job resources the set asks for that no node offers, in job
	// resource order; GPU resources carry what the nodes say about them.
	missing []missingResource
	// excluded: nodes that hold a pod but do not admit it, by reason;
	// transient: those of them that may come back (cordon, not Ready, a
	// condition taint).
	excluded  map[string][]int32
	transient []int32
	// Nodes that hold a pod and admit it, by state: usable now (good), a
	// MIG change pending (pending), failed (failed), a known-bad driver
	// (bad), and nodes whose pending change removes the shape (losing).
	good, pending, failed, bad, losing []int32

	// The set's standing for the gang step. now: nodes usable with their
	// free capacity; later: nodes usable when empty, including nodes that a
	// pending MIG change will give the shape.
	now, later []int32
	// laterUnknown: a pending node's future capacity is unknown.
	laterUnknown bool
	// pendingOnly lists pending-reconfiguration nodes among later.
	pendingOnly []int32
	blocked     bool // a hopeless finding explains this set
	waiting     bool // the set waits for MIG reconfiguration or for nodes to come back
	mig         bool // its ranks get MIG instances
}

// missingResource is a requested resource no node offers.
type missingResource struct {
	k   int       // job resource index
	gpu *gpuOffer // nil unless a GPU resource
}

// gpuOffer says why no node offers GPU resource r: nodes that will offer
// it after a pending MIG change (admitting the pod or not), nodes whose
// change failed, nodes whose layout should offer it but whose labels or
// resources are inconsistent, nodes that offer the shape under the other
// MIG strategy, nodes that list r with capacity 0 (stale), and nodes whose
// GPU model could be reconfigured to offer it.
type gpuOffer struct {
	r                                                                 string
	pendingN, pendingX, failedN, invalidN, strategyN, reconfN, staleN []int32
}

// classifySet finds the nodes a pod set can use, or the reason it can use
// none.
func (d *diag) classifySet(s *setState) setClass {
	cl := setClass{
		maxAlloc: make([]int64, len(s.req)),
		maxNode:  make([]int, len(s.req)),
		excluded: map[string][]int32{},
	}
	for i := range d.c.nodes {
		if d.holdsPod(s, i, &cl) {
			cl.fitting++
			d.sortNode(s, int32(i), &cl)
		}
	}
	switch {
	case cl.fitting == 0:
		d.classifyNoNodeFits(s, &cl)
	case len(cl.good)+len(cl.pending)+len(cl.failed)+len(cl.bad) == 0 && len(cl.excluded) == 0:
		cl.verdict, cl.blocked = setLosingShape, true
	case len(cl.good)+len(cl.pending)+len(cl.failed)+len(cl.bad) == 0:
		cl.verdict = setExcluded
		if len(cl.transient) > 0 {
			// Cordoned or unhealthy nodes may come back: the set waits,
			// and the gang must still fit them.
			cl.waiting, cl.later = true, cl.transient
		} else {
			cl.blocked = true
		}
	default:
		cl.verdict = setUsable
		cl.now = cl.good
		cl.later = append(append([]int32(nil), cl.good...), cl.pending...)
		cl.pendingOnly = cl.pending
		cl.waiting = len(cl.good) == 0 && len(cl.pending) > 0
		cl.blocked = len(cl.good) == 0 && len(cl.pending) == 0
	}
	cl.mig = len(s.ps.migResources()) > 0
	if cl.verdict == setUsable && s.ps.Requests[ResourceGPU] > 0 && len(cl.good) > 0 {
		kinds := d.gpuMeanings(cl.good)
		cl.mig = cl.mig || len(kinds) > 1 || strings.HasPrefix(d.c.nodes[cl.good[0]].gpuMeaning(), "MIG")
	}
	return cl
}

// holdsPod reports whether node i, empty, holds one pod of the set, and
// records the most each resource's nodes offer.
func (d *diag) holdsPod(s *setState, i int, cl *setClass) bool {
	fits := true
	for k, q := range s.req {
		if q <= 0 {
			continue
		}
		a := d.c.allocOf(i, d.resIdx[k])
		if a > cl.maxAlloc[k] {
			cl.maxAlloc[k], cl.maxNode[k] = a, i
		}
		if a < q {
			fits = false
		}
	}
	return fits
}

// sortNode files a node that holds a pod by whether it admits the pod and
// by its MIG and driver state.
func (d *diag) sortNode(s *setState, n int32, cl *setClass) {
	ni := &d.c.nodes[n]
	if ex := s.ps.Constraints.admits(ni.node); ex.kind != admitted {
		key := ex.kind.String()
		if ex.detail != "" {
			key += ": " + ex.detail
		}
		cl.excluded[key] = append(cl.excluded[key], n)
		if ex.transient() {
			cl.transient = append(cl.transient, n)
		}
		return
	}
	switch {
	case ni.state == migFailed:
		cl.failed = append(cl.failed, n)
	case ni.state == migPending && ni.tgt.known && !d.targetKeeps(ni, s):
		// mig-manager is taking the shape away from this node.
		cl.losing = append(cl.losing, n)
	case ni.state == migPending:
		cl.pending = append(cl.pending, n)
	case len(ni.badFail) > 0:
		cl.bad = append(cl.bad, n)
	default:
		cl.good = append(cl.good, n)
	}
}

// targetKeeps reports whether a node's new MIG layout still offers every
// GPU resource the set asks for.
func (d *diag) targetKeeps(ni *nodeInfo, s *setState) bool {
	for k, q := range s.req {
		r := d.resName[k]
		if q <= 0 || !topology.IsGPUResource(r) {
			continue
		}
		if ok, _ := ni.targetOffers(r); !ok {
			return false
		}
	}
	return true
}

// targetOffers reports whether the layout mig-manager is applying
// (nvidia.com/mig.config) will be advertised as resource r under the node's
// MIG strategy, and how many per GPU (0: unknown). Under single, a layout
// of one profile is advertised as nvidia.com/gpu and never as
// nvidia.com/mig-<profile>; a layout of several profiles is MIG-INVALID.
func (ni *nodeInfo) targetOffers(r string) (bool, int) {
	t := ni.tgt
	if !t.known || ni.gpu.Strategy != StrategySingle {
		return t.offers(r)
	}
	if r != ResourceGPU {
		return false, 0
	}
	if t.disabled {
		return true, 1
	}
	if len(t.layout) == 1 {
		for _, n := range t.layout {
			return true, n
		}
	}
	return false, 0
}

// classifyNoNodeFits: the set is blocked unless a pending MIG change will
// create a GPU resource no node offers yet.
func (d *diag) classifyNoNodeFits(s *setState, cl *setClass) {
	cl.verdict, cl.blocked = setNoNodeFits, true
	for k, q := range s.req {
		if q <= 0 || cl.maxAlloc[k] != 0 {
			continue
		}
		m := missingResource{k: k}
		if name := d.resName[k]; topology.IsGPUResource(name) {
			o := d.c.gpuOfferOf(s.ps, name)
			m.gpu = &o
			d.c.waitForPending(cl, &o)
		}
		cl.missing = append(cl.missing, m)
	}
	if cl.waiting {
		cl.blocked = false
	}
}

// waitForPending: nodes that a pending MIG change gives r make the set wait
// for them.
func (c *Cluster) waitForPending(cl *setClass, o *gpuOffer) {
	if len(o.pendingN) == 0 {
		return
	}
	cl.waiting = true
	cl.later = append(cl.later, o.pendingN...)
	cl.pendingOnly = append(cl.pendingOnly, o.pendingN...)
	for _, n := range o.pendingN {
		if _, per := c.nodes[n].targetOffers(o.r); per == 0 || c.nodes[n].gpu.Count == 0 {
			cl.laterUnknown = true
		}
	}
}

// gpuOfferOf sorts the nodes by what they say about GPU resource r, which
// none of them offers.
func (c *Cluster) gpuOfferOf(ps *PodSet, r string) gpuOffer {
	o := gpuOffer{r: r}
	profile, isMIG := MIGProfileOf(r)
	gpuIdx := c.resIndex(ResourceGPU)
	for i := range c.nodes {
		o.add(c, int32(i), ps, profile, isMIG, gpuIdx)
	}
	return o
}

func (o *gpuOffer) add(c *Cluster, n int32, ps *PodSet, profile string, isMIG bool, gpuIdx int) {
	ni := &c.nodes[n]
	modelHas := ni.modelHas(profile, isMIG)
	creates, _ := ni.targetOffers(o.r)
	// Under single, instances are advertised as nvidia.com/gpu: no layout
	// creates nvidia.com/mig-<profile> there.
	hidden := isMIG && ni.gpu.Strategy == StrategySingle
	mayCreate := creates || (!ni.tgt.known && ni.gpu.MIGConfig != "" && modelHas && !hidden)
	admits := func() bool { return ps.Constraints.admits(ni.node).kind == admitted }
	if list := o.layoutList(ni, modelHas, creates, mayCreate, admits); list != nil {
		*list = append(*list, n)
		return
	}
	if strategyHides(c, n, profile, isMIG, gpuIdx) {
		o.strategyN = append(o.strategyN, n)
		return
	}
	if v, ok := ni.node.Capacity[o.r]; ok && v == 0 {
		o.staleN = append(o.staleN, n)
	}
	if isMIG && modelHas && ni.state == migOK && !ni.gpu.Invalid() && ni.gpu.Count > 0 && admits() {
		o.reconfN = append(o.reconfN, n)
	}
}

// modelHas: the node's GPU model can carry MIG profile (or, for full GPUs,
// the node has GPUs).
func (ni *nodeInfo) modelHas(profile string, isMIG bool) bool {
	if isMIG && ni.model != nil {
		_, ok := ni.model.Profile(profile)
		return ok
	}
	return !isMIG && (ni.gpu.Count > 0 || ni.model != nil)
}

// strategyHides: the node offers the shape, or could after a layout
// change, only under the other MIG strategy: under single, MIG instances
// (of this profile now, or of any profile its GPU model has) are
// advertised as nvidia.com/gpu; under mixed, full GPUs are hidden beside
// MIG.
func strategyHides(c *Cluster, n int32, profile string, isMIG bool, gpuIdx int) bool {
	ni := &c.nodes[n]
	if isMIG {
		if ni.gpu.Strategy != StrategySingle {
			return false
		}
		if ni.gpu.SingleProfile() == profile && c.allocOf(int(n), gpuIdx) > 0 {
			return true
		}
		return ni.modelHas(profile, true) && (ni.gpu.Count > 0 || ni.gpuAlloc > 0)
	}
	return ni.gpu.Strategy == StrategyMixed && ni.gpuAlloc > 0
}

// layoutList is the list a node goes to when its MIG layout (pending,
// failed, or applied but not advertised) explains the missing resource;
// nil when it does not.
func (o *gpuOffer) layoutList(ni *nodeInfo, modelHas, creates, mayCreate bool, admits func() bool) *[]int32 {
	switch {
	case ni.state == migPending && mayCreate:
		if admits() {
			return &o.pendingN
		}
		return &o.pendingX
	case ni.state == migFailed && mayCreate:
		return &o.failedN
	case ni.gpu.Invalid() && (modelHas || ni.model == nil):
		return &o.invalidN
	case ni.state == migOK && creates:
		// The applied layout should offer r, yet the node does not.
		return &o.invalidN
	case ni.state == migOK && modelHas && ni.gpuAlloc == 0 && ni.gpu.Count > 0 &&
		ni.gpu.MIGConfig != "" && !(ni.tgt.known && ni.tgt.disabled) && ni.gpu.Strategy != StrategyNone:
		// MIG is on and the node advertises no GPU resource at all.
		return &o.invalidN
	}
	return nil
}

// gpuMeanings groups nodes by what nvidia.com/gpu means on them.
func (d *diag) gpuMeanings(ns []int32) map[string][]int32 {
	kinds := map[string][]int32{}
	for _, n := range ns {
		m := d.c.nodes[n].gpuMeaning()
		kinds[m] = append(kinds[m], n)
	}
	return kinds
}
