package leader

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
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/metrics"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/watchdog"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource"
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
func (w *Writes) decideWith(ctx context.Context, g *gang, a decision.Ask) decideOutcome {
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
		in.Missing = w.host.MissingRanks(rctx, g, ranks, false)
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
		in.NCCL = w.host.NCCLSettings(rctx, g)
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
	d := &decision.Decision{Report: report, DecidedAt: w.now(), DecidedBy: w.identity}
	recStart := w.now()
	rec, wrote, err := w.record(rctx, g, d)
	recTook := w.since(recStart)
	if err != nil {
		metrics.APIErrors.WithLabelValues("verdict").Inc()
		if apierrors.IsForbidden(err) || isNoGangKind(err) {
			err = fmt.Errorf("%w (%s)", err, GangsRBACHint("create and update"))
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
		metrics.ObserveVerdict(rec.Report, first, last, w.now()) // recorded and answered
		log.Info("gang decided", "ranks", len(ranks), "expected", expected, "action", rec.Action, "rules", strings.Join(rec.Report.RuleIDs(), ","),
			"sinceLastReport", w.sinceOrZero(last), "recordTook", recTook.Round(time.Microsecond).String())
	}
	return decideDone
}

func (w *Writes) sinceOrZero(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return w.since(t).Round(time.Microsecond).String()
}

// adoptVerdict closes the open gang g with d, a verdict another replica
// recorded in its Gang (one that led before this one): the waiting ranks
// are answered with it, and it is applied (the next write).
func (w *Writes) adoptVerdict(g *gang, d *decision.Decision) {
	if !g.Open() {
		return
	}
	g.Answer(d, w.now())
	w.log.Info("verdict recorded by another replica; adopted", "job", g.Key(), "verdict", d.Report.Verdict, "decidedBy", d.DecidedBy)
	w.enqueue(g.UID(), applyPriority(d), 0)
}

// emitEvent puts the verdict on the job as a Kubernetes Event.
func (w *Writes) emitEvent(obj client.Object, d *decision.Decision) {
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
		case d.Action == decision.ActionSuspend && d.Kueue != "" && d.DeleteRefused != "":
			note = d.Kueue + ", job not deleted (" + d.DeleteRefused + "): " + note
		case d.Action == decision.ActionSuspend && d.Kueue != "":
			note = d.Kueue + ": " + note
		case d.Action == decision.ActionSuspend && d.DeleteRefused != "":
			note = "job suspended, not deleted (" + d.DeleteRefused + "): " + note
		case d.Action == decision.ActionSuspend:
			note = "job suspended: " + note
		case d.Action == decision.ActionDelete:
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
func (w *Writes) deleteJob(ctx context.Context, t target) error {
	k, _ := kubeflow.ByName(t.kind)
	obj := k.New()
	obj.SetNamespace(t.ns)
	obj.SetName(t.name)
	err := w.client.Delete(ctx, obj, client.PropagationPolicy("Background"), client.Preconditions{UID: ptrUID(t.uid)})
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // Conflict: the UID precondition failed, another job has the name now
	}
	metrics.APIErrors.WithLabelValues("delete").Inc()
	return fmt.Errorf("deleting failed job %s: %w", t.key(), err)
}

func ptrUID(u types.UID) *types.UID { return &u }

// fromDRA counts the ranks whose reports come from their DRA allocations.
func fromDRA(ranks []preflight.RankReport) int {
	n := 0
	for _, r := range ranks {
		if r.Source == devicesource.DRA {
			n++
		}
	}
	return n
}
