package leader

import (
	"github.com/rankgate/rankgate/integrations/kubeflow"

	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/metrics"
)

// applyStep puts r's recorded verdict on its job (apply), once per pass
// of the writes (writes.go): after a failure the job's UID is retried
// with the queue's backoff. It says whether r's writes are done for this
// pass. Once the job carries the verdict, the Gang is marked Applied
// AppliedDelay later (markStep): until then it reads Decided, and a new
// leader's sweep finds the job carrying the verdict (nothing to do) and
// marks it.
func (w *Writes) applyStep(ctx context.Context, r *GangRecord) bool {
	d, t := r.unapplied()
	if d == nil {
		return false
	}
	if err := w.apply(ctx, t, d); err != nil {
		if ctx.Err() != nil {
			return true // stopped leading: the next leader's sweep applies it
		}
		metrics.APIErrors.WithLabelValues("verdict").Inc()
		w.log.Error(err, "applying the recorded verdict to the job; retrying", "job", t.key())
		w.retryLater(t.uid, applyPriority(d))
		return true
	}
	w.succeeded(t.uid, applyPriority(d))
	r.mu.Lock()
	r.onJobAt = w.now()
	r.mu.Unlock()
	w.countUnapplied()
	return false
}

// markStep marks r's Gang Applied once AppliedDelay has passed since its
// job carried the verdict (requeued for then), and forgets r. It says
// whether r's writes are done for this pass.
func (w *Writes) markStep(ctx context.Context, r *GangRecord) bool {
	r.mu.Lock()
	d, t, at := r.recorded, r.t, r.onJobAt
	r.mu.Unlock()
	if d == nil || at.IsZero() {
		return false
	}
	if left := w.appliedDelay - w.since(at); left > 0 {
		w.enqueue(t.uid, prioBook, left)
		return true
	}
	w.markApplied(ctx, t, d)
	return true
}

// apply writes the recorded verdict d onto its job (annotations, and
// runPolicy.suspend on a fail with that action, in one patch guarded by
// the job's resourceVersion), emits the Event and runs the delete policy.
// A job that already carries a verdict, or is gone, is not patched again;
// a delete verdict still deletes it (the Gang is marked Applied only
// after the delete, so a leader that dies in between leaves it to the
// next one).
func (w *Writes) apply(ctx context.Context, t target, d *decision.Decision) error {
	k, _ := kubeflow.ByName(t.kind)
	key := types.NamespacedName{Namespace: t.ns, Name: t.name}
	var lastErr error
	for attempt := 0; attempt < 10; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		done, obj, ev, err := w.applyOnce(actx, k, key, t, d, attempt > 0)
		cancel()
		switch {
		case err == nil && done:
			if obj != nil && !d.Adopted {
				metrics.ApplyLag.Observe(w.since(d.DecidedAt).Seconds())
			}
			if d.Report.Failed() && d.Action == decision.ActionDelete {
				dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				err := w.deleteJob(dctx, t)
				if apierrors.IsForbidden(err) {
					// Allowed when the verdict was recorded, refused now
					// (the permission went, or an admission policy).
					return w.suspendInstead(dctx, k, key, t, d, w.refusedText(k, t.ns))
				}
				if err != nil {
					return err
				}
			}
			if obj != nil {
				w.emitEvent(obj, ev)
			}
			return nil
		case apierrors.IsConflict(err):
			lastErr = err
			continue
		default:
			return err
		}
	}
	return fmt.Errorf("job %s kept changing: %w", t.key(), lastErr)
}

// applyOnce is one try of apply. done with a nil object: nothing to write
// (job gone, replaced, or already carrying a verdict). ev is the decision
// the Event tells (d, with how a Kueue-managed job was stopped).
func (w *Writes) applyOnce(ctx context.Context, k kubeflow.Kind, key types.NamespacedName, t target, d *decision.Decision, fresh bool) (bool, client.Object, *decision.Decision, error) {
	obj := k.New()
	var err error
	if fresh {
		err = w.api.Get(ctx, key, obj)
	} else {
		err = w.client.Get(ctx, key, obj)
	}
	if apierrors.IsNotFound(err) || (err == nil && obj.GetUID() != t.uid) {
		return true, nil, nil, nil
	}
	if err != nil {
		return false, nil, nil, err
	}
	if _, ok := decision.FromJob(obj); ok {
		return true, nil, nil, nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	ev := d
	if d.Report.Failed() && d.Action == decision.ActionSuspend {
		if kueueManaged(obj) {
			// Kueue owns runPolicy.suspend: stop the job through its
			// Workload, then annotate (a retry deactivates again, a no-op).
			how, err := w.workloads().deactivate(ctx, obj)
			if err != nil {
				return false, nil, nil, err
			}
			e := *d
			e.Kueue = how
			ev = &e
		} else {
			kubeflow.MustFromObject(obj).SetSuspended(true)
		}
	}
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	for k, v := range decision.AnnotationsFor(d, ann) {
		ann[k] = v
	}
	// A decided job waits for nothing: what the Pending watchdog last
	// wrote goes in the same patch (the watchdog no longer looks at it).
	delete(ann, contract.AnnotationWaitingFor)
	obj.SetAnnotations(ann)
	err = w.client.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return true, nil, nil, nil
	}
	if err != nil {
		return false, nil, nil, err
	}
	return true, obj, ev, nil
}

// deleteRefused asks the API server, with a dry run, whether the
// controller may delete job; it returns why not when the answer is
// Forbidden, "" otherwise (other errors leave it to the real delete).
func (w *Writes) deleteRefused(ctx context.Context, k kubeflow.Kind, job client.Object) string {
	err := w.client.Delete(ctx, job.DeepCopyObject().(client.Object), client.DryRunAll, client.Preconditions{UID: ptrUID(job.GetUID())})
	if apierrors.IsForbidden(err) {
		return w.refusedText(k, job.GetNamespace())
	}
	return ""
}

func (w *Writes) refusedText(k kubeflow.Kind, ns string) string {
	return fmt.Sprintf("the controller may not delete %ss in namespace %s; the overlay configs/overlays/on-fail-delete grants it", strings.ToLower(k.GVK().Kind), ns)
}

// suspendInstead suspends a job whose delete verdict the API server
// refused, and sets its action annotation to suspend. The in-memory
// decision keeps delete (ranks were answered with it); the job, its
// annotations and the Event say what happened.
func (w *Writes) suspendInstead(ctx context.Context, k kubeflow.Kind, key types.NamespacedName, t target, d *decision.Decision, why string) error {
	s := *d
	s.Action, s.DeleteRefused = decision.ActionSuspend, why
	for attempt := 0; attempt < 10; attempt++ {
		obj := k.New()
		err := w.api.Get(ctx, key, obj)
		if apierrors.IsNotFound(err) || (err == nil && obj.GetUID() != t.uid) {
			return nil
		}
		if err != nil {
			return err
		}
		j := kubeflow.MustFromObject(obj)
		kueue := kueueManaged(obj)
		if (j.Suspended() || kueue) && obj.GetAnnotations()[contract.AnnotationAction] == decision.ActionSuspend {
			return nil // done by an earlier try or leader
		}
		orig := obj.DeepCopyObject().(client.Object)
		if kueue {
			how, err := w.workloads().deactivate(ctx, obj)
			if err != nil {
				return err
			}
			s.Kueue = how
		} else {
			j.SetSuspended(true)
		}
		ann := obj.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[contract.AnnotationAction] = decision.ActionSuspend
		obj.SetAnnotations(ann)
		err = w.client.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		switch {
		case apierrors.IsConflict(err):
			continue
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("suspending job %s, whose delete is refused: %w", t.key(), err)
		}
		w.log.Info("the controller may not delete the job: suspended it instead", "job", t.key(), "why", why)
		w.emitEvent(obj, &s)
		return nil
	}
	return fmt.Errorf("job %s kept changing while being suspended", t.key())
}

// markApplied sets the Applied condition of t's Gang once its job carries
// verdict d (the job patch, and a delete verdict's delete, are done), and
// forgets the Gang: it stays as the job's history. A Gang that is gone
// (deleted with its job) needs nothing.
func (w *Writes) markApplied(ctx context.Context, t target, d *decision.Decision) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r := w.book.Lookup(t.uid)
	if r == nil || r.t.attempt != t.attempt {
		r = &GangRecord{t: t}
	}
	defer w.book.drop(t.key(), &t)
	obj := r.Current()
	reason, msg := "VerdictOnJob", "the job carries the verdict"
	if d.Report.Failed() {
		switch d.Action {
		case decision.ActionSuspend:
			reason, msg = "JobSuspended", "the job carries the verdict and is suspended"
		case decision.ActionDelete:
			reason, msg = "JobDeleted", "the job was deleted"
		}
	}
	for attempt := 0; attempt < 5; attempt++ {
		if obj == nil {
			cur := &v1alpha1.Gang{}
			if err := w.gangAPI.Get(ctx, r.key(), cur); err != nil {
				if !apierrors.IsNotFound(err) {
					w.log.Info("marking the gang applied", "gang", r.key().String(), "error", err.Error())
				}
				return
			}
			obj = cur
			obj.ManagedFields = nil
		}
		if !ownedBy(obj, t) || meta.IsStatusConditionTrue(obj.Status.Conditions, contract.ConditionApplied) {
			return
		}
		meta.SetStatusCondition(&obj.Status.Conditions, metav1.Condition{Type: contract.ConditionApplied, Status: metav1.ConditionTrue,
			Reason: reason, Message: msg, ObservedGeneration: obj.Generation})
		err := w.gangAPI.Status().Update(ctx, obj)
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return
		case apierrors.IsConflict(err):
			obj = nil
		default:
			metrics.APIErrors.WithLabelValues("gang-applied").Inc()
			w.log.Info("marking the gang applied; the next leader's sweep applies it again (a no-op) and retries", "gang", r.key().String(), "error", err.Error())
			return
		}
	}
}
