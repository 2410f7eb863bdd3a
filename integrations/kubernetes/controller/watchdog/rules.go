package watchdog

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// MaxWaitingFor bounds rankgate.io/waiting-for, in bytes (as the
// controller bounds rankgate.io/reason).
const MaxWaitingFor = 2048

// Unschedulable: the scheduler marked the unbound pod unschedulable.
func Unschedulable(p *corev1.Pod) bool {
	if p.Spec.NodeName != "" {
		return false
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// unschedulableSince is the earliest time one of pods was marked
// unschedulable (seen where its condition has no time); ok is false when
// none is.
func unschedulableSince(pods []*corev1.Pod, seen time.Time) (since time.Time, ok bool) {
	for _, p := range pods {
		if !Unschedulable(p) || p.DeletionTimestamp != nil {
			continue
		}
		t := seen
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && !cond.LastTransitionTime.IsZero() {
				t = cond.LastTransitionTime.Time
			}
		}
		if !ok || t.Before(since) {
			since, ok = t, true
		}
	}
	return since, ok
}

// gpuTransient: between o and n the node advertises fewer of some GPU
// resource, or its Ready condition changed.
func gpuTransient(o, n *corev1.Node) bool {
	for res, q := range o.Status.Allocatable {
		if !topology.IsGPUResource(string(res)) {
			continue
		}
		if nq, ok := n.Status.Allocatable[res]; !ok || nq.Cmp(q) < 0 {
			return true
		}
	}
	return cluster.NodeReady(o) != cluster.NodeReady(n)
}

// JobDuration reads a duration annotation ("0s" allowed; at most
// gate.MaxJobDuration), else def.
func JobDuration(o client.Object, key string, def time.Duration) (time.Duration, error) {
	s, ok := o.GetAnnotations()[key]
	if !ok || s == "" {
		return def, nil
	}
	d, err := gate.ParseJobDuration(s)
	if err != nil {
		return def, fmt.Errorf("annotation %s=%q is not a duration like 30s", key, s)
	}
	return d, nil
}

// Cause reads the engine's result: hopeless, or what the job waits for
// (the finding of the primary rule). With onDemand, a job that only a MIG
// layout change would cure waits (RECONFIGURABLE).
func Cause(res schedule.Result, onDemand bool) (hopeless bool, cause verdict.Finding) {
	if res.Hopeless && !(onDemand && reconfigurableOnly(res.Report.Findings)) {
		return true, verdict.Finding{}
	}
	rule := res.Rule
	if res.Hopeless {
		rule = verdict.RuleReconfigurable
	}
	for _, f := range res.Report.Findings {
		if f.Rule == rule && f.Severity != verdict.SeverityFail {
			return false, f
		}
	}
	return false, verdict.Finding{Rule: rule, Severity: verdict.SeverityWarn, Message: "The scheduler has not placed the job's pods yet."}
}

// reconfigurableOnly: every fail finding is a SHAPE_MISMATCH that a MIG
// layout change would cure (a RECONFIGURABLE finding about the same pods).
func reconfigurableOnly(fs []verdict.Finding) bool {
	any := false
	for _, f := range fs {
		if f.Severity != verdict.SeverityFail {
			continue
		}
		if f.Rule != verdict.RuleShapeMismatch {
			return false
		}
		cured := false
		for _, r := range fs {
			if r.Rule == verdict.RuleReconfigurable && (len(f.Pods) == 0 || len(r.Pods) == 0 || slices.ContainsFunc(f.Pods, func(p string) bool { return slices.Contains(r.Pods, p) })) {
				cured = true
			}
		}
		if !cured {
			return false
		}
		any = true
	}
	return any
}

// TimeoutReport is the PENDING_TIMEOUT verdict with the last cause.
func TimeoutReport(subject string, cause verdict.Finding, waited, timeout time.Duration) verdict.Report {
	f := verdict.Finding{
		Rule: verdict.RulePendingTimeout, Severity: verdict.SeverityFail,
		Message: fmt.Sprintf("The job's pods have been unschedulable for %s, past its pending timeout of %s. It was waiting: %s: %s",
			waited.Round(time.Second), timeout, cause.Rule, cause.Message),
		Remediation: cause.Remediation,
		Nodes:       cause.Nodes, Pods: cause.Pods,
	}
	if f.Remediation == "" {
		f.Remediation = "act on the last cause, or raise the pending timeout (rankgate.io/pending-timeout)"
	}
	return verdict.NewReport(subject, []verdict.Finding{f, cause})
}

// WaitingFor is rankgate.io/waiting-for's value for cause.
func WaitingFor(cause verdict.Finding) string {
	return verdict.Truncate(cause.Rule+": "+cause.Message, MaxWaitingFor)
}

// Ours: r is a verdict of the Pending watchdog (placement rules or
// PENDING_TIMEOUT), not of the gang rules.
func Ours(r verdict.Report) bool {
	for _, f := range r.Findings {
		if f.Rule == verdict.RulePendingTimeout || slices.Contains(schedule.Rules, f.Rule) {
			return true
		}
	}
	return false
}

// UsesDRA: a pod set of w gets devices through DRA.
func UsesDRA(w schedule.Workload) bool {
	return slices.ContainsFunc(w.PodSets, func(ps schedule.PodSet) bool { return ps.DRA != "" })
}
