package controller

import (
	"github.com/rankgate/rankgate/integrations/kubeflow"

	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// judgeLive judges job j with its cached pods as `rankgate diagnose job`
// does: against every node with the requests of every bound, unfinished
// pod (liveCluster, from the informers; usage.go). It returns the job's
// workload too, and the judgement to keep. The same workload on the same
// snapshot is judged once: last is the job's last judgement (a waiting
// job is looked at again every waitRecheck and after each write of its
// annotation).
func (c *Controller) judgeLive(ctx context.Context, j job, pods []*corev1.Pod, last *lastJudgement) (schedule.Result, schedule.Workload, *lastJudgement, error) {
	if err := j.Validate(); err != nil {
		return schedule.Result{}, schedule.Workload{}, last, err
	}
	pods, err := c.judgedPods(ctx, j, pods)
	if err != nil {
		return schedule.Result{}, schedule.Workload{}, last, err
	}
	// A job whose devices come through DRA is judged on the published
	// devices (dra.go); where they are not known, the engine answers
	// DRA_NOT_JUDGED, a waiting cause that is never hopeless.
	dra, err := c.draState(ctx)
	if err != nil {
		return schedule.Result{}, schedule.Workload{}, last, err
	}
	w, _, err := jobWorkload(dra.builder(), dra, true, j, pods, false)
	if err != nil {
		return schedule.Result{}, w, last, err
	}
	s, err := c.liveCluster(ctx)
	if err != nil {
		return schedule.Result{}, w, last, err
	}
	key := workloadKey(w)
	if last != nil && last.seq == s.seq && last.key == key {
		return last.res, w, last, nil
	}
	res := c.engine.Diagnose(s.cl, w)
	return res, w, &lastJudgement{seq: s.seq, key: key, res: res}, nil
}

// fullJob reads obj whole from the API server (the cache strips its pod
// templates); nil when it is gone or was replaced.
func (c *Controller) fullJob(ctx context.Context, k kubeflow.Kind, obj client.Object) (client.Object, error) {
	full := k.New()
	if err := c.api.Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}, full); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	if full.GetUID() != obj.GetUID() {
		return nil, nil
	}
	return full, nil
}

// modelJudge judges workloads on the node model as it is now (a node
// event's re-judging, model.go): hopeless, or the model cannot judge.
// Hopelessness never depends on free capacity, so no pod's usage is
// needed; equal workloads are judged once per model generation.
func (c *Controller) modelJudge() func(*judged) bool {
	cl, gen, err := c.model.cluster()
	onDemand := c.opts.MIGReconfigure == MIGReconfigureOnDemand
	return func(j *judged) bool {
		return err != nil || c.model.hopeless(gen, j.sig, func() bool {
			h, _ := pendingCause(c.engine.Diagnose(cl, j.w), onDemand)
			return h
		})
	}
}

// fail fails job j with the Pending watchdog's report through the gang
// path (record, then apply).
func (c *Controller) fail(j job, rep verdict.Report) {
	c.askDecide(c.ensureGang(j), ask{why: trigPending, pre: &rep})
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
