package controller

import (
	"github.com/rankgate/rankgate/integrations/kubeflow"

	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// The Pending watchdog. A gated job with a pod the scheduler marked
// unschedulable (PodScheduled=False, reason Unschedulable) for longer than
// its grace is judged as a whole by the schedule engine of `rankgate
// diagnose job` (judgeJob), whether or not any rank reported:
//
//   - hopeless (a fail finding: SHAPE_MISMATCH, STRATEGY_MISMATCH,
//     MIG_LAYOUT_INVALID, MIG_RECONFIG_FAILED, DRIVER_KNOWN_BAD,
//     GANG_TOO_LARGE, NODE_CONSTRAINTS; SHAPE_MISMATCH with RECONFIGURABLE
//     unless MIG layouts change on demand): the job fails through the gang
//     path (record, then apply: annotations, fail action, Warning Event);
//   - waiting (WAIT_CAPACITY, MIG_RECONFIG_PENDING, cordoned or NotReady
//     nodes, DRA_DEVICE_UNHEALTHY: the only matching devices carry their
//     driver's health taints, RECONFIGURABLE with on-demand): the job is
//     left alone, and
//     rankgate.io/waiting-for and a Normal Event say what it waits for,
//     written only when that changes. Past the pending timeout, if one is
//     set, it fails with PENDING_TIMEOUT and the last cause.
//
// The job is judged as diagnose judges it, on every relevant change (pods,
// nodes): on the engine's node model (model.go) with the requests of every
// bound, unfinished pod summed per node (usage.go), both kept current from
// the informers. Hopelessness never depends on free capacity; what a job
// waits for does (who holds the devices), and its text changes with every
// pod bound or finished on a busy node: it is renewed at most once per
// liveEvery while its rule stays the same.

// MIG reconfiguration policies (Options.MIGReconfigure).
const (
	MIGReconfigureOff      = "off"
	MIGReconfigureOnDemand = "on-demand"
)

const (
	// liveEvery: how often a waiting job's cause is judged again (the
	// usage it names changes with every pod).
	liveEvery = 10 * time.Second
	// liveFresh: judgements this close share the model with the usage.
	liveFresh = time.Second
	// waitRecheck re-judges a waiting job without any event.
	waitRecheck = 30 * time.Second
	// migSettle: after mig-manager changes a node's MIG state (config,
	// state, device plugin paused or back), the device plugin re-registers
	// and advertises the new instances a few seconds later. Until then the
	// node looks like a layout that offers nothing (MIG_LAYOUT_INVALID): a
	// transient, not a cause to fail a job.
	migSettle = 30 * time.Second
	// transientSettle: how long any hopeless verdict waits after a node
	// lost GPU devices or changed readiness (a device plugin re-registers
	// in a few seconds).
	transientSettle = 15 * time.Second
)

// migLabels are the labels mig-manager changes around a layout change.
var migLabels = []string{"nvidia.com/mig.config", "nvidia.com/mig.config.state", "nvidia.com/gpu.deploy.device-plugin"}

// noteNodeChange remembers when a node's MIG state last changed, and when
// any node last lost GPU devices it advertised or changed readiness (a
// device plugin re-registering, a node restarting).
func (c *Controller) noteNodeChange(o, n *corev1.Node) {
	if gpuTransient(o, n) {
		c.pw.mu.Lock()
		c.pw.transientAt = c.now()
		c.pw.mu.Unlock()
	}
	for _, l := range migLabels {
		if o.Labels[l] != n.Labels[l] {
			c.pw.mu.Lock()
			if c.pw.migChanged == nil {
				c.pw.migChanged = map[string]time.Time{}
			}
			c.pw.migChanged[n.Name] = c.now()
			for name, at := range c.pw.migChanged {
				if c.since(at) > migSettle {
					delete(c.pw.migChanged, name)
				}
			}
			c.pw.mu.Unlock()
			return
		}
	}
}

// settling: every fail finding of rep is MIG_LAYOUT_INVALID about nodes
// whose MIG state changed within migSettle (the device plugin may not have
// re-registered yet); left is how long until the last of them settles.
//
// Any hopeless verdict also waits while a node lost GPU devices or changed
// readiness within transientSettle: a device plugin that re-registers advertises
// 0 devices for a moment, and a restarting node is NotReady; either can
// make a shape look absent that is only away for seconds.
func (c *Controller) settling(rep verdict.Report) (left time.Duration, ok bool) {
	c.pw.mu.Lock()
	defer c.pw.mu.Unlock()
	if l := c.until(c.pw.transientAt.Add(transientSettle)); l > 0 {
		return l, true
	}
	for _, f := range rep.Findings {
		if f.Severity != verdict.SeverityFail {
			continue
		}
		if f.Rule != verdict.RuleMIGLayoutInvalid || len(f.Nodes) == 0 {
			return 0, false
		}
		for _, n := range f.Nodes {
			at, seen := c.pw.migChanged[n]
			l := c.until(at.Add(migSettle))
			if !seen || l <= 0 {
				return 0, false
			}
			left = max(left, l)
		}
	}
	return left, left > 0
}

func (o *Options) pendingDefaults() error {
	if err := durationDefault(&o.PendingGrace, DefaultPendingGrace, "PendingGrace"); err != nil {
		return err
	}
	if o.PendingTimeout < 0 {
		o.PendingTimeout = 0
	}
	switch o.MIGReconfigure {
	case "":
		o.MIGReconfigure = MIGReconfigureOff
	case MIGReconfigureOff, MIGReconfigureOnDemand:
	default:
		return fmt.Errorf("mig-reconfigure %q: want off or on-demand", o.MIGReconfigure)
	}
	return nil
}

// pendingWatches are the jobs with unschedulable pods (by namespace/kind/name).
type pendingWatches struct {
	mu   sync.Mutex
	jobs map[string]*pendingJob
	// liveMu serialises liveCluster; snap is its last result.
	liveMu sync.Mutex
	snap   *liveSnapshot
	// migChanged: when each node's MIG labels last changed (noteNodeChange).
	migChanged map[string]time.Time
	// transientAt: when a node last lost GPU devices or changed readiness.
	transientAt time.Time
}

// gpuTransient: between o and n the node advertises fewer of some GPU
// resource, or its Ready condition changed.
func gpuTransient(o, n *corev1.Node) bool {
	for res, q := range o.Status.Allocatable {
		if !topology.IsGPUResource(string(res)) {
			continue
		}
		if nq, ok := n.Status.Allocatable[res]; !ok || nq.Cmp(q) < 0 {
			return true
		}
	}
	return nodeReady(o) != nodeReady(n)
}

type pendingJob struct {
	kind, ns, name string
	uid            types.UID
	seen           time.Time       // first seen unschedulable (when a condition has no time)
	liveAt         time.Time       // last judgement of what it waits for
	cause          verdict.Finding // what it waits for, from that judgement
	written        string          // the rankgate.io/waiting-for this replica last wrote
	due            time.Time       // when its grace ends
	judged         *judged         // its last judgement on the model (nil: none, or its pods changed since)
	last           *lastJudgement  // its last judgement on the model with the pods' usage
}

func (c *Controller) watchedPending(key string, o client.Object, kind string) *pendingJob {
	c.pw.mu.Lock()
	defer c.pw.mu.Unlock()
	if c.pw.jobs == nil {
		c.pw.jobs = map[string]*pendingJob{}
	}
	p := c.pw.jobs[key]
	if p == nil || p.uid != o.GetUID() {
		p = &pendingJob{kind: kind, ns: o.GetNamespace(), name: o.GetName(), uid: o.GetUID(), seen: c.now()}
		c.pw.jobs[key] = p
	}
	return p
}

func (c *Controller) unwatchPending(key string) {
	c.pw.mu.Lock()
	delete(c.pw.jobs, key)
	c.pw.mu.Unlock()
}

// nodeMatters: a node change the engine's model sees.
func nodeMatters(o, n *corev1.Node) bool {
	return !equalStrings(o.Labels, n.Labels) || o.Spec.Unschedulable != n.Spec.Unschedulable ||
		!slices.EqualFunc(o.Spec.Taints, n.Spec.Taints, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) && a.Value == b.Value }) ||
		!equalResources(o.Status.Allocatable, n.Status.Allocatable) || !equalResources(o.Status.Capacity, n.Status.Capacity) ||
		nodeReady(o) != nodeReady(n)
}

func equalStrings(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func equalResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !w.Equal(v) {
			return false
		}
	}
	return true
}

// jobDuration reads a duration annotation ("0s" allowed; at most
// gate.MaxJobDuration), else def.
func jobDuration(o client.Object, key string, def time.Duration) (time.Duration, error) {
	s, ok := o.GetAnnotations()[key]
	if !ok || s == "" {
		return def, nil
	}
	d, err := gate.ParseJobDuration(s)
	if err != nil {
		return def, fmt.Errorf("annotation %s=%q is not a duration like 30s", key, s)
	}
	return d, nil
}

// unschedulableSince is the earliest time one of pods was marked
// unschedulable; ok is false when none is.
func unschedulableSince(pods []*corev1.Pod, seen time.Time) (since time.Time, ok bool) {
	for _, p := range pods {
		if !unschedulable(p) || p.DeletionTimestamp != nil {
			continue
		}
		t := seen
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && !cond.LastTransitionTime.IsZero() {
				t = cond.LastTransitionTime.Time
			}
		}
		if !ok || t.Before(since) {
			since, ok = t, true
		}
	}
	return since, ok
}

// jobPods are the cached pods of the job with obj's UID that fit its spec
// (podFits: another pod with its labels and owner is ignored).
func (c *Controller) jobPods(ctx context.Context, obj client.Object) ([]*corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := c.listJobPods(ctx, pods, obj.GetNamespace(), obj.GetName()); err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if ref, ok, err := c.jobOf(ctx, p); err == nil && ok && ref.uid == obj.GetUID() {
			out = append(out, p)
		}
	}
	return c.fittingPods(wrap(obj), out), nil
}

// watchPending is the watchdog's step for one gated job without a
// verdict (from reconcile). It returns when to look again (0: on events
// only) and whether the job was failed.
func (c *Controller) watchPending(ctx context.Context, k kubeflow.Kind, obj client.Object) (time.Duration, bool) {
	key := obj.GetNamespace() + "/" + k.GVK().Kind + "/" + obj.GetName()
	j := wrap(obj)
	pods, err := c.jobPods(ctx, obj)
	if err != nil {
		c.log.Error(err, "listing the job's pods for the Pending watchdog", "job", key)
		return time.Second, false
	}
	c.pw.mu.Lock()
	w := c.pw.jobs[key]
	c.pw.mu.Unlock()
	seen := c.now()
	if w != nil {
		seen = w.seen
	}
	since, any := unschedulableSince(pods, seen)
	if !any || j.Suspended() || obj.GetDeletionTimestamp() != nil {
		c.unwatchPending(key)
		if _, ok := obj.GetAnnotations()[contract.AnnotationWaitingFor]; ok {
			c.wantWaitingFor(obj, k.GVK().Kind, nil)
		}
		return 0, false
	}
	w = c.watchedPending(key, obj, k.GVK().Kind)
	grace, err := jobDuration(obj, contract.AnnotationPendingGrace, *c.opts.PendingGrace)
	if err != nil {
		c.log.Info("ignoring bad annotation", "job", key, "error", err.Error())
	}
	c.pw.mu.Lock()
	w.due = since.Add(grace)
	c.pw.mu.Unlock()
	if left := c.until(since.Add(grace)); left > 0 {
		return left, false
	}
	return c.judgePending(ctx, k, obj, key, w, pods, since)
}

// judgePending judges a job whose pods have been unschedulable past their
// grace: a hopeless job fails; a waiting one is told what it waits for,
// and fails at its pending timeout. It returns when to look again, and
// whether the job was failed.
func (c *Controller) judgePending(ctx context.Context, k kubeflow.Kind, obj client.Object, key string, w *pendingJob, pods []*corev1.Pod, since time.Time) (time.Duration, bool) {
	j := wrap(obj)
	// The whole job, with its pod templates (the cache strips them).
	full := k.New()
	if err := c.api.Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}, full); err != nil || full.GetUID() != obj.GetUID() {
		if err != nil && !apierrors.IsNotFound(err) {
			c.log.Error(err, "reading the job for the Pending watchdog", "job", key)
			return time.Second, false
		}
		return 0, false
	}
	fj := wrap(full)
	res, wl, err := c.judgeLive(ctx, fj, pods, w)
	c.pw.mu.Lock()
	w.judged = nil
	if err == nil {
		w.judged = &judged{w: wl, sig: signature(wl)}
	}
	c.pw.mu.Unlock()
	if err != nil {
		c.log.Info("cannot judge the unschedulable job; looking again later", "job", key, "error", err.Error())
		return waitRecheck, false
	}
	onDemand := c.opts.MIGReconfigure == MIGReconfigureOnDemand
	hopeless, f := pendingCause(res, onDemand)
	if hopeless {
		if left, ok := c.settling(res.Report); ok {
			return left, false
		}
		c.failPending(j, key, res.Report, "hopeless")
		return 0, true
	}
	return c.noteWaiting(ctx, obj, j, key, w, res.Report.Subject, c.waitingCause(w, f), since)
}

// waitingCause is what a waiting job waits for: f, the cause just judged,
// where its rule differs from the last one or the last is older than
// liveEvery (the use of the busy nodes it names changes with every pod
// bound or finished; what the job waits for is written only when it
// changes), else the last one.
func (c *Controller) waitingCause(w *pendingJob, f verdict.Finding) verdict.Finding {
	c.pw.mu.Lock()
	defer c.pw.mu.Unlock()
	if w.cause.Rule != f.Rule || c.since(w.liveAt) >= liveEvery {
		w.liveAt, w.cause = c.now(), f
	}
	return w.cause
}

// noteWaiting fails a job waiting past its pending timeout, and otherwise
// writes what it waits for when that changed.
func (c *Controller) noteWaiting(ctx context.Context, obj client.Object, j job, key string, w *pendingJob, subject string, cause verdict.Finding, since time.Time) (time.Duration, bool) {
	timeout, err := jobDuration(obj, contract.AnnotationPendingTimeout, c.opts.PendingTimeout)
	if err != nil {
		c.log.Info("ignoring bad annotation", "job", key, "error", err.Error())
	}
	waited := c.since(since)
	if timeout > 0 && waited >= timeout {
		c.failPending(j, key, timeoutReport(subject, cause, waited, timeout), "pending-timeout")
		return 0, true
	}
	// Only a change of cause is written (the cache may not show this
	// replica's last write yet).
	if v := waitingFor(cause); obj.GetAnnotations()[contract.AnnotationWaitingFor] != v {
		c.pw.mu.Lock()
		fresh := w.written != v
		w.written = v
		c.pw.mu.Unlock()
		if fresh {
			c.wantWaitingFor(obj, j.Kind(), &cause)
		}
	}
	next := waitRecheck
	if timeout > 0 && timeout-waited < next {
		next = timeout - waited
	}
	return next, false
}

// pendingCause reads the engine's result: hopeless, or what the job
// waits for (the finding of the primary rule).
func pendingCause(res schedule.Result, onDemand bool) (hopeless bool, cause verdict.Finding) {
	if res.Hopeless && !(onDemand && reconfigurableOnly(res.Report.Findings)) {
		return true, verdict.Finding{}
	}
	rule := res.Rule
	if res.Hopeless {
		rule = verdict.RuleReconfigurable
	}
	for _, f := range res.Report.Findings {
		if f.Rule == rule && f.Severity != verdict.SeverityFail {
			return false, f
		}
	}
	return false, verdict.Finding{Rule: rule, Severity: verdict.SeverityWarn, Message: "The scheduler has not placed the job's pods yet."}
}

// reconfigurableOnly: every fail finding is a SHAPE_MISMATCH that a MIG
// layout change would cure (a RECONFIGURABLE finding about the same pods).
func reconfigurableOnly(fs []verdict.Finding) bool {
	any := false
	for _, f := range fs {
		if f.Severity != verdict.SeverityFail {
			continue
		}
		if f.Rule != verdict.RuleShapeMismatch {
			return false
		}
		cured := false
		for _, r := range fs {
			if r.Rule == verdict.RuleReconfigurable && (len(f.Pods) == 0 || len(r.Pods) == 0 || slices.ContainsFunc(f.Pods, func(p string) bool { return slices.Contains(r.Pods, p) })) {
				cured = true
			}
		}
		if !cured {
			return false
		}
		any = true
	}
	return any
}

// timeoutReport is the PENDING_TIMEOUT verdict with the last cause.
func timeoutReport(subject string, cause verdict.Finding, waited, timeout time.Duration) verdict.Report {
	f := verdict.Finding{
		Rule: verdict.RulePendingTimeout, Severity: verdict.SeverityFail,
		Message: fmt.Sprintf("The job's pods have been unschedulable for %s, past its pending timeout of %s. It was waiting: %s: %s",
			waited.Round(time.Second), timeout, cause.Rule, cause.Message),
		Remediation: cause.Remediation,
		Nodes:       cause.Nodes, Pods: cause.Pods,
	}
	if f.Remediation == "" {
		f.Remediation = "act on the last cause, or raise the pending timeout (rankgate.io/pending-timeout)"
	}
	return verdict.NewReport(subject, []verdict.Finding{f, cause})
}

// failPending fails the job through the gang path.
func (c *Controller) failPending(j job, key string, rep verdict.Report, why string) {
	c.unwatchPending(key)
	c.log.Info("failing an unschedulable job", "job", key, "why", why, "rules", strings.Join(rep.RuleIDs(), ","))
	g := c.ensureGang(j)
	c.askDecide(g, ask{why: trigPending, pre: &rep})
}

// judgeLive judges job j with its cached pods as `rankgate diagnose job`
// does: against every node with the requests of every bound, unfinished
// pod (liveCluster, from the informers; usage.go). It returns the job's
// workload too. The same workload on the same snapshot is judged once: p
// keeps the last judgement (a waiting job is looked at again every
// waitRecheck and after each write of its annotation).
func (c *Controller) judgeLive(ctx context.Context, j job, pods []*corev1.Pod, p *pendingJob) (schedule.Result, schedule.Workload, error) {
	if err := j.Validate(); err != nil {
		return schedule.Result{}, schedule.Workload{}, err
	}
	pods, err := c.judgedPods(ctx, j, pods)
	if err != nil {
		return schedule.Result{}, schedule.Workload{}, err
	}
	// A job whose devices come through DRA is judged on the published
	// devices (dra.go); where they are not known, the engine answers
	// DRA_NOT_JUDGED, a waiting cause that is never hopeless.
	dra, err := c.draState(ctx)
	if err != nil {
		return schedule.Result{}, schedule.Workload{}, err
	}
	w, _, err := jobWorkload(dra.builder(), dra, true, j, pods, false)
	if err != nil {
		return schedule.Result{}, w, err
	}
	s, err := c.liveCluster(ctx)
	if err != nil {
		return schedule.Result{}, w, err
	}
	key := workloadKey(w)
	c.pw.mu.Lock()
	m := p.last
	c.pw.mu.Unlock()
	if m != nil && m.seq == s.seq && m.key == key {
		return m.res, w, nil
	}
	res := c.engine.Diagnose(s.cl, w)
	c.pw.mu.Lock()
	p.last = &lastJudgement{seq: s.seq, key: key, res: res}
	c.pw.mu.Unlock()
	return res, w, nil
}

// lastJudgement is a Pending job's last judgement (judgeLive): of its
// workload (key) on snapshot seq.
type lastJudgement struct {
	seq uint64
	key string
	res schedule.Result
}

// waitingFor is the annotation's value for cause.
func waitingFor(cause verdict.Finding) string {
	return verdict.Truncate(cause.Rule+": "+cause.Message, maxReasonLen)
}

// pendingReport: a verdict of the Pending watchdog (placement rules or
// PENDING_TIMEOUT), not of the gang rules.
func pendingReport(r verdict.Report) bool {
	for _, f := range r.Findings {
		if f.Rule == verdict.RulePendingTimeout || slices.Contains(schedule.Rules, f.Rule) {
			return true
		}
	}
	return false
}

// durationDefault sets an optional duration that is not set to def; a
// negative one is an error of the caller.
func durationDefault(d **time.Duration, def time.Duration, name string) error {
	if *d == nil {
		*d = &def
		return nil
	}
	if **d < 0 {
		return fmt.Errorf("controller: %s %s is negative", name, **d)
	}
	return nil
}
