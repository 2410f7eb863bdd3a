package schedule

import (
	"fmt"
	"sort"
	"strings"

	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// Explanations of the node family: nodes the pod's placement rules or the
// nodes' state exclude (NODE_CONSTRAINTS), and drivers known bad on the
// nodes' shape (DRIVER_KNOWN_BAD).

// nodeConstraints: the shape exists but the pod's own rules exclude it.
// nodeConstraints reports that no node admits the set; a warning when some
// nodes are excluded only for a while (cordon, a condition taint, not
// Ready): the set waits for them rather than failing.
func (d *diag) nodeConstraints(s *setState) {
	excluded, transient := s.excluded, s.transient
	keys := make([]string, 0, len(excluded))
	for k := range excluded {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if len(excluded[keys[i]]) != len(excluded[keys[j]]) {
			return len(excluded[keys[i]]) > len(excluded[keys[j]])
		}
		return keys[i] < keys[j]
	})
	var parts, fixes []string
	var all []int32
	for _, k := range keys {
		ns := excluded[k]
		all = append(all, ns...)
		parts = append(parts, fmt.Sprintf("%s: %s (%s)", k, plural(len(ns), "node"), d.names(ns)))
		switch {
		case strings.HasPrefix(k, exTaint.String()+": node.kubernetes.io/"):
			// Condition taints: Kubernetes marks the node unhealthy.
			taint := strings.TrimPrefix(k, exTaint.String()+": ")
			fixes = append(fixes, fmt.Sprintf("Kubernetes set the taint %s because of the node's condition: fix the node (kubelet, network, pressure) rather than tolerate it", taint))
		case strings.HasPrefix(k, exTaint.String()):
			taint := strings.TrimPrefix(k, exTaint.String()+": ")
			fixes = append(fixes, fmt.Sprintf("tolerate the taint %s in the pod template", taint))
		case strings.HasPrefix(k, exSelector.String()):
			sel := strings.TrimPrefix(k, exSelector.String()+": ")
			key, _, _ := strings.Cut(sel, "=")
			fixes = append(fixes, fmt.Sprintf("fix nodeSelector %s: those nodes have %s", sel, d.labelValues(ns, key)))
		case strings.HasPrefix(k, exAffinity.String()):
			fixes = append(fixes, "widen the required node affinity to include those nodes")
		case strings.HasPrefix(k, exCordoned.String()):
			fixes = append(fixes, "uncordon the nodes (kubectl uncordon) once their maintenance is over")
		case strings.HasPrefix(k, exNotReady.String()):
			fixes = append(fixes, "bring the nodes back to Ready (kubelet, network, GPU driver)")
		case strings.HasPrefix(k, exNodeName.String()):
			fixes = append(fixes, "unset spec.nodeName or pin the pod to a node that has the shape")
		}
	}
	sev, tail := verdict.SeverityFail, ""
	if len(transient) > 0 {
		sev = verdict.SeverityWarn
		tail = fmt.Sprintf(" Cordoned or unhealthy nodes come back (%s): the %s waits for them.", d.names(transient), d.noun())
	}
	d.add(d.finding(s, verdict.RuleNodeConstraints, sev,
		fmt.Sprintf("%s asks %s per pod; %s offer that, but the pod's own placement rules or the nodes' state exclude all of them: %s.%s",
			d.setName(s), fmtRequests(s.ps.Requests), plural(s.fitting, "node"), strings.Join(parts, "; "), tail),
		upperFirst(strings.Join(dedupe(fixes), "; "))+".", all))
}

func (d *diag) labelValues(ns []int32, key string) string {
	seen := map[string]int{}
	for _, n := range ns {
		v, ok := d.c.nodes[n].node.Labels[key]
		if !ok {
			v = "(no such label)"
		}
		seen[v]++
	}
	vals := make([]string, 0, len(seen))
	for v := range seen {
		vals = append(vals, v)
	}
	sort.Strings(vals)
	if len(vals) > 3 {
		vals = append(vals[:3], "...")
	}
	return key + "=" + strings.Join(vals, ", ")
}

func (d *diag) driverBad(s *setState, ns []int32, decisive bool) {
	byEntry := map[string][]int32{}
	entries := map[string]preflight.DriverEntry{}
	for _, n := range ns {
		for _, e := range d.c.nodes[n].badFail {
			byEntry[e.ID] = append(byEntry[e.ID], n)
			entries[e.ID] = e
		}
	}
	for _, id := range sortedKeys(byEntry) {
		e, list := entries[id], byEntry[id]
		drivers := map[string]bool{}
		for _, n := range list {
			drivers[d.c.nodes[n].gpu.Driver] = true
		}
		sev, lead := verdict.SeverityWarn, "Such nodes are left out of the placement"
		if decisive {
			sev, lead = verdict.SeverityFail, "No other node would fit"
		}
		d.add(d.finding(s, verdict.RuleDriverKnownBad, sev,
			fmt.Sprintf("What %s asks is offered by %s, on driver %s, known bad on this node shape (%s): %s. %s. Source: %s.",
				d.setName(s), d.nodeCountNames(list), strings.Join(sortedKeys(drivers), ", "), condText(e.Condition), e.Problem, lead, e.Source),
			upperFirst(e.Fix)+".", list))
	}
}

func condText(c string) string {
	if c == "mig-mixed-with-full" {
		return "MIG instances and full GPUs on one node"
	}
	return c
}

func (d *diag) driverWarnings(s *setState, ns []int32) {
	byEntry := map[string][]int32{}
	entries := map[string]preflight.DriverEntry{}
	for _, n := range ns {
		for _, e := range d.c.nodes[n].badWarn {
			byEntry[e.ID] = append(byEntry[e.ID], n)
			entries[e.ID] = e
		}
	}
	for _, id := range sortedKeys(byEntry) {
		e, list := entries[id], byEntry[id]
		d.add(d.finding(s, verdict.RuleDriverKnownBad, verdict.SeverityWarn,
			fmt.Sprintf("Nodes that would run %s match a known driver issue (%s): %s. Nodes: %s. Source: %s.",
				d.setName(s), condText(e.Condition), e.Problem, d.nodeCountNames(list), e.Source),
			upperFirst(e.Fix)+".", list))
	}
}
