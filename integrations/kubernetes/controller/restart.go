package controller

import (
	"context"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/jobkind"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
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

// restartOf is pod p's restart attempt, when j's kind restarts that way.
func restartOf(j job, labels map[string]string) (int32, bool) {
	k, _ := kubeflow.ByName(j.Kind())
	rs, ok := k.(jobkind.Restarter)
	if !ok {
		return 0, false
	}
	return rs.RestartAttempt(labels)
}

// jobRestartAttempt is the restart the job's gated attempt judges.
func jobRestartAttempt(o client.Object) int32 {
	n, err := strconv.ParseInt(o.GetAnnotations()[contract.AnnotationRestartAttempt], 10, 32)
	if err != nil || n < 0 {
		return 0
	}
	return int32(n)
}

// checkRestart lets rank r through when its pod is of the restart the
// job's gated attempt judges; see above for the others.
func (c *Controller) checkRestart(r rankOf) error {
	got, ok := restartOf(r.job, r.pod.Labels)
	if !ok {
		return nil
	}
	o := r.job.Object()
	cur := jobRestartAttempt(o)
	switch {
	case got < cur:
		return gate.Errorf(gate.CodeNotARank, "pod %s/%s is of restart attempt %d of %s %s, which restarted since (restart attempt %d): its ranks are the new pods",
			r.pod.Namespace, r.pod.Name, got, r.job.Kind(), o.GetName(), cur)
	case got > cur:
		c.w.askRestart(r.job, got)
		return &gate.Error{HTTPStatus: 503, Code: gate.CodeUnavailable, RetryAfter: time.Second,
			Message: fmt.Sprintf("%s %s/%s restarted (restart attempt %d; the gate judged %d): its new pods are gated as a new attempt; retry",
				r.job.Kind(), o.GetNamespace(), o.GetName(), got, cur)}
	}
	return nil
}

// askRestart asks the leader's writes to open job j's attempt for restart.
func (w *writes) askRestart(j job, restart int32) {
	r := w.book.forJob(j.Object(), j.Kind(), w.opts.GangTimeout)
	r.mu.Lock()
	asked := restart > r.restart
	if asked {
		r.restart = restart
	}
	r.mu.Unlock()
	if asked {
		w.log.Info("a rank of a restarted job reported: gating its new pods as a new attempt", "job", jobKey(j), "restartAttempt", restart)
	}
	w.enqueue(j.Object().GetUID(), prioDecide, 0)
}

// restartStep opens the job's attempt for a restart asked for (askRestart),
// before anything else is written for the job: a verdict recorded and not
// yet on the job goes on it first (it is the previous attempt's). It says
// whether the job's writes are done for this pass.
func (w *writes) restartStep(ctx context.Context, uid types.UID) bool {
	r := w.book.lookup(uid)
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
	case err != nil || obj.GetUID() != t.uid || jobRestartAttempt(obj) >= restart:
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
	w.book.drop(t.key(), nil)
	w.log.Info("job restarted: its new pods are a new gang", "job", t.key(), "restartAttempt", restart, "newAttempt", bump)
	return true
}
