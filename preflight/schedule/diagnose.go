package schedule

import (
	"fmt"
	"sort"
	"strings"

	"github.com/rankgate/rankgate/preflight"
)

// Rule IDs of the schedulability engine: a public vocabulary (README,
// README, rankgate diagnose). Renaming one is a breaking change.
const (
	RuleSchedulable        = "SCHEDULABLE"
	RuleWaitCapacity       = "WAIT_CAPACITY"
	RuleShapeMismatch      = "SHAPE_MISMATCH"
	RuleStrategyMismatch   = "STRATEGY_MISMATCH"
	RuleMIGLayoutInvalid   = "MIG_LAYOUT_INVALID"
	RuleMIGReconfigPending = "MIG_RECONFIG_PENDING"
	RuleMIGReconfigFailed  = "MIG_RECONFIG_FAILED"
	RuleDriverKnownBad     = "DRIVER_KNOWN_BAD"
	RuleGangTooLarge       = "GANG_TOO_LARGE"
	RuleNodeConstraints    = "NODE_CONSTRAINTS"
	RuleReconfigurable     = "RECONFIGURABLE"
	RuleMIGMultiPod        = "MIG_MULTI_POD"
)

// Rules lists every rule ID, for documentation tests.
var Rules = []string{
	RuleSchedulable, RuleWaitCapacity, RuleShapeMismatch, RuleStrategyMismatch,
	RuleMIGLayoutInvalid, RuleMIGReconfigPending, RuleMIGReconfigFailed,
	RuleDriverKnownBad, RuleGangTooLarge, RuleNodeConstraints,
	RuleReconfigurable, RuleMIGMultiPod,
}

// Result is the engine's judgement of one workload.
type Result struct {
	// Report holds every finding; its verdict is fail when the workload
	// cannot run as it is (Hopeless), warn when it waits.
	Report preflight.Report
	// Rule is the primary verdict: SCHEDULABLE, WAIT_CAPACITY,
	// MIG_RECONFIG_PENDING, or the first rule that makes it hopeless.
	Rule string
	// Hopeless: nothing changes without someone acting on the job or the
	// cluster. The controller fails such jobs at once.
	Hopeless bool
	// Placement, when the workload fits now, says where its pending pods
	// would go (one feasible placement, not the scheduler's choice).
	Placement []Assignment
}

// Assignment is part of a placement: pods of a pod set on one node.
type Assignment struct {
	PodSet string `json:"podSet"`
	Node   string `json:"node"`
	Pods   int    `json:"pods"`
}

// ExitCode maps the result to diagnose's exit code: 0 schedulable or
// waiting, 1 hopeless.
func (r Result) ExitCode() int { return r.Report.ExitCode() }

type diag struct {
	e *Engine
	c *Cluster
	w *Workload
	// Job resources: the union of the pod sets' requested resources.
	resName []string
	resIdx  []int // cluster resource index, -1 when no node has it
	sets    []setState
	out     []preflight.Finding
	// lastPlacement is the placement found when the job fits now.
	lastPlacement []Assignment
}

type setState struct {
	ps    *PodSet
	label string  // "Master (1 pod) + Worker (3 pods)"
	req   []int64 // per job resource
	// now: nodes usable with their free capacity; later: nodes usable when
	// empty, including nodes that a pending MIG change will give the shape.
	now, later []int32
	// laterUnknown: a pending node's future capacity is unknown.
	laterUnknown bool
	// pendingOnly lists pending-reconfiguration nodes among later.
	pendingOnly []int32
	blocked     bool // a hopeless finding explains this set
	waiting     bool // the set waits for MIG reconfiguration
	mig         bool // its ranks get MIG instances
}

// Diagnose judges one workload against a prepared cluster.
func (e *Engine) Diagnose(c *Cluster, w Workload) Result {
	d := &diag{e: e, c: c, w: &w}
	pos := map[string]int{}
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if ps.Count <= 0 {
			continue
		}
		for _, r := range ps.Requests.sortedNames() {
			if _, ok := pos[r]; !ok {
				pos[r] = len(d.resName)
				d.resName = append(d.resName, r)
				d.resIdx = append(d.resIdx, c.resIndex(r))
			}
		}
	}
	// Pod sets with equal requests and constraints (a Master and its
	// Workers, usually) are judged and packed as one class.
	keys := map[string]int{}
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if ps.Count <= 0 {
			continue
		}
		label := fmt.Sprintf("%s (%s)", ps.Name, plural(ps.Count, "pod"))
		k := podSetKey(ps)
		if si, ok := keys[k]; ok {
			s := &d.sets[si]
			m := *s.ps
			m.Name += " + " + ps.Name
			m.Count += ps.Count
			m.Bound += ps.Bound
			m.Pods = append(append([]string(nil), m.Pods...), ps.Pods...)
			if m.SchedulerMessage == "" {
				m.SchedulerMessage = ps.SchedulerMessage
			}
			s.ps = &m
			s.label += " + " + label
			continue
		}
		s := setState{ps: ps, label: label, req: make([]int64, len(d.resName))}
		for r, v := range ps.Requests {
			if v > 0 {
				s.req[pos[r]] = v
			}
		}
		keys[k] = len(d.sets)
		d.sets = append(d.sets, s)
	}
	for i := range d.sets {
		d.classify(i)
	}
	d.multiPod()
	d.gang()
	return d.result()
}

func (d *diag) add(f preflight.Finding) {
	d.out = append(d.out, f)
}

func (d *diag) result() Result {
	res := Result{
		Report:    preflight.NewReport(d.w.Subject(), append([]preflight.Finding(nil), d.out...)),
		Placement: d.lastPlacement,
	}
	var wait, pending, excluded bool
	for _, f := range d.out {
		if f.Severity == preflight.SeverityFail && res.Rule == "" {
			res.Rule, res.Hopeless = f.Rule, true
		}
		wait = wait || f.Rule == RuleWaitCapacity
		pending = pending || (f.Rule == RuleMIGReconfigPending && f.Severity == preflight.SeverityWarn)
		excluded = excluded || (f.Rule == RuleNodeConstraints && f.Severity == preflight.SeverityWarn)
	}
	switch {
	case res.Rule != "":
	case pending:
		res.Rule = RuleMIGReconfigPending
	case excluded:
		res.Rule = RuleNodeConstraints
	case wait:
		res.Rule = RuleWaitCapacity
	default:
		res.Rule = RuleSchedulable
	}
	return res
}

// classify finds the nodes a pod set can use, or the reason it can use none.
func (d *diag) classify(si int) {
	s := &d.sets[si]
	c := d.c
	ps := s.ps
	maxAlloc := make([]int64, len(s.req))
	maxNode := make([]int, len(s.req))
	excluded := map[string][]int32{}
	var fitting int
	var good, pending, failed, bad, transient, losing []int32
	for i := range c.nodes {
		fits := true
		for k, q := range s.req {
			if q <= 0 {
				continue
			}
			a := c.allocOf(i, d.resIdx[k])
			if a > maxAlloc[k] {
				maxAlloc[k], maxNode[k] = a, i
			}
			if a < q {
				fits = false
			}
		}
		if !fits {
			continue
		}
		fitting++
		ni := &c.nodes[i]
		if ex := ps.Constraints.admits(ni.node); ex.kind != admitted {
			key := ex.kind.String()
			if ex.detail != "" {
				key += ": " + ex.detail
			}
			excluded[key] = append(excluded[key], int32(i))
			if ex.transient() {
				transient = append(transient, int32(i))
			}
			continue
		}
		switch {
		case ni.state == migFailed:
			failed = append(failed, int32(i))
		case ni.state == migPending && ni.tgt.known && !d.targetKeeps(ni, s):
			// mig-manager is taking the shape away from this node.
			losing = append(losing, int32(i))
		case ni.state == migPending:
			pending = append(pending, int32(i))
		case len(ni.badFail) > 0:
			bad = append(bad, int32(i))
		default:
			good = append(good, int32(i))
		}
	}
	if fitting == 0 {
		d.noNodeFits(si, maxAlloc, maxNode)
		return
	}
	if len(good)+len(pending)+len(failed)+len(bad) == 0 && len(excluded) == 0 {
		d.add(d.finding(si, RuleShapeMismatch, preflight.SeverityFail,
			fmt.Sprintf("%s asks %s per pod; the only nodes that offer it (%s) are being changed by mig-manager to a layout without it (%s).",
				d.setName(si), fmtRequests(ps.Requests), d.names(losing), d.migStates(losing)),
			"Ask for a shape the new layout offers, or set nvidia.com/mig.config on those nodes back to a layout with this one.", losing))
		s.blocked = true
		return
	}
	if len(good)+len(pending)+len(failed)+len(bad) == 0 {
		if d.nodeConstraints(si, fitting, excluded, transient) {
			// Cordoned or unhealthy nodes may come back: the set waits,
			// and the gang must still fit them.
			s.waiting = true
			s.later = transient
			return
		}
		s.blocked = true
		return
	}
	s.now = good
	s.later = append(append([]int32(nil), good...), pending...)
	s.pendingOnly = pending
	switch {
	case len(good) > 0:
		if len(bad) > 0 {
			d.driverBad(si, bad, false)
		}
		if len(failed) > 0 {
			d.reconfigFailed(si, failed, "", false)
		}
	case len(pending) > 0:
		d.reconfigPending(si, pending, "")
		s.waiting = true
		if len(failed) > 0 {
			d.reconfigFailed(si, failed, "", false)
		}
	case len(failed) > 0:
		d.reconfigFailed(si, failed, "", true)
		if len(bad) > 0 {
			d.driverBad(si, bad, false)
		}
		s.blocked = true
	default:
		d.driverBad(si, bad, true)
		s.blocked = true
	}
	d.driverWarnings(si, good)
	d.gpuMeaning(si, good)
	d.shortLayouts(si, good)
}

// targetKeeps reports whether a node's new MIG layout still offers every
// GPU resource the set asks for.
func (d *diag) targetKeeps(ni *nodeInfo, s *setState) bool {
	for k, q := range s.req {
		r := d.resName[k]
		if q <= 0 || !IsGPUResource(r) {
			continue
		}
		if ok, _ := ni.tgt.offers(r); ok {
			continue
		}
		// Under single, a one-profile layout is advertised as nvidia.com/gpu.
		if r == ResourceGPU && ni.gpu.Strategy == StrategySingle && len(ni.tgt.layout) == 1 {
			continue
		}
		return false
	}
	return true
}

// noNodeFits explains a pod set that no node could hold even empty.
func (d *diag) noNodeFits(si int, maxAlloc []int64, maxNode []int) {
	s := &d.sets[si]
	s.blocked = true
	var missing []int
	for k, q := range s.req {
		if q > 0 && maxAlloc[k] == 0 {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		var most, all []string
		for k, q := range s.req {
			if q <= 0 {
				continue
			}
			m := fmt.Sprintf("%s %s (%s)", d.resName[k], fmtAmount(d.resName[k], maxAlloc[k]), d.c.nodes[maxNode[k]].node.Name)
			all = append(all, m)
			if maxAlloc[k] < q {
				most = append(most, m)
			}
		}
		if len(most) == 0 {
			// Each resource exists somewhere, never all on one node.
			most = all
		}
		d.add(d.finding(si, RuleShapeMismatch, preflight.SeverityFail,
			fmt.Sprintf("%s asks %s per pod, and no node offers all of it in one node. The most any node offers: %s.",
				d.setName(si), fmtRequests(s.ps.Requests), strings.Join(most, ", ")),
			"Ask for at most what one node offers: split each pod into more, smaller pods (more replicas, fewer GPUs each), or add nodes of that size.",
			nil))
		return
	}
	for _, k := range missing {
		name := d.resName[k]
		if IsGPUResource(name) {
			d.gpuNotOffered(si, name)
			continue
		}
		d.add(d.finding(si, RuleShapeMismatch, preflight.SeverityFail,
			fmt.Sprintf("%s asks %s %s per pod; no node offers %s at all.", d.setName(si), name, fmtAmount(name, s.req[k]), name),
			fmt.Sprintf("Remove the %s request or add nodes that advertise it.", name), nil))
	}
	if s.waiting {
		s.blocked = false
	}
}

// gpuNotOffered explains a GPU resource that no node advertises.
func (d *diag) gpuNotOffered(si int, r string) {
	s := &d.sets[si]
	c := d.c
	profile, isMIG := MIGProfileOf(r)
	gpuIdx := c.resIndex(ResourceGPU)
	var pendingN, pendingX, failedN, invalidN, strategyN, reconfN, staleN []int32
	for i := range c.nodes {
		ni := &c.nodes[i]
		modelHas := !isMIG && (ni.gpu.Count > 0 || ni.model != nil)
		if isMIG && ni.model != nil {
			_, modelHas = ni.model.Profile(profile)
		}
		creates, _ := ni.tgt.offers(r)
		if isMIG && ni.gpu.Strategy == StrategySingle {
			// Under single, instances are advertised as nvidia.com/gpu.
			creates = false
		}
		mayCreate := creates || (!ni.tgt.known && ni.gpu.MIGConfig != "" && modelHas)
		admits := func() bool { return s.ps.Constraints.admits(ni.node).kind == admitted }
		switch {
		case ni.state == migPending && mayCreate:
			if admits() {
				pendingN = append(pendingN, int32(i))
			} else {
				pendingX = append(pendingX, int32(i))
			}
			continue
		case ni.state == migFailed && mayCreate:
			failedN = append(failedN, int32(i))
			continue
		case ni.gpu.Invalid() && (modelHas || ni.model == nil):
			invalidN = append(invalidN, int32(i))
			continue
		case ni.state == migOK && creates:
			// The applied layout should offer r, yet the node does not.
			invalidN = append(invalidN, int32(i))
			continue
		case ni.state == migOK && modelHas && ni.gpuAlloc == 0 && ni.gpu.Count > 0 &&
			ni.gpu.MIGConfig != "" && !(ni.tgt.known && ni.tgt.disabled) && ni.gpu.Strategy != StrategyNone:
			// MIG is on and the node advertises no GPU resource at all.
			invalidN = append(invalidN, int32(i))
			continue
		}
		if isMIG && ni.gpu.SingleProfile() == profile && c.allocOf(i, gpuIdx) > 0 {
			strategyN = append(strategyN, int32(i))
			continue
		}
		if !isMIG && ni.gpu.Strategy == StrategyMixed && ni.gpuAlloc > 0 {
			strategyN = append(strategyN, int32(i))
			continue
		}
		if v, ok := ni.node.Capacity[r]; ok && v == 0 {
			staleN = append(staleN, int32(i))
		}
		if isMIG && modelHas && ni.state == migOK && !ni.gpu.Invalid() && ni.gpu.Count > 0 && admits() {
			reconfN = append(reconfN, int32(i))
		}
	}
	if len(pendingN) > 0 {
		d.reconfigPending(si, pendingN, r)
		s.waiting = true
		s.later = append(s.later, pendingN...)
		s.pendingOnly = append(s.pendingOnly, pendingN...)
		for _, n := range pendingN {
			if _, per := c.nodes[n].tgt.offers(r); per == 0 || c.nodes[n].gpu.Count == 0 {
				s.laterUnknown = true
			}
		}
		return
	}
	explained := false
	if len(failedN) > 0 {
		d.reconfigFailed(si, failedN, r, true)
		explained = true
	}
	if len(invalidN) > 0 {
		d.layoutInvalid(si, invalidN, r)
		explained = true
	}
	if len(strategyN) > 0 {
		d.strategyMismatch(si, strategyN, r)
		explained = true
	}
	if !explained {
		d.shapeMismatch(si, r, staleN, pendingX)
	}
	if len(reconfN) > 0 {
		d.reconfigurable(si, r, reconfN)
	}
}

func (d *diag) finding(si int, rule string, sev preflight.Severity, msg, fix string, nodes []int32) preflight.Finding {
	f := preflight.Finding{Rule: rule, Severity: sev, Message: upperFirst(msg), Remediation: fix}
	f.Nodes = d.nodeNames(nodes, 50)
	if si >= 0 {
		ps := d.sets[si].ps
		f.Pods = limit(ps.Pods, 50)
		if ps.SchedulerMessage != "" && sev != preflight.SeverityInfo {
			f.Message += fmt.Sprintf(" The scheduler said: %q.", clip(ps.SchedulerMessage, 600))
		}
	}
	return f
}

func (d *diag) setName(si int) string {
	if si < 0 {
		return "the job"
	}
	if d.w.Kind == "Pod" {
		return "the pod"
	}
	return d.sets[si].label
}

func (d *diag) noun() string {
	if d.w.Kind == "Pod" {
		return "pod"
	}
	return "job"
}

func podSetKey(ps *PodSet) string {
	c := &ps.Constraints
	var b strings.Builder
	for _, k := range sortedKeys(ps.Requests) {
		fmt.Fprintf(&b, "%s=%d,", k, ps.Requests[k])
	}
	fmt.Fprint(&b, "|", c.NodeName, "|", sortedMap(c.NodeSelector), "|", c.Affinity, "|", c.Tolerations)
	return b.String()
}

// nodeConstraints: the shape exists but the pod's own rules exclude it.
// nodeConstraints reports that no node admits the set; it returns true when
// some nodes are excluded only for a while (cordon, a condition taint, not
// Ready): the set waits for them rather than failing.
func (d *diag) nodeConstraints(si int, fitting int, excluded map[string][]int32, transient []int32) bool {
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
	sev, tail := preflight.SeverityFail, ""
	if len(transient) > 0 {
		sev = preflight.SeverityWarn
		tail = fmt.Sprintf(" Cordoned or unhealthy nodes come back (%s): the %s waits for them.", d.names(transient), d.noun())
	}
	d.add(d.finding(si, RuleNodeConstraints, sev,
		fmt.Sprintf("%s asks %s per pod; %s offer that, but the pod's own placement rules or the nodes' state exclude all of them: %s.%s",
			d.setName(si), fmtRequests(d.sets[si].ps.Requests), plural(fitting, "node"), strings.Join(parts, "; "), tail),
		upperFirst(strings.Join(dedupe(fixes), "; "))+".", all))
	return len(transient) > 0
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

func (d *diag) driverBad(si int, ns []int32, decisive bool) {
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
		sev, lead := preflight.SeverityWarn, "Such nodes are left out of the placement"
		if decisive {
			sev, lead = preflight.SeverityFail, "No other node would fit"
		}
		d.add(d.finding(si, RuleDriverKnownBad, sev,
			fmt.Sprintf("What %s asks is offered by %s, on driver %s, known bad on this node shape (%s): %s. %s. Source: %s.",
				d.setName(si), d.nodeCountNames(list), strings.Join(sortedKeys(drivers), ", "), condText(e.Condition), e.Problem, lead, e.Source),
			upperFirst(e.Fix)+".", list))
	}
}

func condText(c string) string {
	if c == "mig-mixed-with-full" {
		return "MIG instances and full GPUs on one node"
	}
	return c
}

func (d *diag) driverWarnings(si int, ns []int32) {
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
		d.add(d.finding(si, RuleDriverKnownBad, preflight.SeverityWarn,
			fmt.Sprintf("Nodes that would run %s match a known driver issue (%s): %s. Nodes: %s. Source: %s.",
				d.setName(si), condText(e.Condition), e.Problem, d.nodeCountNames(list), e.Source),
			upperFirst(e.Fix)+".", list))
	}
}

func (d *diag) reconfigPending(si int, ns []int32, r string) {
	what := "Those nodes offer what it asks"
	if r != "" {
		what = "The new layout offers " + r
	}
	d.add(d.finding(si, RuleMIGReconfigPending, preflight.SeverityWarn,
		fmt.Sprintf("%s: mig-manager is changing the MIG layout (%s). %s; the device plugin is paused until the change ends, so %s waits.",
			d.nodeCountNames(ns), d.migStates(ns), what, d.setName(si)),
		"Wait for nvidia.com/mig.config.state=success on those nodes. If it stays pending or rebooting, look at the mig-manager pod on the node: GPU pods still running there block the change.", ns))
}

func (d *diag) reconfigFailed(si int, ns []int32, r string, decisive bool) {
	sev := preflight.SeverityWarn
	tail := "such nodes are left out of the placement"
	if decisive {
		sev = preflight.SeverityFail
		tail = "no other node offers the shape"
	}
	what := "Those nodes offer what " + d.setName(si) + " asks"
	if r != "" {
		what = "The new layout would offer " + r
	}
	d.add(d.finding(si, RuleMIGReconfigFailed, sev,
		fmt.Sprintf("%s: mig-manager failed to change the MIG layout (%s). %s, but %s.", d.nodeCountNames(ns), d.migStates(ns), what, tail),
		"Read the mig-manager logs on those nodes (kubectl -n gpu-operator logs -l app=nvidia-mig-manager), fix the mig-parted config or the node (GPU processes still running block a change), then set nvidia.com/mig.config again.", ns))
}

func (d *diag) migStates(ns []int32) string {
	seen := map[string]bool{}
	for _, n := range ns {
		g := d.c.nodes[n].gpu
		s := "mig.config=" + orUnset(g.MIGConfig) + ", mig.config.state=" + orUnset(g.MIGConfigState)
		if g.PausedForMIGChange {
			s += ", gpu.deploy.*=paused-for-mig-change"
		}
		seen[s] = true
	}
	return strings.Join(sortedKeys(seen), "; ")
}

func (d *diag) layoutInvalid(si int, ns []int32, r string) {
	var parts []string
	for _, n := range ns {
		if len(parts) == d.e.maxNames {
			parts = append(parts, fmt.Sprintf("and %d more", len(ns)-d.e.maxNames))
			break
		}
		ni := &d.c.nodes[n]
		switch {
		case ni.gpu.Invalid():
			parts = append(parts, fmt.Sprintf("%s: GFD labels the product %s (MIG enabled with no instances, MIG and non-MIG GPUs together, or several profiles under mig.strategy=single)", ni.node.Name, ni.gpu.Product))
		default:
			parts = append(parts, fmt.Sprintf("%s: %s applied (state %s) but the node advertises %s 0", ni.node.Name, "mig.config="+ni.gpu.MIGConfig, orUnset(ni.gpu.MIGConfigState), r))
		}
	}
	d.add(d.finding(si, RuleMIGLayoutInvalid, preflight.SeverityFail,
		fmt.Sprintf("No node advertises %s, which %s asks for. Nodes whose layout should offer it advertise none: %s.", r, d.setName(si), strings.Join(parts, "; ")),
		"Give the node a layout its strategy can advertise: under mig.strategy=single every GPU needs the same one profile (or MIG off on all); otherwise use mixed. Then restart the device plugin and GFD pods on the node and check kubectl describe node.", ns))
}

func (d *diag) strategyMismatch(si int, ns []int32, r string) {
	ni := &d.c.nodes[ns[0]]
	if p, ok := MIGProfileOf(r); ok {
		d.add(d.finding(si, RuleStrategyMismatch, preflight.SeverityFail,
			fmt.Sprintf("%s asks %s, but the nodes with %s instances use mig.strategy=single (%s): they advertise them as nvidia.com/gpu (product %s), never as %s.",
				d.setName(si), r, p, d.nodeCountNames(ns), ni.gpu.Product, r),
			fmt.Sprintf("Ask for nvidia.com/gpu with nodeSelector %s=%s, or switch those nodes' device plugin and GFD to mig.strategy=mixed.", LabelProduct, ni.gpu.Product), ns))
		return
	}
	offered := map[string]bool{}
	for _, n := range ns {
		row := int(n) * len(d.c.resName)
		for j, name := range d.c.resName {
			if strings.HasPrefix(name, MIGPrefix) && d.c.alloc[row+j] > 0 {
				offered[name] = true
			}
		}
	}
	d.add(d.finding(si, RuleStrategyMismatch, preflight.SeverityFail,
		fmt.Sprintf("%s asks nvidia.com/gpu (full GPUs), but no node advertises it: the GPU nodes (%s) use mig.strategy=mixed with every GPU partitioned and offer only %s.",
			d.setName(si), d.nodeCountNames(ns), strings.Join(sortedKeys(offered), ", ")),
		"Ask for one of those MIG resources, or give nodes full GPUs: label them nvidia.com/mig.config=all-disabled (mig-manager drains the GPUs).", ns))
}

// shapeMismatch: nobody offers r and nothing explains it but the shape.
func (d *diag) shapeMismatch(si int, r string, stale, excludedPending []int32) {
	msg := fmt.Sprintf("%s asks %s, and no node offers it.", d.setName(si), d.askDescription(r))
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
	fix := "Ask for a shape the cluster offers (same memory does not mean same compute: compare SMs), or give nodes a MIG layout with this profile."
	if _, ok := MIGProfileOf(r); !ok {
		fix = "Add GPU nodes, or check that the NVIDIA device plugin runs on them (kubectl describe node shows nvidia.com/gpu under Allocatable)."
	}
	d.add(d.finding(si, RuleShapeMismatch, preflight.SeverityFail, msg, fix, stale))
}

// reconfigurable names nodes whose GPU model can carry profile r and the
// mig-parted layout that would create it.
func (d *diag) reconfigurable(si int, r string, ns []int32) {
	p, _ := MIGProfileOf(r)
	s := &d.sets[si]
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
	d.add(d.finding(si, RuleReconfigurable, preflight.SeverityInfo, msg,
		fmt.Sprintf("Reconfiguring destroys the node's MIG instances and the work on them: drain the node first (kubectl drain), then label it nvidia.com/mig.config=all-%s (add that name to the mig-parted config map if it is missing) and wait for nvidia.com/mig.config.state=success. Under mig.strategy=mixed it appears as %s.", p, r),
		all))
}

// gpuMeaning warns when nvidia.com/gpu means a full GPU on some usable
// nodes and a MIG instance (single strategy) on others.
func (d *diag) gpuMeaning(si int, ns []int32) {
	s := &d.sets[si]
	if len(s.ps.migResources()) > 0 {
		s.mig = true
	}
	if s.ps.Requests[ResourceGPU] <= 0 || len(ns) == 0 {
		return
	}
	kinds := map[string][]int32{}
	for _, n := range ns {
		m := d.c.nodes[n].gpuMeaning()
		kinds[m] = append(kinds[m], n)
	}
	if len(kinds) == 1 {
		s.mig = s.mig || strings.HasPrefix(d.c.nodes[ns[0]].gpuMeaning(), "MIG")
		return
	}
	s.mig = true
	var parts []string
	var single []int32
	for _, k := range sortedKeys(kinds) {
		parts = append(parts, fmt.Sprintf("a %s on %s", k, d.nodeCountNames(kinds[k])))
		if strings.HasPrefix(k, "MIG") {
			single = append(single, kinds[k]...)
		}
	}
	d.add(d.finding(si, RuleStrategyMismatch, preflight.SeverityWarn,
		fmt.Sprintf("%s asks nvidia.com/gpu, which means %s (mig.strategy=single advertises MIG instances as nvidia.com/gpu). Its ranks may land on either and mix MIG instances with full GPUs.",
			d.setName(si), strings.Join(parts, ", ")),
		fmt.Sprintf("Pin the job with a nodeSelector on %s to the kind of device it needs.", LabelProduct), single))
}

// shortLayouts warns when a usable node advertises fewer instances of a
// requested profile than its applied layout gives (gpu-operator#693).
func (d *diag) shortLayouts(si int, ns []int32) {
	s := &d.sets[si]
	for _, r := range s.ps.migResources() {
		j := d.c.resIndex(r)
		var short []int32
		var parts []string
		for _, n := range ns {
			ni := &d.c.nodes[n]
			ok, per := ni.tgt.offers(r)
			if !ok || per == 0 || ni.gpu.Count == 0 || ni.state != migOK {
				continue
			}
			want := int64(per * ni.gpu.Count)
			if have := d.c.allocOf(int(n), j); have < want {
				short = append(short, n)
				if len(parts) < d.e.maxNames {
					parts = append(parts, fmt.Sprintf("%s advertises %d, mig.config=%s gives %d per GPU x %s = %d", ni.node.Name, have, ni.gpu.MIGConfig, per, plural(ni.gpu.Count, "GPU"), want))
				}
			}
		}
		if len(short) == 0 {
			continue
		}
		d.add(d.finding(si, RuleMIGLayoutInvalid, preflight.SeverityWarn,
			fmt.Sprintf("Fewer %s are advertised than the MIG layout creates on %s: %s.", r, d.nodeCountNames(short), strings.Join(parts, "; ")),
			"Check the device plugin and mig-manager on those nodes (kubectl describe node; their pod logs); restarting the device plugin pod re-advertises the instances. Cluster autoscalers that only know nvidia.com/gpu cannot add MIG capacity.", short))
	}
}

// multiPod: MIG instances in a job of more than one GPU pod.
func (d *diag) multiPod() {
	pods := d.w.gpuPods()
	if pods < 2 {
		return
	}
	var migSets, fullSets []string
	for i := range d.sets {
		s := &d.sets[i]
		if !s.ps.gpuRequest() {
			continue
		}
		if !s.mig && len(s.ps.migResources()) > 0 {
			s.mig = true
		}
		if s.mig {
			migSets = append(migSets, fmt.Sprintf("%s: %s", s.label, fmtGPURequests(s.ps.Requests)))
		} else {
			fullSets = append(fullSets, s.label)
		}
	}
	if len(migSets) == 0 {
		return
	}
	msg := fmt.Sprintf("The job runs %d GPU pods on MIG instances (%s). MIG has no P2P or NVLink, and ranks in different pods cannot share memory, so NCCL connects every pair of ranks over the network (NET: sockets or IB), even two instances of one GPU on one node. Expect much lower collective bandwidth than on full GPUs, and NCCL init hangs if the network path is blocked.",
		pods, strings.Join(migSets, "; "))
	if len(fullSets) > 0 {
		msg += fmt.Sprintf(" It also mixes MIG instances with full GPUs (%s): the slowest path sets the pace.", strings.Join(fullSets, ", "))
	}
	d.add(d.finding(-1, RuleMIGMultiPod, preflight.SeverityWarn, msg,
		"For MIG, run all ranks in one pod on instances of one physical GPU (one process per instance, NCCL_MULTI_RANK_GPU_ENABLE=1 with NCCL's MIG support); for multi-node training ask for full GPUs (nvidia.com/gpu on nodes with MIG disabled).", nil))
}

// gang places the whole job: first on an empty cluster, then now.
func (d *diag) gang() {
	for i := range d.sets {
		if d.sets[i].blocked {
			return
		}
	}
	if len(d.sets) == 0 {
		d.add(d.finding(-1, RuleSchedulable, preflight.SeverityInfo, "The workload has no pods to place.", "", nil))
		return
	}
	groups := make([][]int, len(d.sets))
	for i := range groups {
		groups[i] = []int{i}
	}
	nres := len(d.resName)
	c := d.c

	unknown := false
	empty := make([]class, len(groups))
	for gi, g := range groups {
		s := &d.sets[g[0]]
		empty[gi] = class{sets: g, req: s.req, nodes: s.later}
		for _, si := range g {
			empty[gi].need += d.sets[si].ps.Count
			unknown = unknown || d.sets[si].laterUnknown
		}
	}
	pendingSet := map[int32]bool{}
	for i := range d.sets {
		for _, n := range d.sets[i].pendingOnly {
			pendingSet[n] = true
		}
	}
	capEmpty := func(n int32, k int) int64 {
		ni := &c.nodes[n]
		if pendingSet[n] && ni.tgt.known && IsGPUResource(d.resName[k]) {
			ok, per := ni.tgt.offers(d.resName[k])
			if !ok {
				return 0
			}
			if per > 0 && ni.gpu.Count > 0 {
				return int64(per * ni.gpu.Count)
			}
		}
		return c.allocOf(int(n), d.resIdx[k])
	}
	if !unknown {
		if p, ok := pack(empty, nres, len(c.nodes), capEmpty); !ok {
			d.gangTooLarge(empty, p, capEmpty)
			return
		}
	}
	waiting := false
	for i := range d.sets {
		waiting = waiting || d.sets[i].waiting
	}
	if waiting {
		return
	}
	now := make([]class, len(groups))
	total := 0
	for gi, g := range groups {
		s := &d.sets[g[0]]
		now[gi] = class{sets: g, req: s.req, nodes: s.now}
		for _, si := range g {
			now[gi].need += d.sets[si].ps.Pending()
		}
		total += now[gi].need
	}
	if total == 0 {
		d.add(d.finding(-1, RuleSchedulable, preflight.SeverityInfo, "Every pod of the workload is already bound to a node.", "", nil))
		return
	}
	capNow := func(n int32, k int) int64 { return c.freeOf(int(n), d.resIdx[k]) }
	p, ok := pack(now, nres, len(c.nodes), capNow)
	if ok {
		d.schedulable(now, p)
		return
	}
	d.waitCapacity(now, p, capNow)
}

func (d *diag) className(cl class) string {
	var names []string
	for _, si := range cl.sets {
		names = append(names, d.setName(si))
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
			if q <= 0 || !IsGPUResource(d.resName[k]) {
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
	d.add(d.finding(-1, RuleGangTooLarge, preflight.SeverityFail,
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
	d.add(d.finding(-1, RuleSchedulable, preflight.SeverityInfo, msg, fix, d.dedupe(nodes)))
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
			if IsGPUResource(d.resName[k]) {
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
	d.add(d.finding(-1, RuleWaitCapacity, preflight.SeverityWarn, msg, fix, d.dedupe(busy)))
	var pending []int32
	for i := range d.sets {
		pending = append(pending, d.sets[i].pendingOnly...)
	}
	if len(pending) > 0 {
		d.reconfigPending(-1, d.dedupe(pending), "")
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
		var use []string
		for k, q := range cl.req {
			if q <= 0 || !IsGPUResource(d.resName[k]) {
				continue
			}
			a := d.c.allocOf(int(n), d.resIdx[k])
			f := d.c.freeOf(int(n), d.resIdx[k])
			use = append(use, fmt.Sprintf("%d/%d %s in use", a-f, a, d.resName[k]))
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", d.c.nodes[n].node.Name, strings.Join(use, ", ")))
	}
	return strings.Join(parts, ", ")
}
