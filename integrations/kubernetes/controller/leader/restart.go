package leader

import (
	"context"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
)

// A JobSet (and so a TrainJob) restarts by deleting every pod and creating
// them again, each labelled with the restart's number
// (jobset.sigs.k8s.io/restart-attempt). The new pods may land on other
// nodes and other devices: they are a new gang, judged afresh, never
// answered with the verdict of the pods they replace. The job records the
// restart its gated attempt judges (rankgate.io/restart-attempt, 0 when
// absent):
//
//   - a rank of that restart reports as usual;
//   - a rank of a later restart makes the leader's writes open the job's
//     next attempt (the verdict annotations cleared, the old verdict kept in
//     rankgate.io/previous-verdict, rankgate.io/attempt one more, the
//     restart recorded) and is asked to retry meanwhile;
//   - a rank of an earlier restart is refused: its pod was replaced.

// RestartAttempt is the restart the job's gated attempt judges.
func RestartAttempt(o client.Object) int32 {
	n, err := strconv.ParseInt(o.GetAnnotations()[contract.AnnotationRestartAttempt], 10, 32)
	if err != nil || n < 0 {
		return 0
	}
	return int32(n)
}

// askRestart asks the leader's writes to open job j's attempt for restart.
func (w *Writes) AskRestart(j kubeflow.Job, restart int32) {
	r := w.book.ForJob(j.Object(), j.Kind(), w.gangTimeout)
	r.mu.Lock()
	asked := restart > r.restart
	if asked {
		r.restart = restart
	}
	r.mu.Unlock()
	if asked {
		w.log.Info("a rank of a restarted job reported: gating its new pods as a new attempt", "job", decision.JobKey(j), "restartAttempt", restart)
	}
	w.enqueue(j.Object().GetUID(), prioDecide, 0)
}

// restartStep opens the job's attempt for a restart asked for (askRestart),
// before anything else is written for the job: a verdict recorded and not
// yet on the job goes on it first (it is the previous attempt's). It says
// whether the job's writes are done for this pass.
func (w *Writes) restartStep(ctx context.Context, uid types.UID) bool {
	r := w.book.Lookup(uid)
	if r == nil {
		return false
	}
	r.mu.Lock()
	restart, t := r.restart, r.t
	r.mu.Unlock()
	if restart == 0 {
		return false
	}
	if d, _ := r.unapplied(); d != nil {
		if busy := w.applyStep(ctx, r); busy {
			return true
		}
	}
	k, _ := kubeflow.ByName(t.kind)
	obj := k.New()
	err := w.api.Get(ctx, types.NamespacedName{Namespace: t.ns, Name: t.name}, obj)
	switch {
	case err != nil && !apierrors.IsNotFound(err):
		w.log.Error(err, "reading a restarted job; retrying", "job", t.key())
		w.retryLater(uid, prioDecide)
		return true
	case err != nil || obj.GetUID() != t.uid || RestartAttempt(obj) >= restart:
		// Gone (the job reconciler forgets it), or opened already (by an
		// earlier pass or leader).
		r.mu.Lock()
		if r.restart == restart {
			r.restart = 0
		}
		r.mu.Unlock()
		return false
	}
	// A new attempt (a new Gang) when the old one decided or heard from a
	// rank; otherwise the restart is only recorded.
	_, onJob := decision.FromJob(obj)
	g := w.gangs.Get(uid)
	bump := onJob || (g != nil && (g.Verdict() != nil || len(g.Reported()) > 0))
	again, err := w.regateFor(ctx, obj, bump, &restart)
	if again || err != nil {
		if err != nil {
			w.log.Error(err, "gating a restarted job again; retrying", "job", t.key())
		}
		w.retryLater(uid, prioDecide)
		return true
	}
	w.gangs.Forget(t.key())
	w.book.Drop(t.key())
	w.log.Info("job restarted: its new pods are a new gang", "job", t.key(), "restartAttempt", restart, "newAttempt", bump)
	return true
}
