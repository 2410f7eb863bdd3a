package leader

import (
	"github.com/rankgate/rankgate/integrations/kubeflow"

	"context"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/apicalls"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/metrics"
)

// A verdict is made durable in two steps:
//
//  1. record: the verdict is written into the status of the job attempt's
//     Gang (gangres.go), with an optimistic-lock update: the first writer
//     wins. A replica whose write conflicts re-reads the Gang and adopts
//     the verdict it finds, so two replicas (a leader and a deposed one
//     still finishing) can never record different verdicts for one gang.
//     Only then are the ranks answered.
//  2. apply: the annotations (and runPolicy.suspend on a fail) are patched
//     onto the job, the Event is emitted, the delete policy runs, and the
//     Gang's Applied condition is set (apply.go). The Gang stays: it is
//     the job's history, deleted with the job by the garbage collector.
//
// Step 1 is the only API write between the report that completes a gang
// and its verdict: the Gang exists by then (created when the controller
// first sees the job, or at the gang's first report), so it is one status
// update, which the API server runs over the Gang's status alone, not over
// the job with its pod templates. A leader that crashes between the steps
// leaves a Gang that is Decided and not Applied; the next leader lists
// those when it takes over (Sweep), answers from them, and applies them.
//
// Gangs are instructions (suspend or delete a job), so only the controller
// may write them (configs/deploy/rbac.yaml). Even so a Gang is acted on
// only when its job exists with the UID its spec names, is its controller
// owner, and is opted in.

// target names the job attempt a verdict belongs to.
type target struct {
	kind, ns, name string
	uid            types.UID
	attempt        int32
}

func (t target) key() string { return t.ns + "/" + t.kind + "/" + t.name }

// record makes d the gang's verdict unless one exists: the job's own
// (recorded and applied earlier) or its Gang's. It returns the verdict
// that stands; wrote says this call recorded it. A job that is gone or
// replaced gets its verdict answered, not recorded (nil error, wrote
// false, and rec.unrecorded set).
func (w *Writes) record(ctx context.Context, g *gang, d *decision.Decision) (rec *decision.Decision, wrote bool, err error) {
	k, _ := kubeflow.ByName(g.Kind())
	key := types.NamespacedName{Namespace: g.Namespace(), Name: g.Name()}
	obj := k.New()
	err = apicalls.GetFresh(ctx, w.client, w.api, key, obj, string(g.UID()))
	if apierrors.IsNotFound(err) || (err == nil && obj.GetUID() != g.UID()) {
		d.Unrecorded = true
		return d, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if old, ok := decision.FromJob(obj); ok {
		old.Applied = true
		return old, false, nil
	}
	w.chooseAction(ctx, g, k, obj, d)
	r := w.book.ForJob(obj, g.Kind(), w.gangTimeout)
	g.SetAttempt(r.t.attempt)
	snap := g.Snapshot()
	for attempt := 0; attempt < 5; attempt++ {
		cur, err := w.ensureObject(ctx, r)
		if err != nil {
			return nil, false, err
		}
		if cur == nil {
			continue
		}
		if old, ok := gangDecision(cur); ok {
			if !meta.IsStatusConditionTrue(cur.Status.Conditions, contract.ConditionApplied) {
				w.setPending(r, old)
				return old, false, nil
			}
			// The job carried this verdict and no longer does: a person
			// removed it to gate the job again. A new attempt.
			next, onJob, err := w.nextAttempt(ctx, k, key, g, r)
			if err != nil || onJob != nil {
				return onJob, false, err
			}
			r = next
			continue
		}
		setVerdict(&cur.Status, snap, d, cur.Generation)
		err = w.gangAPI.Status().Update(ctx, cur)
		switch {
		case err == nil:
			r.set(cur)
			w.setPending(r, d)
			return d, true, nil
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			// Written meanwhile (progress, or another replica's verdict),
			// or gone: read it again.
			if _, err := w.refresh(ctx, r); err != nil {
				return nil, false, err
			}
		default:
			return nil, false, err
		}
	}
	return nil, false, fmt.Errorf("gang %s keeps changing", r.key())
}

// chooseAction sets a fail verdict's action from the job's policy, as the
// API server will allow it: without delete permission the job is suspended
// instead (never left running).
func (w *Writes) chooseAction(ctx context.Context, g *gang, k kubeflow.Kind, obj client.Object, d *decision.Decision) {
	if !d.Report.Failed() {
		return
	}
	d.Action = decision.JobAction(obj, w.onFail)
	if d.Action != decision.ActionDelete {
		return
	}
	if why := w.deleteRefused(ctx, k, obj); why != "" {
		d.Action, d.DeleteRefused = decision.ActionSuspend, why
		w.log.Info("the fail policy is delete but the controller may not delete the job: suspending it instead", "job", g.Key(), "why", why)
	}
}

// setPending remembers a recorded verdict in r until it is on its job,
// and has it applied (writes.go).
func (w *Writes) setPending(r *GangRecord, d *decision.Decision) {
	r.mu.Lock()
	r.recorded, r.onJobAt = d, time.Time{}
	r.mu.Unlock()
	w.countUnapplied()
	w.enqueue(r.t.uid, applyPriority(d), 0)
}

// countUnapplied sets the gauge of verdicts recorded and not yet on
// their jobs.
func (w *Writes) countUnapplied() {
	metrics.Unapplied.Set(float64(w.book.unapplied()))
}

// nextAttempt counts one more attempt on job g (rankgate.io/attempt) whose
// current attempt's verdict was removed from the job, and returns its Gang
// resource. onJob is the verdict the job carries after all (read from the
// API server), if it does.
func (w *Writes) nextAttempt(ctx context.Context, k kubeflow.Kind, key types.NamespacedName, g *gang, r *GangRecord) (next *GangRecord, onJob *decision.Decision, err error) {
	obj := k.New()
	if err := w.api.Get(ctx, key, obj); err != nil {
		return nil, nil, err
	}
	if obj.GetUID() != g.UID() {
		return nil, nil, fmt.Errorf("job %s was replaced", g.Key())
	}
	if d, ok := decision.FromJob(obj); ok {
		d.Applied = true
		return nil, d, nil
	}
	if a := contract.Attempt(obj.GetAnnotations()); a > r.t.attempt {
		return w.book.ForJob(obj, g.Kind(), w.gangTimeout), nil, nil
	}
	patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"annotations":{%q:%q}}}`, obj.GetResourceVersion(), contract.AnnotationAttempt, strconv.Itoa(int(r.t.attempt)+1))
	if err := w.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return nil, nil, err
	}
	w.log.Info("the job no longer carries its verdict: gating it as a new attempt", "job", g.Key(), "attempt", contract.Attempt(obj.GetAnnotations()))
	w.book.Drop(g.Key())
	next = w.book.ForJob(obj, g.Kind(), w.gangTimeout)
	g.SetAttempt(next.t.attempt)
	return next, nil, nil
}

// gangsRBACHint says what a Forbidden answer (or a missing kind) on Gangs
// means.
func GangsRBACHint(verbs string) string {
	return fmt.Sprintf("the controller needs %s on gangs.rankgate.io (and gangs/status) in every namespace, and the Gang CRD: apply configs/deploy/crds/rankgate.io_gangs.yaml and configs/deploy/rbac.yaml", verbs)
}

// isNoGangKind: the API server does not serve Gangs (the CRD is missing).
func isNoGangKind(err error) bool { return meta.IsNoMatchError(err) }

// sweep, on taking the lead, loads the verdicts an earlier leader recorded
// in Gangs and did not apply (it answers from them at once) and applies
// them. It retries the list until it succeeds or ctx ends; the gate
// answers Unavailable until then. Gangs whose job is gone, replaced, not
// their owner or no longer opted in are never acted on.
func (w *Writes) Sweep(ctx context.Context) bool {
	backoff := apicalls.RetryBackoff(200*time.Millisecond, 10*time.Second)
	for {
		left, err := w.loadGangs(ctx)
		if err == nil {
			w.recovered.Store(true)
			if len(left) > 0 {
				w.log.Info("applying verdicts an earlier leader recorded", "count", len(left))
			}
			for _, r := range left {
				w.enqueue(r.t.uid, prioFail, 0) // applied by the writes (writes.go)
			}
			return true
		}
		msg := err.Error()
		if apierrors.IsForbidden(err) || isNoGangKind(err) {
			msg += " (" + GangsRBACHint("list") + ")"
		}
		w.sweepErr.Store(&msg)
		delay := backoff.Step()
		w.log.Error(err, "listing gangs; retrying", "in", delay.String())
		select {
		case <-ctx.Done():
			return false
		case <-w.clock().After(delay):
		}
	}
}

// sweepPage bounds what one list of Gangs holds in memory.
const sweepPage = 200

// loadGangs lists every Gang, page by page. It keeps the decided and
// unapplied ones of existing opted-in jobs (marked pending), and
// remembers the open ones (their first report keeps the gang's deadline).
func (w *Writes) loadGangs(ctx context.Context) ([]*GangRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var left []*GangRecord
	cont := ""
	for {
		list := &v1alpha1.GangList{}
		if err := w.gangAPI.List(ctx, list, client.Limit(sweepPage), client.Continue(cont)); err != nil {
			return nil, err
		}
		for i := range list.Items {
			f, err := w.loadGang(ctx, &list.Items[i])
			if err != nil {
				return nil, err
			}
			if f != nil {
				left = append(left, f)
			}
		}
		if cont = list.Continue; cont == "" {
			return left, nil
		}
	}
}

// loadGang takes in one listed Gang: a verdict to apply (returned), an
// open gang to remember, or nothing.
func (w *Writes) loadGang(ctx context.Context, g *v1alpha1.Gang) (*GangRecord, error) {
	if meta.IsStatusConditionTrue(g.Status.Conditions, contract.ConditionApplied) {
		return nil, nil
	}
	j := g.Spec.Job
	t := target{kind: j.Kind, ns: g.Namespace, name: j.Name, uid: j.UID, attempt: g.Spec.Attempt}
	k, known := kubeflow.ByName(t.kind)
	if !known || !w.host.Watches(k) || !ownedBy(g, t) {
		w.log.Info("ignoring a Gang its job does not own", "gang", g.Namespace+"/"+g.Name, "job", t.key(), "uid", t.uid)
		return nil, nil
	}
	d, decided := gangDecision(g)
	r := &GangRecord{t: t, apiVersion: j.APIVersion, expected: g.Spec.ExpectedRanks}
	if !decided {
		if g.Status.FirstReportAt != nil {
			r.set(g)
			w.book.adopt(r, false)
		}
		return nil, nil
	}
	why, err := w.recordStale(ctx, t)
	if err != nil {
		return nil, err
	}
	if why != "" {
		w.log.Info("ignoring a recorded verdict: its job is not an opted-in job that owns the Gang", "gang", g.Namespace+"/"+g.Name, "job", t.key(), "uid", t.uid, "why", why)
		return nil, nil
	}
	r.set(g)
	r.recorded = d
	w.book.adopt(r, true)
	w.countUnapplied()
	return r, nil
}

// recordStale says why a recorded verdict's job must not be acted on (""
// when it exists with the UID, is opted in and at the attempt of t).
func (w *Writes) recordStale(ctx context.Context, t target) (string, error) {
	k, _ := kubeflow.ByName(t.kind)
	obj := k.New()
	err := w.api.Get(ctx, types.NamespacedName{Namespace: t.ns, Name: t.name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		return "the job is gone", nil
	case err != nil:
		return "", err
	case obj.GetUID() != t.uid:
		return "the job was replaced (uid " + string(obj.GetUID()) + ")", nil
	}
	in, err := w.host.OptedIn(ctx, obj)
	if err != nil {
		return "", err
	}
	if !in {
		return "the job is not opted in", nil
	}
	if a := contract.Attempt(obj.GetAnnotations()); a != t.attempt {
		return fmt.Sprintf("the job is at attempt %d, not %d", a, t.attempt), nil
	}
	return "", nil
}
