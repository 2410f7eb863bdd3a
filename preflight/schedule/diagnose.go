package schedule

import (
	"fmt"
	"strings"

	"github.com/rankgate/rankgate/verdict"
)

// Rules lists every rule ID, for documentation tests.
var Rules = []string{
	verdict.RuleSchedulable, verdict.RuleWaitCapacity, verdict.RuleShapeMismatch, verdict.RuleStrategyMismatch,
	verdict.RuleMIGLayoutInvalid, verdict.RuleMIGReconfigPending, verdict.RuleMIGReconfigFailed,
	verdict.RuleDriverKnownBad, verdict.RuleGangTooLarge, verdict.RuleNodeConstraints,
	verdict.RuleReconfigurable, verdict.RuleMIGMultiPod, verdict.RuleDRANotJudged, verdict.RuleDRADeviceUnhealthy,
	verdict.RuleNodeLabelsUnreadable,
}

// Result is the engine's judgement of one workload.
type Result struct {
	// Report holds every finding; its verdict is fail when the workload
	// cannot run as it is (Hopeless), warn when it waits.
	Report verdict.Report
	// Rule is the primary verdict: SCHEDULABLE, WAIT_CAPACITY,
	// MIG_RECONFIG_PENDING, DRA_DEVICE_UNHEALTHY (devices that come back
	// once repaired, as NotReady nodes do), or the first rule that makes
	// it hopeless.
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

// diag judges one workload in two steps: classification (classify.go),
// which finds for each pod set the nodes it can use or why it can use none,
// and for the job whether it fits; then explanation, which turns those
// classes into findings, one file per verdict family (explain_*.go).
type diag struct {
	e *Engine
	c *Cluster
	w *Workload
	// Job resources: the union of the pod sets' requested resources.
	resName []string
	resIdx  []int // cluster resource index, -1 when no node has it
	sets    []setState
	out     []verdict.Finding
	// lastPlacement is the placement found when the job fits now.
	lastPlacement []Assignment
}

// setState is a class of pod sets (equal requests and constraints) with
// its classification.
type setState struct {
	ps    *PodSet
	label string  // "Master (1 pod) + Worker (3 pods)"
	req   []int64 // per job resource
	setClass
}

// Diagnose judges one workload against a prepared cluster. A workload
// whose devices come through DRA is judged on the published devices
// (judgeDRA), or not at all when they are unknown (standDown).
func (e *Engine) Diagnose(c *Cluster, w Workload) Result {
	return c.unreadableLabels(e.diagnose(c, w))
}

// maxLabelErrors: the nodes NODE_LABELS_UNREADABLE names.
const maxLabelErrors = 3

// unreadableLabels is the one policy for nodes whose GPU labels cannot be
// read (ParseGPULabels): they are judged from their allocatable alone,
// without the facts the labels give (MIG strategy, layout and state,
// product), and a workload that would be hopeless is not called so while
// any node's labels cannot be read: such a node may be the one that
// serves it (a layout change in flight, say). Its fail findings become
// warnings, led by NODE_LABELS_UNREADABLE naming the nodes; the faces
// (diagnose, the validating webhook, the Pending watchdog and the gang's
// unplaceable ranks) then neither fail, refuse nor suspend it. A workload
// that is not hopeless is judged as it is.
func (c *Cluster) unreadableLabels(res Result) Result {
	if len(c.LabelErrors) == 0 || !res.Hopeless {
		return res
	}
	errs := make([]string, 0, maxLabelErrors)
	for _, err := range c.LabelErrors[:min(len(c.LabelErrors), maxLabelErrors)] {
		errs = append(errs, err.Error())
	}
	more := ""
	if n := len(c.LabelErrors) - maxLabelErrors; n > 0 {
		more = fmt.Sprintf("; and %d more node(s)", n)
	}
	findings := []verdict.Finding{{
		Rule: verdict.RuleNodeLabelsUnreadable, Severity: verdict.SeverityWarn,
		Message: fmt.Sprintf("The job would be hopeless (%s), but the GPU labels of %d node(s) cannot be read (%s%s): those nodes are judged from their allocatable alone, so the job is not failed or refused until their labels are fixed.",
			res.Rule, len(c.LabelErrors), strings.Join(errs, "; "), more),
		Remediation: "fix the named labels (GPU feature discovery and mig-manager write them; a hand-edited nvidia.com/ label is the usual cause), then the job is judged again",
	}}
	for _, f := range res.Report.Findings {
		if f.Severity == verdict.SeverityFail {
			f.Severity = verdict.SeverityWarn
		}
		findings = append(findings, f)
	}
	rep := verdict.NewReport(res.Report.Subject, findings)
	rep.Mode, rep.Devices = res.Report.Mode, res.Report.Devices
	res.Report, res.Rule, res.Hopeless = rep, verdict.RuleNodeLabelsUnreadable, false
	return res
}

func (e *Engine) diagnose(c *Cluster, w Workload) Result {
	if res, ok := e.judgeDRA(c, &w); ok {
		return res
	}
	if res, ok := standDown(&w); ok {
		return res
	}
	d := newDiag(e, c, &w)
	for i := range d.sets {
		d.sets[i].setClass = d.classifySet(&d.sets[i])
	}
	job := d.classifyJob()
	for i := range d.sets {
		d.explainSet(&d.sets[i])
	}
	d.multiPod()
	d.explainJob(job)
	return d.result()
}

// newDiag gathers the job's resources and its pod sets; pod sets with
// equal requests and constraints (a Master and its Workers, usually) are
// judged and packed as one class.
func newDiag(e *Engine, c *Cluster, w *Workload) *diag {
	d := &diag{e: e, c: c, w: w}
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
	keys := map[string]int{}
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if ps.Count <= 0 {
			continue
		}
		label := fmt.Sprintf("%s (%s)", ps.Name, plural(ps.Count, "pod"))
		k := podSetKey(ps)
		if si, ok := keys[k]; ok {
			d.sets[si].merge(ps, label)
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
	return d
}

// merge adds an equal pod set to the class.
func (s *setState) merge(ps *PodSet, label string) {
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
}

func (d *diag) add(f verdict.Finding) {
	d.out = append(d.out, f)
}

// result takes the verdict from the findings: the first failure, else a
// pending MIG change, excluded nodes, waiting for capacity, in that order.
func (d *diag) result() Result {
	res := Result{
		Report:    verdict.NewReport(d.w.Subject(), append([]verdict.Finding(nil), d.out...)),
		Placement: d.lastPlacement,
	}
	var wait, pending, excluded bool
	for _, f := range d.out {
		if f.Severity == verdict.SeverityFail && res.Rule == "" {
			res.Rule, res.Hopeless = f.Rule, true
		}
		wait = wait || f.Rule == verdict.RuleWaitCapacity
		pending = pending || (f.Rule == verdict.RuleMIGReconfigPending && f.Severity == verdict.SeverityWarn)
		excluded = excluded || (f.Rule == verdict.RuleNodeConstraints && f.Severity == verdict.SeverityWarn)
	}
	switch {
	case res.Rule != "":
	case pending:
		res.Rule = verdict.RuleMIGReconfigPending
	case excluded:
		res.Rule = verdict.RuleNodeConstraints
	case wait:
		res.Rule = verdict.RuleWaitCapacity
	default:
		res.Rule = verdict.RuleSchedulable
	}
	return res
}

// finding about a pod set s, or about the whole job when s is nil.
func (d *diag) finding(s *setState, rule string, sev verdict.Severity, msg, fix string, nodes []int32) verdict.Finding {
	f := verdict.Finding{Rule: rule, Severity: sev, Message: upperFirst(msg), Remediation: fix}
	f.Nodes = d.nodeNames(nodes, 50)
	if s != nil {
		ps := s.ps
		f.Pods = limit(ps.Pods, 50)
		if ps.SchedulerMessage != "" && sev != verdict.SeverityInfo {
			f.Message += fmt.Sprintf(" The scheduler said: %q.", clip(ps.SchedulerMessage, 600))
		}
	}
	return f
}

// setName names a pod set in messages; nil is the whole job.
func (d *diag) setName(s *setState) string {
	if s == nil {
		return "the job"
	}
	if d.w.Kind == "Pod" {
		return "the pod"
	}
	return s.label
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
