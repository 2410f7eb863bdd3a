package schedule

import "github.com/rankgate/rankgate/topology"

// jobVerdict is the family of the whole job's class: whether the gang fits
// an empty cluster, and whether it fits now.
type jobVerdict int

const (
	// jobBlocked: a pod set cannot run; its findings say why.
	jobBlocked jobVerdict = iota
	// jobNoPods: the workload has no pods to place.
	jobNoPods
	// jobTooLarge: even an empty cluster cannot hold all ranks at once.
	jobTooLarge
	// jobWaits: a pod set waits for a MIG change or for nodes to come
	// back; its findings say so.
	jobWaits
	// jobAllBound: every pod is already bound.
	jobAllBound
	// jobFitsNow: all pending pods fit now, at once.
	jobFitsNow
	// jobWaitCapacity: the job fits an empty cluster but not now.
	jobWaitCapacity
)

// jobClass is the classification of the whole job, with the packing that
// decided it (jobTooLarge, jobFitsNow, jobWaitCapacity).
type jobClass struct {
	verdict   jobVerdict
	classes   []class
	placement placement
	capOf     capFunc
}

// classifyJob places the whole job, from its pod sets' classes: first on an
// empty cluster, then now.
func (d *diag) classifyJob() jobClass {
	for i := range d.sets {
		if d.sets[i].blocked {
			return jobClass{verdict: jobBlocked}
		}
	}
	if len(d.sets) == 0 {
		return jobClass{verdict: jobNoPods}
	}
	nres, nnodes := len(d.resName), len(d.c.nodes)
	unknown := false
	empty := make([]class, len(d.sets))
	for i := range d.sets {
		s := &d.sets[i]
		empty[i] = class{sets: []int{i}, req: s.req, nodes: s.later, need: s.ps.Count}
		unknown = unknown || s.laterUnknown
	}
	if !unknown {
		capEmpty := d.emptyCapacity()
		if p, ok := pack(empty, nres, nnodes, capEmpty); !ok {
			return jobClass{verdict: jobTooLarge, classes: empty, placement: p, capOf: capEmpty}
		}
	}
	for i := range d.sets {
		if d.sets[i].waiting {
			return jobClass{verdict: jobWaits}
		}
	}
	now := make([]class, len(d.sets))
	total := 0
	for i := range d.sets {
		s := &d.sets[i]
		now[i] = class{sets: []int{i}, req: s.req, nodes: s.now, need: s.ps.Pending()}
		total += now[i].need
	}
	if total == 0 {
		return jobClass{verdict: jobAllBound}
	}
	capNow := func(n int32, k int) int64 { return d.c.freeOf(int(n), d.resIdx[k]) }
	p, ok := pack(now, nres, nnodes, capNow)
	if ok {
		return jobClass{verdict: jobFitsNow, classes: now, placement: p, capOf: capNow}
	}
	return jobClass{verdict: jobWaitCapacity, classes: now, placement: p, capOf: capNow}
}

// emptyCapacity is each node's capacity with every pod gone; a node whose
// MIG change is pending counts with its new layout.
func (d *diag) emptyCapacity() capFunc {
	c := d.c
	pendingSet := map[int32]bool{}
	for i := range d.sets {
		for _, n := range d.sets[i].pendingOnly {
			pendingSet[n] = true
		}
	}
	return func(n int32, k int) int64 {
		ni := &c.nodes[n]
		if pendingSet[n] && ni.tgt.known && topology.IsGPUResource(d.resName[k]) {
			ok, per := ni.targetOffers(d.resName[k])
			if !ok {
				return 0
			}
			if per > 0 && ni.gpu.Count > 0 {
				return int64(per * ni.gpu.Count)
			}
		}
		return c.allocOf(int(n), d.resIdx[k])
	}
}
