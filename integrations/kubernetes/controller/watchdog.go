package controller

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

// watchdog is the Pending watchdog (pending.go): the one owner of the
// watched jobs' state (when each was first seen unschedulable, its grace,
// its last judgements, what it waits for) and of the nodes' recent
// transients. The job reconciler runs its step for every gated job
// without a verdict; the router asks it which jobs a node or device
// change may fail. What it reads of the cluster and what it writes go
// through its host; its time is its clock's.
type watchdog struct {
	host     watchdogHost
	clk      clock.PassiveClock
	log      logr.Logger
	grace    time.Duration // pending grace, unless the job sets its own
	timeout  time.Duration // pending timeout, unless the job sets its own (0: none)
	onDemand bool          // MIG layouts change on demand (RECONFIGURABLE waits)
	kinds    []string      // every job kind's name

	mu   sync.Mutex
	jobs map[string]*pendingJob // by namespace/kind/name
	// migChanged: when each node's MIG labels last changed (noteNodeChange).
	migChanged map[string]time.Time
	// transientAt: when a node last lost GPU devices or changed readiness.
	transientAt time.Time
}

// watchdogHost is what the watchdog asks of the rest of the controller.
type watchdogHost interface {
	// jobPods are the cached pods of obj's job that fit its spec.
	jobPods(ctx context.Context, obj client.Object) ([]*corev1.Pod, error)
	// fullJob reads obj whole (the cache strips its pod templates); nil
	// when it is gone or was replaced.
	fullJob(ctx context.Context, k kubeflow.Kind, obj client.Object) (client.Object, error)
	// judgeLive judges j with pods as `rankgate diagnose job` does, on the
	// live cluster; last, its previous judgement, is answered again when
	// neither the workload nor the cluster changed.
	judgeLive(ctx context.Context, j job, pods []*corev1.Pod, last *lastJudgement) (schedule.Result, schedule.Workload, *lastJudgement, error)
	// modelJudge is a judge of workloads on the node model as it is now,
	// with no pod's usage (whether a node event made a job hopeless).
	modelJudge() func(*judged) (hopeless bool)
	// wantWaitingFor asks for the job's rankgate.io/waiting-for to be
	// cause (nil: removed).
	wantWaitingFor(obj client.Object, kind string, cause *verdict.Finding)
	// fail fails j with rep through the gang path (record, then apply).
	fail(j job, rep verdict.Report)
}

func newWatchdog(host watchdogHost, clk clock.PassiveClock, log logr.Logger, opts *Options) *watchdog {
	w := &watchdog{host: host, clk: clk, log: log, timeout: opts.PendingTimeout, onDemand: opts.MIGReconfigure == MIGReconfigureOnDemand}
	if opts.PendingGrace != nil {
		w.grace = *opts.PendingGrace
	}
	for _, k := range kubeflow.All() {
		w.kinds = append(w.kinds, k.GVK().Kind)
	}
	return w
}

func (wd *watchdog) now() time.Time                  { return wd.clk.Now() }
func (wd *watchdog) since(t time.Time) time.Duration { return wd.clk.Since(t) }
func (wd *watchdog) until(t time.Time) time.Duration { return t.Sub(wd.clk.Now()) }

// step is the watchdog's step for one gated job without a verdict (from
// the job reconciler). It returns when to look again (0: on events only)
// and whether the job was failed.
func (wd *watchdog) step(ctx context.Context, k kubeflow.Kind, obj client.Object) (time.Duration, bool) {
	key := obj.GetNamespace() + "/" + k.GVK().Kind + "/" + obj.GetName()
	j := wrap(obj)
	pods, err := wd.host.jobPods(ctx, obj)
	if err != nil {
		wd.log.Error(err, "listing the job's pods for the Pending watchdog", "job", key)
		return time.Second, false
	}
	wd.mu.Lock()
	w := wd.jobs[key]
	wd.mu.Unlock()
	seen := wd.now()
	if w != nil {
		seen = w.seen
	}
	since, any := unschedulableSince(pods, seen)
	if !any || j.Suspended() || obj.GetDeletionTimestamp() != nil {
		wd.unwatch(key)
		if _, ok := obj.GetAnnotations()[contract.AnnotationWaitingFor]; ok {
			wd.host.wantWaitingFor(obj, k.GVK().Kind, nil)
		}
		return 0, false
	}
	w = wd.watch(key, obj, k.GVK().Kind)
	grace, err := jobDuration(obj, contract.AnnotationPendingGrace, wd.grace)
	if err != nil {
		wd.log.Info("ignoring bad annotation", "job", key, "error", err.Error())
	}
	wd.mu.Lock()
	w.due = since.Add(grace)
	wd.mu.Unlock()
	if left := wd.until(since.Add(grace)); left > 0 {
		return left, false
	}
	return wd.judge(ctx, k, obj, key, w, pods, since)
}

// judge judges a job whose pods have been unschedulable past their
// grace: a hopeless job fails; a waiting one is told what it waits for,
// and fails at its pending timeout. It returns when to look again, and
// whether the job was failed.
func (wd *watchdog) judge(ctx context.Context, k kubeflow.Kind, obj client.Object, key string, w *pendingJob, pods []*corev1.Pod, since time.Time) (time.Duration, bool) {
	j := wrap(obj)
	full, err := wd.host.fullJob(ctx, k, obj)
	if err != nil {
		wd.log.Error(err, "reading the job for the Pending watchdog", "job", key)
		return time.Second, false
	}
	if full == nil {
		return 0, false
	}
	wd.mu.Lock()
	last := w.last
	wd.mu.Unlock()
	res, wl, last, err := wd.host.judgeLive(ctx, wrap(full), pods, last)
	wd.mu.Lock()
	w.judged, w.last = nil, last
	if err == nil {
		w.judged = &judged{w: wl, sig: signature(wl)}
	}
	wd.mu.Unlock()
	if err != nil {
		wd.log.Info("cannot judge the unschedulable job; looking again later", "job", key, "error", err.Error())
		return waitRecheck, false
	}
	hopeless, f := pendingCause(res, wd.onDemand)
	if hopeless {
		if left, ok := wd.settling(res.Report); ok {
			return left, false
		}
		wd.fail(j, key, res.Report, "hopeless")
		return 0, true
	}
	return wd.noteWaiting(obj, j, key, w, res.Report.Subject, wd.waitingCause(w, f), since)
}

// waitingCause is what a waiting job waits for: f, the cause just judged,
// where its rule differs from the last one or the last is older than
// liveEvery (the use of the busy nodes it names changes with every pod
// bound or finished; what the job waits for is written only when it
// changes), else the last one.
func (wd *watchdog) waitingCause(w *pendingJob, f verdict.Finding) verdict.Finding {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if w.cause.Rule != f.Rule || wd.since(w.liveAt) >= liveEvery {
		w.liveAt, w.cause = wd.now(), f
	}
	return w.cause
}

// noteWaiting fails a job waiting past its pending timeout, and otherwise
// writes what it waits for when that changed.
func (wd *watchdog) noteWaiting(obj client.Object, j job, key string, w *pendingJob, subject string, cause verdict.Finding, since time.Time) (time.Duration, bool) {
	timeout, err := jobDuration(obj, contract.AnnotationPendingTimeout, wd.timeout)
	if err != nil {
		wd.log.Info("ignoring bad annotation", "job", key, "error", err.Error())
	}
	waited := wd.since(since)
	if timeout > 0 && waited >= timeout {
		wd.fail(j, key, timeoutReport(subject, cause, waited, timeout), "pending-timeout")
		return 0, true
	}
	// Only a change of cause is written (the cache may not show this
	// replica's last write yet).
	if v := waitingFor(cause); obj.GetAnnotations()[contract.AnnotationWaitingFor] != v {
		wd.mu.Lock()
		fresh := w.written != v
		w.written = v
		wd.mu.Unlock()
		if fresh {
			wd.host.wantWaitingFor(obj, j.Kind(), &cause)
		}
	}
	next := waitRecheck
	if timeout > 0 && timeout-waited < next {
		next = timeout - waited
	}
	return next, false
}

// fail stops watching the job and fails it through the gang path.
func (wd *watchdog) fail(j job, key string, rep verdict.Report, why string) {
	wd.unwatch(key)
	wd.log.Info("failing an unschedulable job", "job", key, "why", why, "rules", strings.Join(rep.RuleIDs(), ","))
	wd.host.fail(j, rep)
}

// watch is the watched job at key, o's, new when o replaced it.
func (wd *watchdog) watch(key string, o client.Object, kind string) *pendingJob {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if wd.jobs == nil {
		wd.jobs = map[string]*pendingJob{}
	}
	p := wd.jobs[key]
	if p == nil || p.uid != o.GetUID() {
		p = &pendingJob{kind: kind, ns: o.GetNamespace(), name: o.GetName(), uid: o.GetUID(), seen: wd.now()}
		wd.jobs[key] = p
	}
	return p
}

// unwatch forgets the job at key (decided, running, deleted, opted out).
func (wd *watchdog) unwatch(key string) {
	wd.mu.Lock()
	delete(wd.jobs, key)
	wd.mu.Unlock()
}

// noteNodeChange remembers when a node's MIG state last changed, and when
// any node last lost GPU devices it advertised or changed readiness (a
// device plugin re-registering, a node restarting).
func (wd *watchdog) noteNodeChange(o, n *corev1.Node) {
	if gpuTransient(o, n) {
		wd.mu.Lock()
		wd.transientAt = wd.now()
		wd.mu.Unlock()
	}
	for _, l := range migLabels {
		if o.Labels[l] != n.Labels[l] {
			wd.mu.Lock()
			if wd.migChanged == nil {
				wd.migChanged = map[string]time.Time{}
			}
			wd.migChanged[n.Name] = wd.now()
			for name, at := range wd.migChanged {
				if wd.since(at) > migSettle {
					delete(wd.migChanged, name)
				}
			}
			wd.mu.Unlock()
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
func (wd *watchdog) settling(rep verdict.Report) (left time.Duration, ok bool) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if l := wd.until(wd.transientAt.Add(transientSettle)); l > 0 {
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
			l := wd.until(at.Add(migSettle))
			if !seen || l <= 0 {
				return 0, false
			}
			left = max(left, l)
		}
	}
	return left, left > 0
}

// podsChanged forgets the kept workload of the watched jobs named job in
// ns: their next node event reconciles them in full.
func (wd *watchdog) podsChanged(ns, job string) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	for _, k := range wd.kinds {
		if p := wd.jobs[ns+"/"+k+"/"+job]; p != nil {
			p.judged = nil
		}
	}
}

// dueJob is a watched job past its grace, with its kept judgement.
type dueJob struct {
	req    reconcile.Request
	judged *judged
}

// due are the watched jobs of kind past their grace.
func (wd *watchdog) due(kind string) []dueJob {
	now := wd.now()
	var out []dueJob
	wd.mu.Lock()
	for _, p := range wd.jobs {
		if p.kind == kind && !now.Before(p.due) {
			out = append(out, dueJob{reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.ns, Name: p.name}}, p.judged})
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

// affectedByNode are the watched jobs of kind that the node event just
// applied to the model may fail (see the top of model.go): those without
// a kept judgement, and those the model now finds hopeless. The model is
// judged outside the watchdog's lock.
func (wd *watchdog) affectedByNode(kind string) []reconcile.Request {
	jobs := wd.due(kind)
	if len(jobs) == 0 {
		return nil
	}
	judge := wd.host.modelJudge()
	return dueRequests(jobs, func(j dueJob) bool { return j.judged == nil || judge(j.judged) })
}

// affectedByDevices are the watched jobs of kind that a change of the
// published devices (a ResourceSlice, a DeviceTaintRule) may judge
// differently: those past their grace whose last judgement saw DRA pod
// sets, or that have none since their pods changed. The others do not
// read the slices.
func (wd *watchdog) affectedByDevices(kind string) []reconcile.Request {
	return dueRequests(wd.due(kind), func(j dueJob) bool { return j.judged == nil || usesDRA(j.judged.w) })
}
