package leader

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
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
	"github.com/rankgate/rankgate/verdict"
)

// The writes (writes.go) are the only writer of jobs. Besides the verdict
// (apply.go) they write what the Pending watchdog says a job waits for
// (rankgate.io/waiting-for, with a Normal Event) and the re-gate of a job
// a person resumed after a fail verdict. The watchdog and the job
// reconciler only say what they want in the job's write state (GangRecord)
// and ask for the write; waitingStep and regateStep make it.

// wantWaitingFor records what job obj waits for (cause; nil: nothing any
// more) as the Pending watchdog judged it, for its annotation and the
// Gang's waitingFor, and asks for the write.
func (w *Writes) WantWaitingFor(obj client.Object, kind string, cause *verdict.Finding) {
	r := w.book.ForJob(obj, kind, w.gangTimeout)
	v := ""
	if cause != nil {
		v = watchdog.WaitingFor(*cause)
		f := *cause
		cause = &f
	}
	r.mu.Lock()
	r.waiting, r.waitingDue, r.waitingCause = v, true, cause
	r.mu.Unlock()
	w.TouchProgress(obj.GetUID(), true) // the Gang's phase and waitingFor too
}

// waitingStep writes the job's rankgate.io/waiting-for as the watchdog
// last said it (removes it for ""), and the Event for a cause. It says
// whether r's writes are done for this pass (a failure is retried with
// the queue's backoff).
func (w *Writes) waitingStep(ctx context.Context, r *GangRecord) bool {
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
		metrics.APIErrors.WithLabelValues("waiting-for").Inc()
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
func (w *Writes) AskRegate(obj client.Object, kind string) {
	r := w.book.ForJob(obj, kind, w.gangTimeout)
	r.mu.Lock()
	r.regate = true
	r.mu.Unlock()
	w.enqueue(obj.GetUID(), prioApply, 0)
}

// regateStep re-gates the job r asks for (regate), if it is still
// resumed after its fail verdict, as the cache shows it now. It says
// whether r's writes are done for this pass.
func (w *Writes) regateStep(ctx context.Context, r *GangRecord) bool {
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
		if resumed, err = w.ResumedAfterFail(ctx, obj); err == nil && resumed {
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
		metrics.APIErrors.WithLabelValues("regate").Inc()
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
func (w *Writes) ResumedAfterFail(ctx context.Context, obj client.Object) (bool, error) {
	d, ok := decision.FromJob(obj)
	if !ok || !d.Report.Failed() || d.Action != decision.ActionSuspend || kubeflow.MustFromObject(obj).Suspended() || obj.GetDeletionTimestamp() != nil {
		return false, nil
	}
	if kueueManaged(obj) {
		return w.workloads().resumed(ctx, obj)
	}
	return true, nil
}

// regate clears a fail verdict from a job a person resumed (suspend set
// back to false): its new pods form a new gang, the job's next attempt
// (rankgate.io/attempt, one more, in the same patch), with a Gang of its
// own. The old verdict is kept in rankgate.io/previous-verdict, and in the
// earlier attempt's Gang.
//
// again: the job changed meanwhile (the patch's resourceVersion is
// stale); look at it again.
func (w *Writes) regate(ctx context.Context, key string, obj client.Object) (again bool, err error) {
	again, err = w.regateFor(ctx, obj, true, nil)
	if again || err != nil {
		return again, err
	}
	w.gangs.Forget(key)
	w.book.Drop(key)
	a := obj.GetAnnotations()
	w.log.Info("job resumed after a fail verdict: gating its new pods again", "job", key, "previous", a[contract.AnnotationPreviousVerdict], "attempt", a[contract.AnnotationAttempt])
	return false, nil
}

// regateFor clears the verdict annotations from obj in one patch guarded
// by its resourceVersion, keeping the old verdict in
// rankgate.io/previous-verdict; with bump it counts one more attempt
// (rankgate.io/attempt), with restart it records the restart the new
// attempt judges (rankgate.io/restart-attempt, restart.go). again: the
// job changed meanwhile; a job that is gone needs nothing.
func (w *Writes) regateFor(ctx context.Context, obj client.Object, bump bool, restart *int32) (again bool, err error) {
	a := obj.GetAnnotations()
	set := map[string]any{}
	for _, k := range []string{contract.AnnotationVerdict, contract.AnnotationReason, contract.AnnotationRules, contract.AnnotationDecidedAt,
		contract.AnnotationDecidedBy, contract.AnnotationReport, contract.AnnotationAction, contract.AnnotationFirstReport} {
		set[k] = nil
	}
	if v := a[contract.AnnotationVerdict]; v != "" {
		set[contract.AnnotationPreviousVerdict] = fmt.Sprintf("%s %s %s", v, a[contract.AnnotationDecidedAt], a[contract.AnnotationRules])
	}
	if bump {
		set[contract.AnnotationAttempt] = strconv.Itoa(int(contract.Attempt(obj.GetAnnotations())) + 1)
	}
	if restart != nil {
		set[contract.AnnotationRestartAttempt] = strconv.Itoa(int(*restart))
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": obj.GetResourceVersion(), "annotations": set}})
	if err != nil {
		return false, err
	}
	if err := w.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		switch {
		case apierrors.IsConflict(err):
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil // the job is gone
		}
		return false, err
	}
	return false, nil
}
