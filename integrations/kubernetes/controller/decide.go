package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/watchdog"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// decidedGangTTL: how long a decided gang stays in memory for late polls;
// after that the verdict is served from the job's annotations.
const decidedGangTTL = 10 * time.Minute

// decideOutcome is what one decideWith did.
type decideOutcome int

const (
	decideDone    decideOutcome = iota // a verdict stands (recorded, adopted, or answered)
	decideWaiting                      // a partial view that no longer fails: keep waiting
	decideRetry                        // recording failed: ask again later
)

// decideWith runs the gang rules once (or takes the Pending watchdog's
// report, a.pre), records the verdict (record.go: in the job attempt's
// Gang, where only the first writer's verdict stands) and answers every
// waiting rank. It runs in the leader's writes (writes.go), never twice at
// once for one gang; a verdict already recorded (by an earlier leader) is
// adopted, never decided again. Applying it to the job is the next write.
func (w *writes) decideWith(ctx context.Context, g *gang, a decision.Ask) decideOutcome {
	taken, ok := g.Begin()
	if !ok {
		return decideDone
	}
	ranks, expected, first, last := taken.Ranks, taken.Expected, taken.First, taken.Last
	undecided := g.Abort

	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	in := preflight.GangInput{Job: g.Key(), Ranks: ranks, ExpectMultiNodeNVLink: taken.MultiNodeNVLink}
	switch a.Why {
	case decision.OnComplete:
		in.Expected = expected
	case decision.OnDeadline:
		in.Expected = expected
		in.Missing = w.host.missingRanks(rctx, g, ranks, false)
		last = time.Time{}
	case decision.OnUnplaceable:
		in.Missing = a.Missing
		last = time.Time{}
	case decision.OnEarlyFail, decision.OnPending:
		last = time.Time{}
	}
	var report verdict.Report
	if a.Pre != nil {
		report = *a.Pre
	} else {
		in.NCCL = w.host.ncclSettings(rctx, g)
		report = preflight.GangRules(in)
		report.Subject = fmt.Sprintf("%s: %d of %d ranks reported", g.Key(), len(ranks), expected)
		if n := fromDRA(ranks); n > 0 {
			report.Subject += fmt.Sprintf(" (%d known from their DRA allocations)", n)
		}
	}
	if a.Why != decision.OnComplete && a.Why != decision.OnDeadline && !report.Failed() {
		// A partial view that no longer fails (a rank re-sent a passing
		// report): keep waiting.
		undecided()
		return decideWaiting
	}
	d := &decision.Decision{Report: report, DecidedAt: w.now(), DecidedBy: w.opts.Identity}
	recStart := w.now()
	rec, wrote, err := w.record(rctx, g, d)
	recTook := w.since(recStart)
	if err != nil {
		metricAPIErrors.WithLabelValues("verdict").Inc()
		if apierrors.IsForbidden(err) || isNoGangKind(err) {
			err = fmt.Errorf("%w (%s)", err, w.host.gangsRBACHint("create and update"))
		}
		w.log.Error(err, "recording verdict; retrying", "job", g.Key())
		undecided()
		return decideRetry
	}
	g.Answer(rec, w.now())

	log := w.log.WithValues("job", g.Key(), "verdict", rec.Report.Verdict, "trigger", a.Why.String())
	switch {
	case rec.Unrecorded:
		log.Info("job deleted or replaced; verdict answered, not recorded")
	case rec.Applied:
		log.Info("verdict already recorded on the job; adopted")
	case !wrote:
		log.Info("verdict recorded by an earlier leader; adopted")
	default:
		w.decisions.Add(1)
		observeVerdict(rec.Report, first, last, w.now()) // recorded and answered
		log.Info("gang decided", "ranks", len(ranks), "expected", expected, "action", rec.Action, "rules", strings.Join(rec.Report.RuleIDs(), ","),
			"sinceLastReport", w.sinceOrZero(last), "recordTook", recTook.Round(time.Microsecond).String())
	}
	return decideDone
}

func (w *writes) sinceOrZero(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return w.since(t).Round(time.Microsecond).String()
}

// adoptVerdict closes the open gang g with d, a verdict another replica
// recorded in its Gang (one that led before this one): the waiting ranks
// are answered with it, and it is applied (the next write).
func (w *writes) adoptVerdict(g *gang, d *decision.Decision) {
	if !g.Open() {
		return
	}
	g.Answer(d, w.now())
	w.log.Info("verdict recorded by another replica; adopted", "job", g.Key(), "verdict", d.Report.Verdict, "decidedBy", d.DecidedBy)
	w.enqueue(g.UID(), applyPriority(d), 0)
}

// emitEvent puts the verdict on the job as a Kubernetes Event.
func (w *writes) emitEvent(obj client.Object, d *decision.Decision) {
	typ, reason := corev1.EventTypeNormal, contract.ReasonGangPassed
	note := decision.Summary(d.Report)
	switch {
	case d.Report.Failed():
		typ, reason = corev1.EventTypeWarning, contract.ReasonGangFailed
		if watchdog.Ours(d.Report) {
			reason = contract.ReasonPendingFailed
		}
		note = decision.FailReason(d.Report, 0)
		switch {
		case d.Action == ActionSuspend && d.Kueue != "" && d.DeleteRefused != "":
			note = d.Kueue + ", job not deleted (" + d.DeleteRefused + "): " + note
		case d.Action == ActionSuspend && d.Kueue != "":
			note = d.Kueue + ": " + note
		case d.Action == ActionSuspend && d.DeleteRefused != "":
			note = "job suspended, not deleted (" + d.DeleteRefused + "): " + note
		case d.Action == ActionSuspend:
			note = "job suspended: " + note
		case d.Action == ActionDelete:
			note = "job deleted: " + note
		}
	case d.Report.Verdict == verdict.VerdictWarn:
		reason = contract.ReasonGangPassedWithWarnings
	}
	// events.k8s.io notes are limited to 1 kB.
	note = verdict.Truncate(note, 1000)
	w.rec.Eventf(obj, nil, typ, reason, "Gate", "%s", note)
}

// deleteJob deletes the job a delete verdict names, only the one with the
// verdict's UID. A job already gone (or replaced) is done.
func (w *writes) deleteJob(ctx context.Context, t target) error {
	k, _ := kubeflow.ByName(t.kind)
	obj := k.New()
	obj.SetNamespace(t.ns)
	obj.SetName(t.name)
	err := w.client.Delete(ctx, obj, client.PropagationPolicy("Background"), client.Preconditions{UID: ptrUID(t.uid)})
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // Conflict: the UID precondition failed, another job has the name now
	}
	metricAPIErrors.WithLabelValues("delete").Inc()
	return fmt.Errorf("deleting failed job %s: %w", t.key(), err)
}

func ptrUID(u types.UID) *types.UID { return &u }

// missingRanks describes the pods of the ranks that have not reported. With
// onlyUnplaceable it returns only ranks whose pods can never be placed.
func (c *Controller) missingRanks(ctx context.Context, g *gang, reported []preflight.RankReport, onlyUnplaceable bool) map[int]preflight.MissingRank {
	k, _ := kubeflow.ByName(g.Kind())
	obj := k.New()
	if err := c.client.Get(ctx, types.NamespacedName{Namespace: g.Namespace(), Name: g.Name()}, obj); err != nil || obj.GetUID() != g.UID() {
		return nil
	}
	j := wrap(obj)
	have := map[int]bool{}
	for _, r := range reported {
		have[r.Rank] = true
	}
	pods := &corev1.PodList{}
	if err := c.listJobPods(ctx, pods, g.Namespace(), g.Name()); err != nil {
		c.log.Error(err, "listing pods of missing ranks", "job", g.Key())
	}
	out := map[int]preflight.MissingRank{}
	var jobPods, waiting []*corev1.Pod
	waitingRank := map[*corev1.Pod]int{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if ref, ok, err := c.jobOf(ctx, p); err != nil || !ok || ref.uid != g.UID() || podFits(j, p) != nil {
			continue
		}
		jobPods = append(jobPods, p)
		rank, err := kubeflow.RankOf(j, p)
		if err != nil || have[rank] {
			continue
		}
		out[rank] = preflight.MissingRank{Pod: p.Name, Node: p.Spec.NodeName, State: c.podState(ctx, p)}
		if watchdog.Unschedulable(p) {
			waiting = append(waiting, p)
			waitingRank[p] = rank
		}
	}
	if len(waiting) > 0 {
		// Only when the scheduler has given up on a pod is it worth asking
		// whether it ever could be placed (placement.go).
		why := c.unplaceablePods(ctx, j, jobPods)
		for _, p := range waiting {
			if reason, ok := why[p.Namespace+"/"+p.Name]; ok {
				m := out[waitingRank[p]]
				m.Unplaceable = true
				m.State += "; " + reason
				out[waitingRank[p]] = m
			}
		}
	}
	if onlyUnplaceable {
		for r, m := range out {
			if !m.Unplaceable {
				delete(out, r)
			}
		}
		return out
	}
	for i := 0; i < g.Expected(); i++ {
		if _, ok := out[i]; !ok && !have[i] {
			out[i] = preflight.MissingRank{State: "no pod: the operator has not created it (quota, admission, or the job is suspended)"}
		}
	}
	return out
}

// podState says in words what a rank's pod is doing.
func (c *Controller) podState(ctx context.Context, p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "terminating"
	}
	if p.Spec.NodeName == "" {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
				return fmt.Sprintf("Pending, not scheduled (%s): %s", cond.Reason, cond.Message)
			}
		}
		return "Pending, not scheduled yet"
	}
	var s string
	for _, st := range p.Status.InitContainerStatuses {
		switch {
		case st.State.Waiting != nil:
			s = fmt.Sprintf("%s, init container %s waiting (%s)", p.Status.Phase, st.Name, st.State.Waiting.Reason)
			if st.State.Waiting.Message != "" {
				s += ": " + st.State.Waiting.Message
			}
		case st.State.Terminated != nil && st.State.Terminated.ExitCode != 0:
			s = fmt.Sprintf("%s, init container %s exited %d (%s)", p.Status.Phase, st.Name, st.State.Terminated.ExitCode, st.State.Terminated.Reason)
		case st.State.Running != nil:
			s = fmt.Sprintf("%s, init container %s running but has not reported (can it reach the gate? see its log)", p.Status.Phase, st.Name)
		}
		if s != "" {
			break
		}
	}
	if s == "" {
		phase := p.Status.Phase
		if phase == "" {
			phase = corev1.PodPending
		}
		s = fmt.Sprintf("%s on its node, has not reported", phase)
	}
	n := &corev1.Node{}
	if err := c.client.Get(ctx, types.NamespacedName{Name: p.Spec.NodeName}, n); apierrors.IsNotFound(err) {
		s += " (its node does not exist)"
	} else if err == nil && !cluster.NodeReady(n) {
		s += " (its node is NotReady)"
	}
	return s
}
