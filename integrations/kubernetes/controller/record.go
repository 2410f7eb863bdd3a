package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A verdict is made durable in two steps:
//
//  1. record: a Lease named rankgate-verdict-<job uid> in the controller's
//     own namespace (Options.Namespace), labelled with the job's namespace,
//     kind and name, carrying the verdict in the same rankgate.io/
//     annotations the job gets. It is created, never updated: the first
//     writer wins, so two replicas (a leader and a deposed one still
//     finishing) can never record different verdicts for one gang. Only
//     then are the ranks answered.
//  2. apply: the annotations (and runPolicy.suspend on a fail) are patched
//     onto the job, the Event is emitted, the delete policy runs, and the
//     Lease is deleted: from then on the job carries the verdict.
//
// Step 1 is the only API write between the report that completes a gang
// and its verdict. A small built-in object is created in about half the
// time a patch of the job takes (the API server runs the job's CRD schema
// and managed fields over the whole job, pod templates included). A leader
// that crashes between the steps leaves the Lease; the next leader lists
// the records when it takes over (sweep), answers from them, and applies
// them.
//
// Records are instructions (suspend or delete a job), so they live where
// only the controller may write: its own namespace, whose Role is granted
// to the controller alone. A Lease anyone else creates in a job's namespace
// is never read. A record is acted on only when it is in the controller's
// namespace, carries the labels below, and names a job that still exists
// with that UID and is opted in; the sweep deletes records whose job is
// gone (no owner reference can cross namespaces).

// Labels, annotations and name of the verdict records.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelRecord    = "rankgate.io/record"
	// The job a record belongs to: namespace and kind as labels; the name
	// as an annotation (a job name may be too long for a label value; it is
	// also a label when it fits, for kubectl get -l).
	LabelJobNamespace = "rankgate.io/job-namespace"
	LabelJobKind      = "rankgate.io/job-kind"
	KeyJobName        = "rankgate.io/job-name"
	// RecordNamePrefix + the job's UID names its record.
	RecordNamePrefix = "rankgate-verdict-"

	managedByValue  = "rankgate"
	recordKindValue = "verdict"
)

// recordKey names job uid's record in the controller's namespace.
func (c *Controller) recordKey(uid types.UID) types.NamespacedName {
	return types.NamespacedName{Namespace: c.opts.Namespace, Name: RecordNamePrefix + string(uid)}
}

// target names the job a verdict belongs to.
type target struct {
	kind, ns, name string
	uid            types.UID
}

func (t target) key() string { return t.ns + "/" + t.kind + "/" + t.name }

func (g *gang) target() target { return target{kind: g.kind, ns: g.ns, name: g.name, uid: g.uid} }

// newRecord is the Lease that records d for job.
func (c *Controller) newRecord(k jobKind, job client.Object, d *decision) *coordv1.Lease {
	at := metav1.NewMicroTime(d.DecidedAt)
	holder := d.DecidedBy
	labels := map[string]string{
		LabelManagedBy: managedByValue, LabelRecord: recordKindValue,
		LabelJobNamespace: job.GetNamespace(), LabelJobKind: k.GVK.Kind,
	}
	if len(validation.IsValidLabelValue(job.GetName())) == 0 {
		labels[KeyJobName] = job.GetName()
	}
	ann := decisionAnnotations(d)
	ann[KeyJobName] = job.GetName()
	key := c.recordKey(job.GetUID())
	return &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: labels, Annotations: ann},
		Spec:       coordv1.LeaseSpec{HolderIdentity: &holder, AcquireTime: &at},
	}
}

// recordTarget reads which job a record belongs to. ok is false for any
// Lease that is not a verdict record of this controller: outside its
// namespace, without its labels, or naming no job.
func (c *Controller) recordTarget(l *coordv1.Lease) (target, bool) {
	if l.Namespace != c.opts.Namespace || l.Labels[LabelManagedBy] != managedByValue || l.Labels[LabelRecord] != recordKindValue {
		return target{}, false
	}
	uid, ok := strings.CutPrefix(l.Name, RecordNamePrefix)
	kind, ns, name := l.Labels[LabelJobKind], l.Labels[LabelJobNamespace], l.Annotations[KeyJobName]
	if _, known := kindByName(kind); !ok || uid == "" || !known || ns == "" || name == "" {
		return target{}, false
	}
	return target{kind: kind, ns: ns, name: name, uid: types.UID(uid)}, true
}

// record makes d the gang's verdict unless one exists: the job's own
// (recorded and applied earlier) or a record's. It returns the verdict that
// stands; wrote says this call recorded it. A job that is gone or replaced
// gets its verdict answered, not recorded (nil error, wrote false, and
// rec.unrecorded set).
func (c *Controller) record(ctx context.Context, g *gang, d *decision) (rec *decision, wrote bool, err error) {
	k, _ := kindByName(g.kind)
	key := types.NamespacedName{Namespace: g.ns, Name: g.name}
	obj := k.New()
	err = c.getFresh(ctx, key, obj, string(g.uid))
	if apierrors.IsNotFound(err) || (err == nil && obj.GetUID() != g.uid) {
		d.unrecorded = true
		return d, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if old, ok := recordedDecision(obj); ok {
		old.applied = true
		return old, false, nil
	}
	c.chooseAction(ctx, g, k, obj, d)
	lease := c.newRecord(k, obj, d)
	for attempt := 0; attempt < 3; attempt++ {
		rec, done, err := c.createRecord(ctx, g, lease, d)
		if err != nil || done {
			return rec, rec == d, err
		}
	}
	// The job may have been given its verdict meanwhile.
	if err := c.api.Get(ctx, key, obj); err == nil && obj.GetUID() == g.uid {
		if old, ok := recordedDecision(obj); ok {
			old.applied = true
			return old, false, nil
		}
	}
	return nil, false, fmt.Errorf("verdict record %s keeps changing", c.recordKey(g.uid))
}

// chooseAction sets a fail verdict's action from the job's policy, as the
// API server will allow it: without delete permission the job is suspended
// instead (never left running).
func (c *Controller) chooseAction(ctx context.Context, g *gang, k jobKind, obj client.Object, d *decision) {
	if !d.Report.Failed() {
		return
	}
	d.Action = jobAction(obj, c.opts.OnFail)
	if d.Action != ActionDelete {
		return
	}
	if why := c.deleteRefused(ctx, k, obj); why != "" {
		d.Action, d.deleteRefused = ActionSuspend, why
		c.log.Info("the fail policy is delete but the controller may not delete the job: suspending it instead", "job", g.key, "why", why)
	}
}

// createRecord tries once to create lease, the record of d, the verdict
// decided for g. done says the verdict that stands is known: rec, which is
// the new one when this call created it, or the one a record of this job
// already holds. Not done (and no error): a record was deleted or replaced
// meanwhile; try again.
func (c *Controller) createRecord(ctx context.Context, g *gang, lease *coordv1.Lease, d *decision) (rec *decision, done bool, err error) {
	err = c.client.Create(ctx, lease.DeepCopy())
	if err == nil {
		c.setPending(g.target(), d)
		return d, true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, true, err
	}
	cur := &coordv1.Lease{}
	if err := c.api.Get(ctx, c.recordKey(g.uid), cur); apierrors.IsNotFound(err) {
		return nil, false, nil // applied and deleted meanwhile: the job has it now, or it is gone
	} else if err != nil {
		return nil, true, err
	}
	if old, ok := recordedDecision(cur); ok {
		if t, ok := c.recordTarget(cur); ok && t.uid == g.uid && t.ns == g.ns && t.name == g.name && t.kind == g.kind {
			c.setPending(t, old)
			return old, true, nil
		}
	}
	// Not a verdict record of this job (made by hand, or damaged): replace it.
	c.log.Info("replacing an object that is not a verdict record", "lease", cur.Namespace+"/"+cur.Name)
	if err := c.client.Delete(ctx, cur, client.Preconditions{UID: &cur.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return nil, true, err
	}
	return nil, false, nil
}

// setPending remembers a recorded verdict until it is applied to its job.
func (c *Controller) setPending(t target, d *decision) {
	c.mu.Lock()
	c.pending[t.uid] = d
	metricUnapplied.Set(float64(len(c.pending)))
	c.mu.Unlock()
}

// clearPending forgets a verdict once its job carries it.
func (c *Controller) clearPending(uid types.UID) {
	c.mu.Lock()
	delete(c.pending, uid)
	metricUnapplied.Set(float64(len(c.pending)))
	c.mu.Unlock()
}

func (c *Controller) pendingDecision(uid types.UID) (*decision, bool) {
	c.mu.Lock()
	d, ok := c.pending[uid]
	c.mu.Unlock()
	return d, ok
}

// The writes that follow a verdict (job patch, Event) are paced: when many
// gangs complete together, these writes, which no rank waits for, would
// otherwise crowd the API server and slow the record writes that ranks do
// wait for. At most maxConcurrentApplies are in flight, and pass and warn
// verdicts are applied at most applyRate per second (a burst of 200 gangs
// is on its jobs within about 5 s). Fail verdicts skip the rate: their
// action frees the GPUs the other ranks hold.
const (
	maxConcurrentApplies = 2
	applyRate            = 40
	applyBurst           = 10
)

// An apply also waits (up to maxApplyYield) while verdict records are
// being written: ranks wait for those, nobody waits for the apply.
const (
	maxApplyYield   = 2 * time.Second
	applyYieldCheck = 5 * time.Millisecond
)

// yieldToRecords waits while records are being written, at most
// maxApplyYield.
func (c *Controller) yieldToRecords(ctx context.Context) {
	if c.recording.Load() == 0 {
		return
	}
	deadline := time.Now().Add(maxApplyYield)
	t := time.NewTicker(applyYieldCheck)
	defer t.Stop()
	for c.recording.Load() > 0 && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// applyUntilDone applies d to its job, retrying with backoff until it is
// done or this replica stops leading (the next leader's sweep then
// finishes it).
func (c *Controller) applyUntilDone(ctx context.Context, t target, d *decision) {
	backoff := 200 * time.Millisecond
	for {
		if !d.Report.Failed() {
			if err := c.applyPace.Wait(ctx); err != nil {
				return // stopped leading
			}
		}
		select {
		case c.applySlots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		c.yieldToRecords(ctx)
		err := c.apply(ctx, t, d)
		<-c.applySlots
		if err == nil {
			c.clearPending(t.uid)
			// The record is deleted later (Options.RecordCleanupDelay), off
			// the moment many gangs complete together: a record whose job
			// carries the verdict is harmless, and the next leader's sweep
			// deletes any that are left.
			time.AfterFunc(c.opts.RecordCleanupDelay, func() {
				if ctx.Err() != nil {
					return
				}
				dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				if err := c.dropRecord(dctx, t); err != nil {
					c.log.V(1).Info("deleting verdict record; the next leader's sweep will", "job", t.key(), "error", err.Error())
				}
			})
			return
		}
		metricAPIErrors.WithLabelValues("verdict").Inc()
		c.log.Error(err, "applying the recorded verdict to the job; retrying", "job", t.key(), "in", backoff.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// apply writes the recorded verdict d onto its job (annotations, and
// runPolicy.suspend on a fail with that action, in one patch guarded by
// the job's resourceVersion), emits the Event and runs the delete policy.
// A job that already carries a verdict, or is gone, is not patched again;
// a delete verdict still deletes it (the record stays until the delete is
// done, so a leader that dies in between leaves it to the next one).
func (c *Controller) apply(ctx context.Context, t target, d *decision) error {
	k, _ := kindByName(t.kind)
	key := types.NamespacedName{Namespace: t.ns, Name: t.name}
	var lastErr error
	for attempt := 0; attempt < 10; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		done, obj, ev, err := c.applyOnce(actx, k, key, t, d, attempt > 0)
		cancel()
		switch {
		case err == nil && done:
			if obj != nil && !d.adopted {
				metricApplyLag.Observe(time.Since(d.DecidedAt).Seconds())
			}
			if d.Report.Failed() && d.Action == ActionDelete {
				dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				err := c.deleteJob(dctx, t)
				if apierrors.IsForbidden(err) {
					// Allowed when the verdict was recorded, refused now
					// (the permission went, or an admission policy).
					return c.suspendInstead(dctx, k, key, t, d, c.refusedText(k, t.ns))
				}
				if err != nil {
					return err
				}
			}
			if obj != nil {
				c.emitEvent(obj, ev)
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
func (c *Controller) applyOnce(ctx context.Context, k jobKind, key types.NamespacedName, t target, d *decision, fresh bool) (bool, client.Object, *decision, error) {
	obj := k.New()
	var err error
	if fresh {
		err = c.api.Get(ctx, key, obj)
	} else {
		err = c.client.Get(ctx, key, obj)
	}
	if apierrors.IsNotFound(err) || (err == nil && obj.GetUID() != t.uid) {
		return true, nil, nil, nil
	}
	if err != nil {
		return false, nil, nil, err
	}
	if _, ok := recordedDecision(obj); ok {
		return true, nil, nil, nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	ev := d
	if d.Report.Failed() && d.Action == ActionSuspend {
		if kueueManaged(obj) {
			// Kueue owns runPolicy.suspend: stop the job through its
			// Workload, then annotate (a retry deactivates again, a no-op).
			how, err := c.deactivateWorkload(ctx, obj)
			if err != nil {
				return false, nil, nil, err
			}
			e := *d
			e.kueue = how
			ev = &e
		} else {
			wrap(obj).SetSuspended(true)
		}
	}
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	for k, v := range decisionAnnotationsFor(d, ann) {
		ann[k] = v
	}
	obj.SetAnnotations(ann)
	err = c.client.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
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
func (c *Controller) deleteRefused(ctx context.Context, k jobKind, job client.Object) string {
	err := c.client.Delete(ctx, job.DeepCopyObject().(client.Object), client.DryRunAll, client.Preconditions{UID: ptrUID(job.GetUID())})
	if apierrors.IsForbidden(err) {
		return c.refusedText(k, job.GetNamespace())
	}
	return ""
}

func (c *Controller) refusedText(k jobKind, ns string) string {
	return fmt.Sprintf("the controller may not delete %ss in namespace %s; the overlay configs/overlays/on-fail-delete grants it", strings.ToLower(k.GVK.Kind), ns)
}

// suspendInstead suspends a job whose delete verdict the API server
// refused, and sets its action annotation to suspend. The in-memory
// decision keeps delete (ranks were answered with it); the job, its
// annotations and the Event say what happened.
func (c *Controller) suspendInstead(ctx context.Context, k jobKind, key types.NamespacedName, t target, d *decision, why string) error {
	s := *d
	s.Action, s.deleteRefused = ActionSuspend, why
	for attempt := 0; attempt < 10; attempt++ {
		obj := k.New()
		err := c.api.Get(ctx, key, obj)
		if apierrors.IsNotFound(err) || (err == nil && obj.GetUID() != t.uid) {
			return nil
		}
		if err != nil {
			return err
		}
		j := wrap(obj)
		kueue := kueueManaged(obj)
		if (j.Suspended() || kueue) && obj.GetAnnotations()[KeyAction] == ActionSuspend {
			return nil // done by an earlier try or leader
		}
		orig := obj.DeepCopyObject().(client.Object)
		if kueue {
			how, err := c.deactivateWorkload(ctx, obj)
			if err != nil {
				return err
			}
			s.kueue = how
		} else {
			j.SetSuspended(true)
		}
		ann := obj.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[KeyAction] = ActionSuspend
		obj.SetAnnotations(ann)
		err = c.client.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		switch {
		case apierrors.IsConflict(err):
			continue
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("suspending job %s, whose delete is refused: %w", t.key(), err)
		}
		c.log.Info("the controller may not delete the job: suspended it instead", "job", t.key(), "why", why)
		c.emitEvent(obj, &s)
		return nil
	}
	return fmt.Errorf("job %s kept changing while being suspended", t.key())
}

// dropRecord deletes a job's verdict record once the job carries the
// verdict (or is gone).
func (c *Controller) dropRecord(ctx context.Context, t target) error {
	key := c.recordKey(t.uid)
	l := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if err := c.client.Delete(ctx, l); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting verdict record %s/%s: %w", l.Namespace, l.Name, err)
	}
	c.clearPending(t.uid)
	return nil
}

// recordsRBACHint says what a Forbidden answer on records means.
func (c *Controller) recordsRBACHint(verbs string) string {
	return fmt.Sprintf("the controller needs %s on leases.coordination.k8s.io in its namespace %s (the Role rankgate-verdict-records: apply configs/deploy/rbac.yaml)", verbs, c.opts.Namespace)
}

// sweep, on taking the lead, loads the verdict records an earlier leader
// left unapplied (it answers from them at once) and applies them. It
// retries the list until it succeeds or ctx ends; the gate answers
// Unavailable until then. Records whose job is gone, replaced or no longer
// opted in are deleted, never acted on.
func (c *Controller) sweep(ctx context.Context) bool {
	backoff := 200 * time.Millisecond
	for {
		left, err := c.loadRecords(ctx)
		if err == nil {
			c.recovered.Store(true)
			if len(left) > 0 {
				c.log.Info("applying verdicts an earlier leader recorded", "count", len(left))
			}
			for _, f := range left {
				go c.applyUntilDone(ctx, f.t, f.d)
			}
			return true
		}
		msg := err.Error()
		if apierrors.IsForbidden(err) {
			msg += " (" + c.recordsRBACHint("get, list, create and delete") + ")"
		}
		c.sweepErr.Store(&msg)
		c.log.Error(err, "listing verdict records; retrying", "in", backoff.String())
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

type foundRecord struct {
	t target
	d *decision
}

// loadRecords lists the records in the controller's namespace, keeps those
// of existing opted-in jobs (marked pending) and deletes the others.
func (c *Controller) loadRecords(ctx context.Context) ([]foundRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list := &coordv1.LeaseList{}
	if err := c.api.List(ctx, list, client.InNamespace(c.opts.Namespace), client.MatchingLabels{LabelManagedBy: managedByValue, LabelRecord: recordKindValue}); err != nil {
		return nil, err
	}
	var left []foundRecord
	for i := range list.Items {
		l := &list.Items[i]
		t, ok := c.recordTarget(l)
		d, ok2 := recordedDecision(l)
		if !ok || !ok2 {
			c.log.Info("ignoring a malformed verdict record", "lease", l.Namespace+"/"+l.Name)
			continue
		}
		why, err := c.recordStale(ctx, t)
		if err != nil {
			return nil, err
		}
		if why != "" {
			c.log.Info("deleting a verdict record without an opted-in job", "lease", l.Namespace+"/"+l.Name, "job", t.key(), "uid", t.uid, "why", why)
			if err := c.client.Delete(ctx, l, client.Preconditions{UID: &l.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return nil, err
			}
			continue
		}
		c.setPending(t, d)
		left = append(left, foundRecord{t, d})
	}
	return left, nil
}

// recordStale says why a record's job must not be acted on ("" when it
// exists with the record's UID and is opted in).
func (c *Controller) recordStale(ctx context.Context, t target) (string, error) {
	k, _ := kindByName(t.kind)
	obj := k.New()
	err := c.api.Get(ctx, types.NamespacedName{Namespace: t.ns, Name: t.name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		return "the job is gone", nil
	case err != nil:
		return "", err
	case obj.GetUID() != t.uid:
		return "the job was replaced (uid " + string(obj.GetUID()) + ")", nil
	}
	in, err := c.optedIn(ctx, obj)
	if err != nil {
		return "", err
	}
	if !in {
		return "the job is not opted in", nil
	}
	return "", nil
}
