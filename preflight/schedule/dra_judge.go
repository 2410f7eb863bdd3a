package schedule

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rankgate/rankgate/verdict"
)

// DRAOutcome is what trying a pod set's DRA requests against the
// published devices (ResourceSlices) found.
type DRAOutcome int

const (
	// DRAFits: every pending pod of the set gets its devices now.
	DRAFits DRAOutcome = iota
	// DRAWaits: the devices exist and would serve every pod on an empty
	// cluster, but other allocated claims hold some of them.
	DRAWaits
	// DRANoDevice: not one pod's requests can be served by the published
	// devices, even with every device free.
	DRANoDevice
	// DRAGangTooLarge: one pod's requests can be served, but not all of
	// the set's pods at once, even with every device free.
	DRAGangTooLarge
	// DRAUnhealthy: the devices exist and would serve every pod with
	// every device free, but the driver tainted some of them unhealthy
	// (NVIDIA's gpu.nvidia.com/xid, gpu.nvidia.com/gpu-lost) and the
	// scheduler allocates none of those: the set waits for their repair.
	DRAUnhealthy
)

// DRADevice is a published device as messages show it: the NVIDIA DRA
// driver's attributes (type, productName, profile, uuid, parentUUID,
// driverVersion) and capacities (memory, multiprocessors). Count > 1
// stands for that many devices of the same shape, Name being one of them.
type DRADevice struct {
	Driver, Pool, Name, Node string
	Type, Product, Profile   string
	UUID, ParentUUID         string
	DriverVersion            string
	Memory                   string
	Multiprocessors          int64
	Count                    int
}

// DRARequest is one request of one pod, with the published devices it
// matches (none when Nearest is set: the devices closest to it).
type DRARequest struct {
	// Desc says what is asked: "claim template ns/gpu-tmpl request gpu:
	// 1 device of DeviceClass mig.nvidia.com where <selector>".
	Desc string
	// Matching counts the published devices that satisfy the request on
	// their own (class, selectors, capacity), free or not; -1 when not
	// counted (the request is served, or waits for held devices).
	Matching int
	// Nearest, when Matching is 0: the devices that come closest (pass
	// the class and the most of the request's selectors and capacity).
	Nearest []DRADevice
	// NearestInClass: the nearest devices pass the request's DeviceClass
	// (they fail only the request's own selectors or capacity).
	NearestInClass bool
	// Tainted: matching devices with a NoSchedule or NoExecute device
	// taint the request does not tolerate ("gpu-0 on node-a
	// (gpu.nvidia.com/xid=79:NoSchedule)"); the allocator skips them.
	Tainted []string
	// TaintedByRule: a DeviceTaintRule's taint is among Tainted's.
	TaintedByRule bool
}

// DRAFacts is what the cluster layer found for a pod set whose devices
// come through DRA, using the scheduler's own allocator and CEL.
type DRAFacts struct {
	Outcome  DRAOutcome
	Requests []DRARequest
	// FitEmpty and FitNow: how many of the set's pending pods get all
	// their devices on an empty cluster and now.
	FitEmpty, FitNow int
	// Holders name the allocated claims holding devices that match the
	// set's requests: "ResourceClaim ns/name (pod ns/p) holds gpu-0 on
	// node-a" (DRAWaits, DRAUnhealthy).
	Holders []string
}

// judgeDRA judges a workload whose DRA pod sets all carry DRAFacts: the
// pods' other requests (cpu, memory, device-plugin resources) by the
// engine as usual, the DRA devices from the facts. ok is false when a DRA
// pod set has no facts (standDown answers then).
func (e *Engine) judgeDRA(c *Cluster, w *Workload) (Result, bool) {
	judged := false
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if ps.Count <= 0 || ps.DRA == "" {
			continue
		}
		if ps.DRAFacts == nil {
			return Result{}, false
		}
		judged = true
	}
	if !judged {
		return Result{}, false
	}
	rest := *w
	rest.PodSets = make([]PodSet, len(w.PodSets))
	var groups []*draGroup
	for i, ps := range w.PodSets {
		if ps.DRA != "" && ps.Count > 0 {
			groups = addDRAGroup(groups, &w.PodSets[i])
		}
		ps.DRA, ps.DRAFacts = "", nil
		rest.PodSets[i] = ps
	}
	var out []verdict.Finding
	for _, g := range groups {
		out = append(out, g.finding())
	}
	res := e.Diagnose(c, rest)
	return mergeDRA(w, res, out), true
}

// draGroup gathers pod sets with the same DRA requests and outcome (a
// Master and its Workers, usually) into one finding.
type draGroup struct {
	key                    string
	labels, pods, holders  []string
	count, pending, fitNow int
	fitEmpty               int
	first                  *PodSet
}

func addDRAGroup(groups []*draGroup, ps *PodSet) []*draGroup {
	f := ps.DRAFacts
	key := fmt.Sprintf("%d|%s", f.Outcome, ps.DRA)
	for _, r := range f.Requests {
		key += "|" + r.Desc
	}
	var g *draGroup
	for _, x := range groups {
		if x.key == key {
			g = x
		}
	}
	if g == nil {
		g = &draGroup{key: key, first: ps}
		groups = append(groups, g)
	}
	g.labels = append(g.labels, fmt.Sprintf("%s (%s)", ps.Name, plural(ps.Count, "pod")))
	g.pods = append(g.pods, ps.Pods...)
	g.count += ps.Count
	g.pending += ps.Pending()
	g.fitNow += f.FitNow
	g.fitEmpty += f.FitEmpty
	for _, h := range f.Holders {
		if !slices.Contains(g.holders, h) {
			g.holders = append(g.holders, h)
		}
	}
	return groups
}

// mergeDRA puts the DRA findings before the engine's and sets the
// primary rule: a DRA device no one can serve makes the job hopeless;
// held devices make a schedulable job wait.
func mergeDRA(w *Workload, res Result, dra []verdict.Finding) Result {
	// The engine's "fits now" speaks of the pods' other requests: it
	// stays only when the DRA devices fit now too.
	devicesFit := true
	for _, f := range dra {
		devicesFit = devicesFit && f.Rule == verdict.RuleSchedulable
	}
	findings := append([]verdict.Finding(nil), dra...)
	for _, f := range res.Report.Findings {
		if devicesFit || f.Rule != verdict.RuleSchedulable {
			findings = append(findings, f)
		}
	}
	// No placement: the engine's placed the pods' other requests only,
	// not where the DRA devices are.
	out := Result{Report: verdict.NewReport(w.Subject(), findings), Rule: res.Rule, Hopeless: res.Hopeless}
	for _, f := range dra {
		switch {
		case f.Severity == verdict.SeverityFail && !out.Hopeless:
			out.Rule, out.Hopeless = f.Rule, true
		case out.Hopeless:
		case f.Rule == verdict.RuleWaitCapacity && out.Rule == verdict.RuleSchedulable:
			out.Rule = f.Rule
		case f.Rule == verdict.RuleDRADeviceUnhealthy && (out.Rule == verdict.RuleSchedulable || out.Rule == verdict.RuleWaitCapacity):
			// Unhealthy devices are what the job waits for first: free
			// capacity does not help it before they are repaired.
			out.Rule = f.Rule
		}
	}
	return out
}

// finding says what the published devices mean for a group of pod sets.
func (g *draGroup) finding() verdict.Finding {
	f := g.first.DRAFacts
	set := strings.Join(g.labels, " + ")
	pending := plural(g.pending, "pending pod")
	via := g.first.DRA
	var rule, msg string
	sev := verdict.SeverityWarn
	switch f.Outcome {
	case DRANoDevice:
		rule, sev = verdict.RuleShapeMismatch, verdict.SeverityFail
		msg = fmt.Sprintf("%s: no device published in any ResourceSlice can serve a pod's DRA requests (%s), even with every device free. %s",
			set, via, describeGaps(f.Requests))
	case DRAGangTooLarge:
		rule, sev = verdict.RuleGangTooLarge, verdict.SeverityFail
		msg = fmt.Sprintf("%s: even with every device free, the published devices serve the DRA requests (%s) of %d of the %s at once. %s",
			set, via, g.fitEmpty, pending, describeMatches(f.Requests))
	case DRAWaits:
		rule = verdict.RuleWaitCapacity
		msg = fmt.Sprintf("%s: the published devices serve the DRA requests (%s) of all %s on an empty cluster, but of %d now: other allocated claims hold the matching devices. %s Holding them: %s.",
			set, via, pending, g.fitNow, describeMatches(f.Requests), strings.Join(limit(g.holders, 10), "; "))
	case DRAUnhealthy:
		rule = verdict.RuleDRADeviceUnhealthy
		who, until := "the driver tainted matching devices as unhealthy", "those devices are repaired and published untainted"
		if taintedByRule(f.Requests) {
			who, until = "matching devices are tainted (as unhealthy by the driver, or by a DeviceTaintRule)", "those devices are repaired and published untainted, and the rules' taints removed"
		}
		msg = fmt.Sprintf("%s: the published devices would serve the DRA requests (%s) of all %s, but %s and the scheduler allocates none of those: the healthy ones serve %d. %s The pods wait until %s.",
			set, via, pending, who, g.fitEmpty, describeTaints(f.Requests), until)
		if len(g.holders) > 0 {
			msg += " Other allocated claims hold matching devices too: " + strings.Join(limit(g.holders, 10), "; ") + "."
		}
	default:
		rule, sev = verdict.RuleSchedulable, verdict.SeverityInfo
		msg = fmt.Sprintf("%s: the published devices serve the DRA requests (%s) of all %s now. %s",
			set, via, pending, describeMatches(f.Requests))
	}
	r, _ := verdict.Lookup(rule)
	fix := r.Remediation
	switch f.Outcome {
	case DRANoDevice:
		fix = "change the request's DeviceClass, selectors or capacity to a device the cluster publishes (the finding names the nearest ones), or publish such a device"
	case DRAWaits:
		fix = "wait, or free the devices those claims hold"
	case DRAUnhealthy:
		fix = "repair the named GPUs (an XID taint's value is the Xid in the node's kernel log; gpu-lost: reset the GPU or reboot the node), then restart the DRA driver's kubelet plugin so it publishes them untainted (NVIDIA's driver never clears a health taint by itself); never tolerate a health taint"
		if taintedByRule(f.Requests) {
			fix += "; a taint from a DeviceTaintRule: delete the rule (kubectl delete devicetaintrule NAME) once the devices it selects are serviced"
		}
	}
	return verdict.Finding{Rule: rule, Severity: sev, Message: msg, Remediation: fix, Pods: limit(g.pods, 50)}
}

func describeGaps(reqs []DRARequest) string {
	var parts []string
	for _, r := range reqs {
		if r.Matching > 0 {
			s := fmt.Sprintf("%s: %s match on their own", r.Desc, plural(r.Matching, "device"))
			if len(r.Tainted) > 0 {
				s += fmt.Sprintf(", %d of them with a device taint the request does not tolerate: %s", len(r.Tainted), strings.Join(limit(r.Tainted, 10), "; "))
			}
			parts = append(parts, s)
			continue
		}
		s := r.Desc + ": no device matches"
		if len(r.Nearest) > 0 {
			var near []string
			for _, d := range r.Nearest {
				near = append(near, d.String())
			}
			s += "; nearest: " + strings.Join(near, "; ")
		}
		parts = append(parts, s)
	}
	out := strings.Join(parts, ". ") + "."
	if allMatch(reqs) {
		out += " Each request matches devices on its own, but no node holds all of one pod's requests together among the untainted ones (counts, constraints such as matchAttribute, devices on different nodes, device taints, or the shared counters of a GPU whose dynamic MIG placements they draw on)."
	}
	return out
}

// describeTaints lists, per request, the published devices that match it
// and those of them the driver tainted.
func taintedByRule(reqs []DRARequest) bool {
	for _, r := range reqs {
		if r.TaintedByRule {
			return true
		}
	}
	return false
}

func describeTaints(reqs []DRARequest) string {
	var parts []string
	for _, r := range reqs {
		s := fmt.Sprintf("%s: %s match", r.Desc, plural(r.Matching, "published device"))
		if len(r.Tainted) > 0 {
			s += fmt.Sprintf(", %d of them tainted: %s", len(r.Tainted), strings.Join(limit(r.Tainted, 10), "; "))
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ". ") + "."
}

func allMatch(reqs []DRARequest) bool {
	for _, r := range reqs {
		if r.Matching == 0 {
			return false
		}
	}
	return true
}

// describeMatches lists a pod's requests, with the published devices
// that match each where they were counted.
func describeMatches(reqs []DRARequest) string {
	var asked, counted []string
	for _, r := range reqs {
		if r.Matching < 0 {
			asked = append(asked, r.Desc)
			continue
		}
		counted = append(counted, fmt.Sprintf("%s: %s match", r.Desc, plural(r.Matching, "published device")))
	}
	var out []string
	if len(asked) > 0 {
		out = append(out, "Each pod asks "+strings.Join(asked, "; ")+".")
	}
	if len(counted) > 0 {
		out = append(out, strings.Join(counted, ". ")+".")
	}
	return strings.Join(out, " ")
}

// String: "gpu-0: NVIDIA H100 80GB HBM3 (81559Mi, driver 580.126.20) on
// dgx-h100-0", or for a group "7 x MIG 1g.10gb of NVIDIA H100 80GB HBM3
// (16 SMs, 9984Mi, driver 580.126.20) on dgx-h100-1, e.g.
// gpu-0-mig-1g10gb-19-0".
func (d DRADevice) String() string {
	var shape string
	switch {
	case d.Profile != "":
		shape = fmt.Sprintf("MIG %s of %s", d.Profile, orUnknown(d.Product))
	case d.Product != "":
		shape = d.Product
	default:
		shape = orUnknown(d.Type) + " device"
	}
	var facts []string
	if d.Multiprocessors > 0 {
		facts = append(facts, fmt.Sprintf("%d SMs", d.Multiprocessors))
	}
	if d.Memory != "" {
		facts = append(facts, d.Memory)
	}
	if d.DriverVersion != "" {
		facts = append(facts, "driver "+d.DriverVersion)
	}
	if len(facts) > 0 {
		shape += " (" + strings.Join(facts, ", ") + ")"
	}
	if d.Node != "" {
		shape += " on " + d.Node
	}
	if d.Count > 1 {
		return fmt.Sprintf("%d x %s, e.g. %s", d.Count, shape, d.Name)
	}
	return d.Name + ": " + shape
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown product"
	}
	return s
}
