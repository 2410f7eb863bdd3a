// Package watchdog is the Pending watchdog: the one owner of what is known
// about gated jobs whose pods the scheduler cannot place (when each was
// first seen unschedulable, its grace, its last judgement, what it waits
// for) and of the nodes' recent transients.
//
// A gated job with a pod the scheduler marked unschedulable
// (PodScheduled=False, reason Unschedulable) for longer than its grace is
// judged as a whole, as `rankgate diagnose job` judges it, whether or not
// any rank reported:
//
//   - hopeless (a fail finding: SHAPE_MISMATCH, STRATEGY_MISMATCH,
//     MIG_LAYOUT_INVALID, MIG_RECONFIG_FAILED, DRIVER_KNOWN_BAD,
//     GANG_TOO_LARGE, NODE_CONSTRAINTS; SHAPE_MISMATCH with RECONFIGURABLE
//     unless MIG layouts change on demand): the job fails through the gang
//     path (record, then apply: annotations, fail action, Warning Event);
//   - waiting (WAIT_CAPACITY, MIG_RECONFIG_PENDING, cordoned or NotReady
//     nodes, DRA_DEVICE_UNHEALTHY: the only matching devices carry their
//     driver's health taints, RECONFIGURABLE with on-demand): the job is
//     left alone, and rankgate.io/waiting-for and a Normal Event say what
//     it waits for, written only when that changes. Past the pending
//     timeout, if one is set, it fails with PENDING_TIMEOUT and the last
//     cause.
//
// The watchdog judges nothing and writes nothing itself: its Host judges
// (on the controller's cluster state) and asks the leader's writes. Its
// time is its clock's: every wait is a duration its caller requeues after.
package watchdog

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

const (
	// LiveEvery: how often a waiting job's cause is judged again (the
	// usage it names changes with every pod).
	LiveEvery = 10 * time.Second
	// Recheck re-judges a waiting job without any event.
	Recheck = 30 * time.Second
	// MIGSettle: after mig-manager changes a node's MIG state (config,
	// state, device plugin paused or back), the device plugin re-registers
	// and advertises the new instances a few seconds later. Until then the
	// node looks like a layout that offers nothing (MIG_LAYOUT_INVALID): a
	// transient, not a cause to fail a job.
	MIGSettle = 30 * time.Second
	// TransientSettle: how long any hopeless verdict waits after a node
	// lost GPU devices or changed readiness (a device plugin re-registers
	// in a few seconds).
	TransientSettle = 15 * time.Second
)

// migLabels are the labels mig-manager changes around a layout change.
var migLabels = []string{"nvidia.com/mig.config", "nvidia.com/mig.config.state", "nvidia.com/gpu.deploy.device-plugin"}

// Settings are the watchdog's defaults.
type Settings struct {
	// Grace: how long a job's pods may stay unschedulable before it is
	// judged, unless the job sets its own (rankgate.io/pending-grace).
	Grace time.Duration
	// Timeout fails a job still waiting this long (0: never), unless the
	// job sets its own (rankgate.io/pending-timeout).
	Timeout time.Duration
	// OnDemand: MIG layouts change on demand (a RECONFIGURABLE job waits).
	OnDemand bool
	// Kinds are the names of every job kind watched.
	Kinds []string
}

// Judgement is a job's last judgement on the live cluster (Host.JudgeLive).
type Judgement struct {
	// Snapshot is the generation of the cluster state it was judged on.
	Snapshot uint64
	// Key tells the workload apart by everything the engine reads of it.
	Key string
	// Result is the engine's answer.
	Result schedule.Result
	// Workload is the job as the engine saw it.
	Workload schedule.Workload
	// Sig is everything of Workload that a hopeless verdict reads (the
	// node model judges equal signatures once).
	Sig string
}

// Host is what the watchdog asks of the rest of the controller.
type Host interface {
	// JobPods are the cached pods of obj's job that fit its spec.
	JobPods(ctx context.Context, obj client.Object) ([]*corev1.Pod, error)
	// FullJob reads obj whole (the cache strips its pod templates); nil
	// when it is gone or was replaced.
	FullJob(ctx context.Context, k kubeflow.Kind, obj client.Object) (client.Object, error)
	// JudgeLive judges j with pods as `rankgate diagnose job` does, on the
	// live cluster. last, the job's previous judgement, is answered again
	// when neither the workload nor the cluster changed.
	JudgeLive(ctx context.Context, j kubeflow.Job, pods []*corev1.Pod, last *Judgement) (*Judgement, error)
	// ModelJudge is a judge of judgements' workloads on the node model as
	// it is now, with no pod's usage (whether a node event made a job
	// hopeless).
	ModelJudge() func(*Judgement) (hopeless bool)
	// WantWaitingFor asks for the job's rankgate.io/waiting-for to be
	// cause (nil: removed).
	WantWaitingFor(obj client.Object, kind string, cause *verdict.Finding)
	// Fail fails j with rep through the gang path (record, then apply).
	Fail(j kubeflow.Job, rep verdict.Report)
}

// Watchdog is the Pending watchdog (see the package comment). The job
// reconciler runs its Step for every gated job without a verdict; the
// event router asks it which jobs a node or device change may fail.
type Watchdog struct {
	host Host
	clk  clock.PassiveClock
	log  logr.Logger
	set  Settings

	mu   sync.Mutex
	jobs map[string]*watched // by job key: namespace/Kind/name
	// migChanged: when each node's MIG labels last changed (NoteNodeChange).
	migChanged map[string]time.Time
	// transientAt: when a node last lost GPU devices or changed readiness.
	transientAt time.Time
}

// watched is a job the watchdog watches.
type watched struct {
	kind, ns, name string
	uid            types.UID
	seen           time.Time       // first seen unschedulable (when a condition has no time)
	liveAt         time.Time       // last judgement of what it waits for
	cause          verdict.Finding // what it waits for, from that judgement
	written        string          // the rankgate.io/waiting-for this replica last wrote
	due            time.Time       // when its grace ends
	last           *Judgement      // its last judgement (nil: none yet)
	stale          bool            // its pods changed, or it could not be judged, since last
}

// New is a watchdog asking host, on clk.
func New(host Host, clk clock.PassiveClock, log logr.Logger, s Settings) *Watchdog {
	return &Watchdog{host: host, clk: clk, log: log, set: s, jobs: map[string]*watched{}, migChanged: map[string]time.Time{}}
}

func (wd *Watchdog) until(t time.Time) time.Duration { return t.Sub(wd.clk.Now()) }

// Step is the watchdog's step for one gated job without a verdict. It
// returns when to look again (0: on events only) and whether the job was
// failed.
func (wd *Watchdog) Step(ctx context.Context, k kubeflow.Kind, obj client.Object) (time.Duration, bool) {
	key := obj.GetNamespace() + "/" + k.GVK().Kind + "/" + obj.GetName()
	j, err := k.Wrap(obj)
	if err != nil {
		wd.log.Error(err, "not a job of its kind", "job", key)
		return 0, false
	}
	pods, err := wd.host.JobPods(ctx, obj)
	if err != nil {
		wd.log.Error(err, "listing the job's pods for the Pending watchdog", "job", key)
		return time.Second, false
	}
	wd.mu.Lock()
	w := wd.jobs[key]
	wd.mu.Unlock()
	seen := wd.clk.Now()
	if w != nil {
		seen = w.seen
	}
	since, any := unschedulableSince(pods, seen)
	if !any || j.Suspended() || obj.GetDeletionTimestamp() != nil {
		wd.Unwatch(key)
		if _, ok := obj.GetAnnotations()[contract.AnnotationWaitingFor]; ok {
			wd.host.WantWaitingFor(obj, k.GVK().Kind, nil)
		}
		return 0, false
	}
	w = wd.watch(key, obj, k.GVK().Kind)
	grace, err := JobDuration(obj, contract.AnnotationPendingGrace, wd.set.Grace)
	if err != nil {
		wd.log.Info("ignoring bad annotation", "job", key, "error", err.Error())
	}
	wd.mu.Lock()
	w.due = since.Add(grace)
	wd.mu.Unlock()
	if left := wd.until(since.Add(grace)); left > 0 {
		return left, false
	}
	return wd.judge(ctx, k, j, key, w, pods, since)
}

// judge judges a job whose pods have been unschedulable past their
// grace: a hopeless job fails; a waiting one is told what it waits for,
// and fails at its pending timeout. It returns when to look again, and
// whether the job was failed.
func (wd *Watchdog) judge(ctx context.Context, k kubeflow.Kind, j kubeflow.Job, key string, w *watched, pods []*corev1.Pod, since time.Time) (time.Duration, bool) {
	obj := j.Object()
	full, err := wd.host.FullJob(ctx, k, obj)
	if err != nil {
		wd.log.Error(err, "reading the job for the Pending watchdog", "job", key)
		return time.Second, false
	}
	if full == nil {
		return 0, false
	}
	fj, err := k.Wrap(full)
	if err != nil {
		wd.log.Error(err, "not a job of its kind", "job", key)
		return 0, false
	}
	wd.mu.Lock()
	last := w.last
	wd.mu.Unlock()
	jd, err := wd.host.JudgeLive(ctx, fj, pods, last)
	wd.mu.Lock()
	w.stale = err != nil
	if err == nil {
		w.last = jd
	}
	wd.mu.Unlock()
	if err != nil {
		wd.log.Info("cannot judge the unschedulable job; looking again later", "job", key, "error", err.Error())
		return Recheck, false
	}
	hopeless, f := Cause(jd.Result, wd.set.OnDemand)
	if hopeless {
		if left, ok := wd.Settling(jd.Result.Report); ok {
			return left, false
		}
		wd.fail(j, key, jd.Result.Report, "hopeless")
		return 0, true
	}
	return wd.noteWaiting(obj, j, key, w, jd.Result.Report.Subject, wd.waitingCause(w, f), since)
}

// waitingCause is what a waiting job waits for: f, the cause just judged,
// where its rule differs from the last one or the last is older than
// LiveEvery (the use of the busy nodes it names changes with every pod
// bound or finished; what the job waits for is written only when it
// changes), else the last one.
func (wd *Watchdog) waitingCause(w *watched, f verdict.Finding) verdict.Finding {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if w.cause.Rule != f.Rule || wd.clk.Since(w.liveAt) >= LiveEvery {
		w.liveAt, w.cause = wd.clk.Now(), f
	}
	return w.cause
}

// noteWaiting fails a job waiting past its pending timeout, and otherwise
// writes what it waits for when that changed.
func (wd *Watchdog) noteWaiting(obj client.Object, j kubeflow.Job, key string, w *watched, subject string, cause verdict.Finding, since time.Time) (time.Duration, bool) {
	timeout, err := JobDuration(obj, contract.AnnotationPendingTimeout, wd.set.Timeout)
	if err != nil {
		wd.log.Info("ignoring bad annotation", "job", key, "error", err.Error())
	}
	waited := wd.clk.Since(since)
	if timeout > 0 && waited >= timeout {
		wd.fail(j, key, TimeoutReport(subject, cause, waited, timeout), "pending-timeout")
		return 0, true
	}
	// Only a change of cause is written (the cache may not show this
	// replica's last write yet).
	if v := WaitingFor(cause); obj.GetAnnotations()[contract.AnnotationWaitingFor] != v {
		wd.mu.Lock()
		fresh := w.written != v
		w.written = v
		wd.mu.Unlock()
		if fresh {
			wd.host.WantWaitingFor(obj, j.Kind(), &cause)
		}
	}
	next := Recheck
	if timeout > 0 && timeout-waited < next {
		next = timeout - waited
	}
	return next, false
}

// fail stops watching the job and fails it through the gang path.
func (wd *Watchdog) fail(j kubeflow.Job, key string, rep verdict.Report, why string) {
	wd.Unwatch(key)
	wd.log.Info("failing an unschedulable job", "job", key, "why", why, "rules", strings.Join(rep.RuleIDs(), ","))
	wd.host.Fail(j, rep)
}

// watch is the watched job at key, o's, new when o replaced it.
func (wd *Watchdog) watch(key string, o client.Object, kind string) *watched {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	p := wd.jobs[key]
	if p == nil || p.uid != o.GetUID() {
		p = &watched{kind: kind, ns: o.GetNamespace(), name: o.GetName(), uid: o.GetUID(), seen: wd.clk.Now()}
		wd.jobs[key] = p
	}
	return p
}

// Unwatch forgets the job at key, namespace/Kind/name (decided, running,
// deleted, opted out).
func (wd *Watchdog) Unwatch(key string) {
	wd.mu.Lock()
	delete(wd.jobs, key)
	wd.mu.Unlock()
}

// Watching is the last judgement of the job at key and whether the job is
// watched (its pods unschedulable, no verdict yet).
func (wd *Watchdog) Watching(key string) (*Judgement, bool) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	w, ok := wd.jobs[key]
	if !ok {
		return nil, false
	}
	return w.last, true
}

// NoteNodeChange remembers when a node's MIG state last changed, and when
// any node last lost GPU devices it advertised or changed readiness (a
// device plugin re-registering, a node restarting).
func (wd *Watchdog) NoteNodeChange(o, n *corev1.Node) {
	if gpuTransient(o, n) {
		wd.mu.Lock()
		wd.transientAt = wd.clk.Now()
		wd.mu.Unlock()
	}
	for _, l := range migLabels {
		if o.Labels[l] != n.Labels[l] {
			wd.mu.Lock()
			wd.migChanged[n.Name] = wd.clk.Now()
			for name, at := range wd.migChanged {
				if wd.clk.Since(at) > MIGSettle {
					delete(wd.migChanged, name)
				}
			}
			wd.mu.Unlock()
			return
		}
	}
}

// Settling: every fail finding of rep is MIG_LAYOUT_INVALID about nodes
// whose MIG state changed within MIGSettle (the device plugin may not have
// re-registered yet); left is how long until the last of them settles.
//
// Any hopeless verdict also waits while a node lost GPU devices or
// changed readiness within TransientSettle: a device plugin that
// re-registers advertises 0 devices for a moment, and a restarting node is
// NotReady; either can make a shape look absent that is only away for
// seconds.
func (wd *Watchdog) Settling(rep verdict.Report) (left time.Duration, ok bool) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if l := wd.until(wd.transientAt.Add(TransientSettle)); l > 0 {
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
			at, seen := wd.migChanged[n]
			l := wd.until(at.Add(MIGSettle))
			if !seen || l <= 0 {
				return 0, false
			}
			left = max(left, l)
		}
	}
	return left, left > 0
}

// PodsChanged marks the last judgement of the watched jobs named job in
// ns stale: their next node event reconciles them in full.
func (wd *Watchdog) PodsChanged(ns, job string) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	for _, k := range wd.set.Kinds {
		if p := wd.jobs[ns+"/"+k+"/"+job]; p != nil {
			p.stale = true
		}
	}
}

// dueJob is a watched job past its grace, with its last judgement (nil:
// none, or stale).
type dueJob struct {
	req  reconcile.Request
	last *Judgement
}

// due are the watched jobs of kind past their grace.
func (wd *Watchdog) due(kind string) []dueJob {
	now := wd.clk.Now()
	var out []dueJob
	wd.mu.Lock()
	for _, p := range wd.jobs {
		if p.kind == kind && !now.Before(p.due) {
			last := p.last
			if p.stale {
				last = nil
			}
			out = append(out, dueJob{reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.ns, Name: p.name}}, last})
		}
	}
	wd.mu.Unlock()
	return out
}

// dueRequests are the requests of the jobs that pass keep, sorted.
func dueRequests(jobs []dueJob, keep func(dueJob) bool) []reconcile.Request {
	var out []reconcile.Request
	for _, j := range jobs {
		if keep(j) {
			out = append(out, j.req)
		}
	}
	slices.SortFunc(out, func(a, b reconcile.Request) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// AffectedByNode are the watched jobs of kind that the node event just
// applied to the node model may fail: those without a current judgement,
// and those the model now finds hopeless. The model is judged outside
// the watchdog's lock.
func (wd *Watchdog) AffectedByNode(kind string) []reconcile.Request {
	jobs := wd.due(kind)
	if len(jobs) == 0 {
		return nil
	}
	judge := wd.host.ModelJudge()
	return dueRequests(jobs, func(j dueJob) bool { return j.last == nil || judge(j.last) })
}

// AffectedByDevices are the watched jobs of kind that a change of the
// published devices (a ResourceSlice, a DeviceTaintRule) may judge
// differently: those past their grace whose last judgement saw DRA pod
// sets, or that have no current one. The others do not read the slices.
func (wd *Watchdog) AffectedByDevices(kind string) []reconcile.Request {
	return dueRequests(wd.due(kind), func(j dueJob) bool { return j.last == nil || UsesDRA(j.last.Workload) })
}
