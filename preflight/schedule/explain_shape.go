package schedule

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// Explanations of a pod set's class (classify.go), and of the shape family:
// no node offers what the set asks (SHAPE_MISMATCH), some could after a
// MIG reconfiguration (RECONFIGURABLE).

// explainSet adds the findings that explain a pod set's class.
func (d *diag) explainSet(s *setState) {
	switch s.verdict {
	case setNoNodeFits:
		d.noNodeFits(s)
	case setLosingShape:
		d.add(d.finding(s, verdict.RuleShapeMismatch, verdict.SeverityFail,
			fmt.Sprintf("%s asks %s per pod; the only nodes that offer it (%s) are being changed by mig-manager to a layout without it (%s).",
				d.setName(s), fmtRequests(s.ps.Requests), d.names(s.losing), d.migStates(s.losing)),
			d.losingFix(s), s.losing))
	case setExcluded:
		d.nodeConstraints(s)
	case setUsable:
		d.usable(s)
	}
}

// usable explains a set that has usable nodes, or nodes held back only by a
// pending or failed MIG change or a known-bad driver, and warns about the
// nodes it would use.
func (d *diag) usable(s *setState) {
	good, pending, failed, bad := s.good, s.pending, s.failed, s.bad
	switch {
	case len(good) > 0:
		if len(bad) > 0 {
			d.driverBad(s, bad, false)
		}
		if len(failed) > 0 {
			d.reconfigFailed(s, failed, "", false)
		}
	case len(pending) > 0:
		d.reconfigPending(s, pending, "")
		if len(failed) > 0 {
			d.reconfigFailed(s, failed, "", false)
		}
	case len(failed) > 0:
		d.reconfigFailed(s, failed, "", true)
		if len(bad) > 0 {
			d.driverBad(s, bad, false)
		}
	default:
		d.driverBad(s, bad, true)
	}
	d.driverWarnings(s, good)
	d.gpuMeaning(s, good)
	d.shortLayouts(s, good)
}

// noNodeFits explains a pod set that no node could hold even empty.
func (d *diag) noNodeFits(s *setState) {
	if len(s.missing) == 0 {
		d.add(d.finding(s, verdict.RuleShapeMismatch, verdict.SeverityFail,
			fmt.Sprintf("%s asks %s per pod, and no node offers all of it in one node. The most any node offers: %s.",
				d.setName(s), fmtRequests(s.ps.Requests), d.mostOffered(s)),
			"Ask for at most what one node offers: split each pod into more, smaller pods (more replicas, fewer GPUs each), or add nodes of that size.",
			nil))
		return
	}
	for _, m := range s.missing {
		if m.gpu != nil {
			d.gpuNotOffered(s, m.gpu)
			continue
		}
		name := d.resName[m.k]
		if slices.Contains(labelsOnlyUnknown, name) {
			// Every kubelet offers pods, cpu, memory and ephemeral
			// storage: none of them anywhere means the nodes' allocatable
			// is not known (no nodes given, or nodes without it), not
			// that the job asks for a shape the cluster lacks.
			continue
		}
		d.add(d.finding(s, verdict.RuleShapeMismatch, verdict.SeverityFail,
			fmt.Sprintf("%s asks %s %s per pod; no node offers %s at all.", d.setName(s), name, fmtAmount(name, s.req[m.k]), name),
			fmt.Sprintf("Remove the %s request or add nodes that advertise it.", name), nil))
	}
}

// mostOffered lists the most any node offers of each resource the set asks
// too much of (of each it asks, when each exists somewhere but never all
// on one node).
func (d *diag) mostOffered(s *setState) string {
	var most, all []string
	for k, q := range s.req {
		if q <= 0 {
			continue
		}
		amount := fmtAmount(d.resName[k], s.maxAlloc[k])
		if s.maxAlloc[k] >= Unknown {
			amount = "unknown (labels only)"
		}
		m := fmt.Sprintf("%s %s (%s)", d.resName[k], amount, d.c.nodes[s.maxNode[k]].node.Name)
		all = append(all, m)
		if s.maxAlloc[k] < q {
			most = append(most, m)
		}
	}
	if len(most) == 0 {
		most = all
	}
	return strings.Join(most, ", ")
}

// gpuNotOffered explains a GPU resource that no node advertises.
func (d *diag) gpuNotOffered(s *setState, o *gpuOffer) {
	r := o.r
	if len(o.pendingN) > 0 {
		d.reconfigPending(s, o.pendingN, r)
		return
	}
	explained := false
	if len(o.failedN) > 0 {
		d.reconfigFailed(s, o.failedN, r, true)
		explained = true
	}
	if len(o.invalidN) > 0 {
		d.layoutInvalid(s, o.invalidN, r)
		explained = true
	}
	if len(o.strategyN) > 0 {
		d.strategyMismatch(s, o.strategyN, r)
		explained = true
	}
	if !explained {
		d.shapeMismatch(s, r, o.staleN, o.pendingX)
	}
	if len(o.reconfN) > 0 {
		d.reconfigurable(s, r, o.reconfN)
	}
}

// shapeMismatch: nobody offers r and nothing explains it but the shape.
func (d *diag) shapeMismatch(s *setState, r string, stale, excludedPending []int32) {
	msg := fmt.Sprintf("%s asks %s, and no node offers it.", d.setName(s), d.askDescription(r))
	if near := d.nearest(r); near != "" {
		msg += " The cluster has " + near + "."
	} else {
		msg += " The cluster offers no NVIDIA GPU resource at all."
	}
	for _, n := range limit32(stale, 3) {
		ni := &d.c.nodes[n]
		msg += fmt.Sprintf(" Node %s lists %s: 0, a stale resource the kubelet keeps after a MIG layout change (now %s).", ni.node.Name, r, ni.describe())
	}
	if len(excludedPending) > 0 {
		msg += fmt.Sprintf(" %s will offer it after a pending MIG change, but the pod's placement rules exclude them.", d.nodeCountNames(excludedPending))
	}
	fix := "Ask for a shape the cluster offers (same memory does not mean same compute: compare SMs), or give nodes a MIG layout with this profile; " + strategyNote(r) + "."
	if _, ok := MIGProfileOf(r); !ok {
		fix = "Add GPU nodes, or check that the NVIDIA device plugin runs on them (kubectl describe node shows nvidia.com/gpu under Allocatable)."
	}
	d.add(d.finding(s, verdict.RuleShapeMismatch, verdict.SeverityFail, msg, fix, stale))
}

// losingFix: ask what the new layout offers, or go back to a layout with
// the shape, under the strategy that advertises it.
func (d *diag) losingFix(s *setState) string {
	var back []string
	for _, r := range s.ps.Requests.sortedNames() {
		if !topology.IsGPUResource(r) {
			continue
		}
		if p, ok := MIGProfileOf(r); ok {
			back = append(back, fmt.Sprintf("for %s, nvidia.com/mig.config=all-%s or a custom layout with it; %s", r, p, strategyNote(r)))
		} else {
			back = append(back, fmt.Sprintf("for %s, nvidia.com/mig.config=all-disabled; %s", r, strategyNote(r)))
		}
	}
	return "Ask for a shape the new layout offers, or set nvidia.com/mig.config on those nodes back to a layout with this one: " + strings.Join(back, "; ") + "."
}

// reconfigurable names nodes whose GPU model can carry profile r and the
// mig-parted layout that would create it.
func (d *diag) reconfigurable(s *setState, r string, ns []int32) {
	p, _ := MIGProfileOf(r)
	need := int64(0)
	for k, name := range d.resName {
		if name == r {
			need = s.req[k] * int64(s.ps.Count)
		}
	}
	type group struct {
		model  string
		layout string
		per    int
		nodes  []int32
		supply int64
	}
	groups := map[string]*group{}
	var order []string
	noLayout := map[string]bool{}
	for _, n := range ns {
		ni := &d.c.nodes[n]
		g, ok := groups[ni.model.Name]
		if !ok {
			if noLayout[ni.model.Name] {
				continue
			}
			l, ok := maxLayout(ni.model, p)
			if !ok {
				noLayout[ni.model.Name] = true
				continue
			}
			g = &group{model: ni.model.Name, layout: l.String(), per: l[p]}
			groups[ni.model.Name] = g
			order = append(order, ni.model.Name)
		}
		g.nodes = append(g.nodes, n)
		g.supply += int64(g.per * ni.gpu.Count)
	}
	if len(order) == 0 {
		return
	}
	var parts []string
	var all []int32
	var supply int64
	for _, name := range order {
		g := groups[name]
		all = append(all, g.nodes...)
		supply += g.supply
		prof, _ := d.c.nodes[g.nodes[0]].model.Profile(p)
		parts = append(parts, fmt.Sprintf("%s (%s, now %s) with nvidia.com/mig.config=all-%s, layout %s per GPU (%d instances of %s per GPU, %s each)",
			d.nodeCountNames(g.nodes), g.model, d.c.nodes[g.nodes[0]].migDescribe(), p, g.layout, g.per, p, smsText(prof.SMs)))
	}
	msg := fmt.Sprintf("No node offers %s now, but a MIG layout valid for these nodes' GPUs would: %s. That gives %d instances in all; the job needs %d.",
		r, strings.Join(parts, "; "), supply, need)
	if supply < need {
		msg += " Even all of them would not be enough; add nodes too."
	}
	// Single-strategy nodes are STRATEGY_MISMATCH, never here: these run
	// mixed, none, or no strategy label.
	strategies := map[string][]int32{}
	for _, n := range all {
		st := d.c.nodes[n].gpu.Strategy
		strategies[st] = append(strategies[st], n)
	}
	strategyFix := fmt.Sprintf(" The nodes already run mig.strategy=mixed, which advertises it as %s.", r)
	var other []string
	var otherN []int32
	for _, st := range sortedKeys(strategies) {
		if st != StrategyMixed {
			other = append(other, fmt.Sprintf("mig.strategy=%s on %s", orUnset(st), d.nodeCountNames(strategies[st])))
			otherN = append(otherN, strategies[st]...)
		}
	}
	if len(otherN) > 0 {
		strategyFix = fmt.Sprintf(" Only mig.strategy=mixed advertises it as %s, and these nodes have %s: switch the device plugin and GFD to mig.strategy=mixed first (GPU Operator: %s).", r, strings.Join(other, "; "), SwitchToMixed)
	}
	d.add(d.finding(s, verdict.RuleReconfigurable, verdict.SeverityInfo, msg,
		fmt.Sprintf("Reconfiguring destroys the node's MIG instances and the work on them: drain the node first (kubectl drain), then label it nvidia.com/mig.config=all-%s (add that name to the mig-parted config map if it is missing) and wait for nvidia.com/mig.config.state=success.%s", p, strategyFix),
		all))
}
