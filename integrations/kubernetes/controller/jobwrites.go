package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/watchdog"
	"github.com/rankgate/rankgate/verdict"
)

// The writes (writes.go) are the only writer of jobs. Besides the verdict
// (apply.go) they write what the Pending watchdog says a job waits for
// (rankgate.io/waiting-for, with a Normal Event) and the re-gate of a job
// a person resumed after a fail verdict. The watchdog and the job
// reconciler only say what they want in the job's write state (gangRes)
// and ask for the write; waitingStep and regateStep make it.

// wantWaitingFor records what job obj waits for (cause; nil: nothing any
// more) as the Pending watchdog judged it, for its annotation and the
// Gang's waitingFor, and asks for the write.
func (w *writes) wantWaitingFor(obj client.Object, kind string, cause *verdict.Finding) {
	r := w.book.forJob(obj, kind, w.opts.GangTimeout)
	v := ""
	if cause != nil {
		v = watchdog.WaitingFor(*cause)
		f := *cause
		cause = &f
	}
	r.mu.Lock()
	r.waiting, r.waitingDue, r.waitingCause = v, true, cause
	r.mu.Unlock()
	w.touchProgress(obj.GetUID(), true) // the Gang's phase and waitingFor too
}

// waitingStep writes the job's rankgate.io/waiting-for as the watchdog
// last said it (removes it for ""), and the Event for a cause. It says
// whether r's writes are done for this pass (a failure is retried with
// the queue's backoff).
func (w *writes) waitingStep(ctx context.Context, r *gangRes) bool {
	r.mu.Lock()
	due, v, cause, t, decided := r.waitingDue, r.waiting, r.waitingCause, r.t, r.decidedLocked()
	r.waitingDue = false
	r.mu.Unlock()
	if !due || (decided && v != "") {
		return false // a decided job waits for nothing (apply removed it)
	}
	val := "null"
	if v != "" {
		val = fmt.Sprintf("%q", v)
	}
	obj := jobObject(t)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, contract.AnnotationWaitingFor, val)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.client.Patch(wctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		if apierrors.IsNotFound(err) || ctx.Err() != nil {
			return false
		}
		metricAPIErrors.WithLabelValues("waiting-for").Inc()
		w.log.Error(err, "writing rankgate.io/waiting-for; retrying", "job", t.key())
		r.mu.Lock()
		if !r.waitingDue { // nothing newer asked for meanwhile
			r.waitingDue, r.waitingCause = true, cause
		}
		r.mu.Unlock()
		w.retryLater(t.uid, prioBook)
		return true
	}
	if cause != nil && obj.GetUID() == t.uid {
		w.rec.Eventf(obj, nil, corev1.EventTypeNormal, contract.ReasonPendingWaiting, "Gate", "%s", verdict.Truncate("waiting: "+cause.Line(), 1000))
	}
	return false
}

// jobObject is t's job as the patch returns it (a shell of its kind and
// name until then).
func jobObject(t target) client.Object {
	k, _ := kubeflow.ByName(t.kind)
	obj := k.New()
	obj.SetNamespace(t.ns)
	obj.SetName(t.name)
	return obj
}

// askRegate asks to re-gate job obj, which a person resumed after a fail
// verdict (the job reconciler saw it: reconcileDecided).
func (w *writes) askRegate(obj client.Object, kind string) {
	r := w.book.forJob(obj, kind, w.opts.GangTimeout)
	r.mu.Lock()
	r.regate = true
	r.mu.Unlock()
	w.enqueue(obj.GetUID(), prioApply, 0)
}

// regateStep re-gates the job r asks for (regate), if it is still
// resumed after its fail verdict, as the cache shows it now. It says
// whether r's writes are done for this pass.
func (w *writes) regateStep(ctx context.Context, r *gangRes) bool {
	r.mu.Lock()
	ask, t := r.regate, r.t
	r.mu.Unlock()
	if !ask {
		return false
	}
	k, _ := kubeflow.ByName(t.kind)
	obj := k.New()
	err := w.client.Get(ctx, types.NamespacedName{Namespace: t.ns, Name: t.name}, obj)
	if err == nil && obj.GetUID() == t.uid {
		var resumed bool
		if resumed, err = w.host.resumedAfterFail(ctx, obj); err == nil && resumed {
			var again bool
			again, err = w.regate(ctx, t.key(), obj)
			if err == nil && again {
				w.enqueue(t.uid, prioApply, time.Second) // the job changed meanwhile
				return true
			}
		}
	}
	switch {
	case err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil:
		metricAPIErrors.WithLabelValues("regate").Inc()
		w.log.Error(err, "re-gating a resumed job; retrying", "job", t.key())
		w.retryLater(t.uid, prioApply)
		return true
	case err == nil:
		w.succeeded(t.uid, prioApply)
	}
	r.mu.Lock()
	r.regate = false
	r.mu.Unlock()
	return false
}

// resumedAfterFail: obj carries a fail verdict whose action suspended it,
// and a person resumed it (a Kueue-managed job: its Workload is active
// again).
func (c *Controller) resumedAfterFail(ctx context.Context, obj client.Object) (bool, error) {
	d, ok := decision.FromJob(obj)
	if !ok || !d.Report.Failed() || d.Action != ActionSuspend || wrap(obj).Suspended() || obj.GetDeletionTimestamp() != nil {
		return false, nil
	}
	if kueueManaged(obj) {
		return c.workloads().resumed(ctx, obj)
	}
	return true, nil
}
