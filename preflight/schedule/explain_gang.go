package schedule

import (
	"fmt"
	"strings"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// Explanations of the gang family: the whole job fits now (SCHEDULABLE),
// waits for capacity (WAIT_CAPACITY), or cannot fit even an empty cluster
// (GANG_TOO_LARGE).

// explainJob adds the findings that explain the job's class.
func (d *diag) explainJob(j jobClass) {
	switch j.verdict {
	case jobNoPods:
		d.add(d.finding(nil, verdict.RuleSchedulable, verdict.SeverityInfo, "The workload has no pods to place.", "", nil))
	case jobTooLarge:
		d.gangTooLarge(j.classes, j.placement, j.capOf)
	case jobAllBound:
		d.add(d.finding(nil, verdict.RuleSchedulable, verdict.SeverityInfo, "Every pod of the workload is already bound to a node.", "", nil))
	case jobFitsNow:
		d.schedulable(j.classes, j.placement)
	case jobWaitCapacity:
		d.waitCapacity(j.classes, j.placement, j.capOf)
	}
}

func (d *diag) className(cl class) string {
	var names []string
	for _, si := range cl.sets {
		names = append(names, d.setName(&d.sets[si]))
	}
	return strings.Join(names, " + ")
}

func (d *diag) classRequest(cl class) string {
	return fmtRequests(d.sets[cl.sets[0]].ps.Requests)
}

func (d *diag) gangTooLarge(classes []class, p placement, capOf capFunc) {
	var parts []string
	var nodes []int32
	for ci, cl := range classes {
		if p.placed[ci] >= cl.need {
			continue
		}
		nodes = append(nodes, cl.nodes...)
		var totals []string
		for k, q := range cl.req {
			if q <= 0 || !topology.IsGPUResource(d.resName[k]) {
				continue
			}
			var sum int64
			for _, n := range cl.nodes {
				sum += capOf(n, k)
			}
			totals = append(totals, fmt.Sprintf("%s %d allocatable in all, the job needs %d", d.resName[k], sum, q*int64(cl.need)))
		}
		parts = append(parts, fmt.Sprintf("%s asks %s per pod; the nodes that offer it and admit the pods (%d) hold at most %d of its %d pods even with every other pod gone (%s)",
			d.className(cl), d.classRequest(cl), len(cl.nodes), p.placed[ci], cl.need, strings.Join(totals, "; ")))
	}
	d.add(d.finding(nil, verdict.RuleGangTooLarge, verdict.SeverityFail,
		"The job must start all its ranks at once, and even an empty cluster cannot hold them: "+strings.Join(parts, "; ")+".",
		"Lower the replica count to what fits, ask for fewer or smaller devices per pod, or add nodes with this shape; waiting will not help.", d.dedupe(nodes)))
}

func (d *diag) schedulable(classes []class, p placement) {
	var parts []string
	var nodes []int32
	res := []Assignment{}
	for ci, cl := range classes {
		var where []string
		for _, nc := range p.where[ci] {
			nodes = append(nodes, nc.node)
			if len(where) < d.e.maxNames {
				where = append(where, fmt.Sprintf("%s x%d", d.c.nodes[nc.node].node.Name, nc.pods))
			}
			res = append(res, Assignment{PodSet: d.className(cl), Node: d.c.nodes[nc.node].node.Name, Pods: nc.pods})
		}
		if len(p.where[ci]) > len(where) {
			where = append(where, fmt.Sprintf("and %d more nodes", len(p.where[ci])-len(where)))
		}
		parts = append(parts, fmt.Sprintf("%s: %s pending, %s each, fit on %s (%s)",
			d.className(cl), plural(cl.need, "pod"), d.classRequest(cl), plural(len(p.where[ci]), "node"), strings.Join(where, ", ")))
	}
	msg := "The whole job fits now, all pending pods at once: " + strings.Join(parts, "; ") + "."
	if d.w.Kind == "Pod" && len(p.where) == 1 && len(p.where[0]) == 1 {
		msg = fmt.Sprintf("The pod fits now: node %s has room for %s.", d.c.nodes[p.where[0][0].node].node.Name, d.classRequest(classes[0]))
	}
	fix := ""
	var schedMsg string
	for i := range d.sets {
		if d.sets[i].ps.SchedulerMessage != "" {
			schedMsg = d.sets[i].ps.SchedulerMessage
		}
	}
	if schedMsg != "" {
		msg += fmt.Sprintf(" Yet the scheduler said: %q.", clip(schedMsg, 600))
		fix = "rankgate models GPU and MIG resources, cpu, memory, pod counts, nodeSelector, required node affinity, taints and cordons. The cause is outside those: pod (anti-)affinity, topology spread, volumes, quotas, a gang scheduler's queue, or a scheduler that counts MIG resources wrongly (seen with mixed strategy); look at that scheduler's events."
	}
	d.lastPlacement = res
	d.add(d.finding(nil, verdict.RuleSchedulable, verdict.SeverityInfo, msg, fix, d.dedupe(nodes)))
}

func (d *diag) waitCapacity(classes []class, p placement, capOf capFunc) {
	var parts []string
	var busy []int32
	for ci, cl := range classes {
		if p.placed[ci] >= cl.need {
			continue
		}
		var short, totals []string
		for k, q := range cl.req {
			if q <= 0 {
				continue
			}
			var free, alloc int64
			for _, n := range cl.nodes {
				free += capOf(n, k)
				alloc += d.c.allocOf(int(n), d.resIdx[k])
			}
			if topology.IsGPUResource(d.resName[k]) {
				totals = append(totals, fmt.Sprintf("%s %s free of %s", d.resName[k], fmtAmount(d.resName[k], free), fmtAmount(d.resName[k], alloc)))
			}
			if need := q * int64(cl.need); free < need {
				short = append(short, fmt.Sprintf("%s (needs %s, %s free)", d.resName[k], fmtAmount(d.resName[k], need), fmtAmount(d.resName[k], free)))
			}
		}
		var full []int32
		for _, n := range cl.nodes {
			fits := true
			for k, q := range cl.req {
				if q > 0 && capOf(n, k) < q {
					fits = false
					break
				}
			}
			if !fits {
				full = append(full, n)
			}
		}
		busy = append(busy, full...)
		why := "free capacity is fragmented: no node has room for one more whole pod"
		if len(short) > 0 {
			why = "short of " + strings.Join(short, ", ")
		}
		if d.w.Kind == "Pod" {
			parts = append(parts, fmt.Sprintf("it asks %s, and the nodes that offer that (%d; %s) have no room now. Busy: %s",
				d.classRequest(cl), len(cl.nodes), strings.Join(totals, ", "), d.busyNames(full, cl)))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s asks %s per pod; %d of %d pending pods fit now on the nodes that offer the shape (%d; %s); %s. Busy: %s",
			d.className(cl), d.classRequest(cl), p.placed[ci], cl.need, len(cl.nodes), strings.Join(totals, ", "), why, d.busyNames(full, cl)))
	}
	msg := fmt.Sprintf("The job's shape exists and the whole job fits the cluster when it is empty, but not now: %s.", strings.Join(parts, "; "))
	fix := "Wait for pods on those nodes to finish, or free devices there (lower-priority work, idle notebooks); the job starts when all its pods fit at once. Nothing is wrong with its shape."
	if d.w.Kind == "Pod" {
		msg = fmt.Sprintf("The pod's shape exists, but %s.", strings.Join(parts, "; "))
		fix = "Wait for pods on those nodes to finish, or free devices there (lower-priority work, idle notebooks). Nothing is wrong with the pod's shape."
	}
	d.add(d.finding(nil, verdict.RuleWaitCapacity, verdict.SeverityWarn, msg, fix, d.dedupe(busy)))
	var pending []int32
	for i := range d.sets {
		pending = append(pending, d.sets[i].pendingOnly...)
	}
	if len(pending) > 0 {
		d.reconfigPending(nil, d.dedupe(pending), "")
	}
}

func (d *diag) busyNames(ns []int32, cl class) string {
	if len(ns) == 0 {
		return "none"
	}
	var parts []string
	for _, n := range ns {
		if len(parts) == d.e.maxNames {
			parts = append(parts, fmt.Sprintf("and %d more", len(ns)-d.e.maxNames))
			break
		}
		// What is short on the node (GPUs, CPU, memory, ...); where
		// nothing alone is short (fragmented), its GPU use.
		var use, gpus []string
		for k, q := range cl.req {
			if q <= 0 {
				continue
			}
			res := d.resName[k]
			a := d.c.allocOf(int(n), d.resIdx[k])
			f := d.c.freeOf(int(n), d.resIdx[k])
			u := fmt.Sprintf("%s/%s %s in use", fmtAmount(res, a-f), fmtAmount(res, a), res)
			switch {
			case f < q:
				use = append(use, u)
			case topology.IsGPUResource(res):
				gpus = append(gpus, u)
			}
		}
		if len(use) == 0 {
			use = gpus
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", d.c.nodes[n].node.Name, strings.Join(use, ", ")))
	}
	return strings.Join(parts, ", ")
}
