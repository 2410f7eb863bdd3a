package controller

import (
	"context"
	"fmt"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A verdict is made durable in two steps:
//
//  1. record: a Lease named rankgate-verdict-<job uid> in the job's
//     namespace, owned by the job, carrying the verdict in the same
//     rankgate.io/ annotations the job gets. It is created, never updated:
//     the first writer wins, so two replicas (a leader and a deposed one
//     still finishing) can never record different verdicts for one gang.
//     Only then are the ranks answered.
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

// Labels and name of the verdict records.
const (
	LabelManagedBy   = "app.kubernetes.io/managed-by"
	LabelRecord      = "rankgate.io/record"
	recordKindValue  = "verdict"
	recordNamePrefix = "rankgate-verdict-"
)

func recordKey(ns string, uid types.UID) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: recordNamePrefix + string(uid)}
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
	return &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: recordKey(job.GetNamespace(), job.GetUID()).Name, Namespace: job.GetNamespace(),
			Labels:      map[string]string{LabelManagedBy: "rankgate", LabelRecord: recordKindValue},
			Annotations: decisionAnnotations(d),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: k.GVK.GroupVersion().String(), Kind: k.GVK.Kind, Name: job.GetName(), UID: job.GetUID(),
			}},
		},
		Spec: coordv1.LeaseSpec{HolderIdentity: &holder, AcquireTime: &at},
	}
}

// recordTarget reads which job a record belongs to.
func recordTarget(l *coordv1.Lease) (target, bool) {
	for _, ref := range l.OwnerReferences {
		if _, ok := kindByName(ref.Kind); ok && l.Name == recordKey(l.Namespace, ref.UID).Name {
			return target{kind: ref.Kind, ns: l.Namespace, name: ref.Name, uid: ref.UID}, true
		}
	}
	return target{}, false
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
	if d.Report.Failed() {
		d.Action = jobAction(obj, c.opts.OnFail)
	}
	lease := c.newRecord(k, obj, d)
	for attempt := 0; attempt < 3; attempt++ {
		err := c.client.Create(ctx, lease.DeepCopy())
		if err == nil {
			c.setPending(g.target(), d)
			return d, true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, false, err
		}
		cur := &coordv1.Lease{}
		if err := c.api.Get(ctx, recordKey(g.ns, g.uid), cur); apierrors.IsNotFound(err) {
			continue // applied and deleted meanwhile: the job has it now, or it is gone
		} else if err != nil {
			return nil, false, err
		}
		if old, ok := recordedDecision(cur); ok {
			if t, ok := recordTarget(cur); ok && t.uid == g.uid {
				c.setPending(t, old)
				return old, false, nil
			}
		}
		// Not a verdict record of this job (made by hand, or damaged):
		// replace it.
		c.log.Info("replacing an object that is not a verdict record", "lease", cur.Namespace+"/"+cur.Name)
		if err := c.client.Delete(ctx, cur, client.Preconditions{UID: &cur.UID}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return nil, false, err
		}
	}
	// The job may have been given its verdict meanwhile.
	if err := c.api.Get(ctx, key, obj); err == nil && obj.GetUID() == g.uid {
		if old, ok := recordedDecision(obj); ok {
			old.applied = true
			return old, false, nil
		}
	}
	return nil, false, fmt.Errorf("verdict record %s keeps changing", recordKey(g.ns, g.uid))
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
// A job that already carries a verdict, or is gone, is left as it is.
func (c *Controller) apply(ctx context.Context, t target, d *decision) error {
	k, _ := kindByName(t.kind)
	key := types.NamespacedName{Namespace: t.ns, Name: t.name}
	var lastErr error
	for attempt := 0; attempt < 10; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		done, obj, err := c.applyOnce(actx, k, key, t, d, attempt > 0)
		cancel()
		switch {
		case err == nil && done:
			if obj != nil {
				if !d.adopted {
					metricApplyLag.Observe(time.Since(d.DecidedAt).Seconds())
				}
				c.emitEvent(obj, d)
				if d.Report.Failed() && d.Action == ActionDelete {
					dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					c.deleteJob(dctx, obj)
					cancel()
				}
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
// (job gone, replaced, or already carrying a verdict).
func (c *Controller) applyOnce(ctx context.Context, k jobKind, key types.NamespacedName, t target, d *decision, fresh bool) (bool, client.Object, error) {
	obj := k.New()
	var err error
	if fresh {
		err = c.api.Get(ctx, key, obj)
	} else {
		err = c.client.Get(ctx, key, obj)
	}
	if apierrors.IsNotFound(err) || (err == nil && obj.GetUID() != t.uid) {
		return true, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	if _, ok := recordedDecision(obj); ok {
		return true, nil, nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	if d.Report.Failed() && d.Action == ActionSuspend {
		wrap(obj).SetSuspended(true)
	}
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	for k, v := range decisionAnnotations(d) {
		ann[k] = v
	}
	obj.SetAnnotations(ann)
	err = c.client.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return true, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	return true, obj, nil
}

// dropRecord deletes a job's verdict record once the job carries the
// verdict (or is gone).
func (c *Controller) dropRecord(ctx context.Context, t target) error {
	key := recordKey(t.ns, t.uid)
	l := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if err := c.client.Delete(ctx, l); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting verdict record %s/%s: %w", l.Namespace, l.Name, err)
	}
	c.clearPending(t.uid)
	return nil
}

// sweep, on taking the lead, loads the verdict records an earlier leader
// left unapplied (it answers from them at once) and applies them. It
// retries the list until it succeeds or ctx ends; the gate answers
// Unavailable until then.
func (c *Controller) sweep(ctx context.Context) bool {
	backoff := 200 * time.Millisecond
	for {
		list := &coordv1.LeaseList{}
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := c.api.List(lctx, list, client.MatchingLabels{LabelRecord: recordKindValue})
		cancel()
		if err == nil {
			type found struct {
				t target
				d *decision
			}
			var left []found
			for i := range list.Items {
				l := &list.Items[i]
				t, ok := recordTarget(l)
				d, ok2 := recordedDecision(l)
				if !ok || !ok2 {
					c.log.Info("ignoring a malformed verdict record", "lease", l.Namespace+"/"+l.Name)
					continue
				}
				c.setPending(t, d)
				left = append(left, found{t, d})
			}
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
			msg += " (the controller's ClusterRole needs get, list, create and delete on leases.coordination.k8s.io: apply configs/deploy/rbac.yaml)"
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
