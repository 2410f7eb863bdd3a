package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/apicalls"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/leader"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource/dra"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	gateserver "github.com/rankgate/rankgate/integrations/kubernetes/gate/server"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

var _ gateserver.Backend = (*gateBackend)(nil)

// gateBackend is the gate's backend (gateserver.Backend): it admits a
// rank before its report is read, adds each report to its gang and
// answers it (reports in, answers out, through the gang store). It owns
// what the gate remembers of pods: those found to be no rank (so that
// each is read once). It writes nothing but the gate's own Events (a
// pod refused as a second claim of a rank, or as not its job's): it asks
// the writes for the gang's progress and decision.
type gateBackend struct {
	cache, api client.Reader // cached and uncached reads
	host       gateHost
	jobs       jobView
	gangs      gangAsks
	book       *leader.Book
	rec        events.EventRecorder
	clk        clock.Clock
	log        logr.Logger

	notRanks uidSet  // pods read once and found without a job-name label
	misfits  *uidSet // pods noted once as not their job's (shared with the Pending watchdog's reads)
}

// gateHost is what the gate's backend asks of the controller.
type gateHost interface {
	// leading: this replica leads (only the leader holds gangs).
	leading() bool
	// gateReady is nil while this replica answers ranks (it leads, its
	// caches have synced and the verdicts earlier leaders recorded are
	// loaded), else the error ranks get (they retry).
	gateReady() error
	// watches: the kind is installed and watched.
	watches(k kubeflow.Kind) bool
	// checkRestart refuses the report of a pod of an earlier restart of
	// its job, and asks for a later restart's new attempt.
	checkRestart(r rankOf) error
	// draSource is the DRA device source (nil: none).
	draSource() devicesource.Source
}

// gateBackend is c's gate backend.
func (c *Controller) gateBackend() *gateBackend {
	return &gateBackend{cache: c.client, api: c.api, host: c, jobs: c, gangs: c, book: c.w.Book(), rec: c.rec, clk: c.clock(), log: c.log, misfits: &c.unexpected}
}

func (c *Controller) leading() bool { return c.leader.Load() }

func (c *Controller) gateReady() error {
	if !c.leader.Load() {
		return &gate.Error{HTTPStatus: 503, Code: gate.CodeNotLeader, RetryAfter: time.Second,
			Message: fmt.Sprintf("replica %s is not the leader; the gate service may route to any replica, retry", c.opts.Identity)}
	}
	if !c.synced.Load() {
		return gate.Errorf(gate.CodeUnavailable, "controller starting: caches not synced")
	}
	if !c.w.Recovered() {
		why := "controller starting: loading recorded verdicts"
		if e := c.w.SweepError(); e != "" {
			why += ": " + e
		}
		return gate.Errorf(gate.CodeUnavailable, "%s", why)
	}
	return nil
}

// rankOf is a reporting pod resolved to its job and rank.
type rankOf struct {
	pod  *corev1.Pod
	job  job
	rank int
}

// Admit implements gateserver.Backend: the sender must be a rank of an
// opted-in job, and this replica the leader, before its report is read.
func (b *gateBackend) Admit(ctx context.Context, id gateserver.Identity) (context.Context, error) {
	r, err := b.resolve(ctx, id, false)
	if err != nil {
		return nil, err
	}
	return context.WithValue(ctx, admittedKey{}, admitted{id: id, r: r}), nil
}

// admitted is what Admit resolved, for the Report of the same request.
type admitted struct {
	id gateserver.Identity
	r  rankOf
}

type admittedKey struct{}

// resolveReport is the sender's rank: Admit's, when it resolved this
// identity for the request (the server calls Admit just before it reads
// the body, then Report) and this replica still leads, else resolved now.
func (b *gateBackend) resolveReport(ctx context.Context, id gateserver.Identity) (rankOf, error) {
	if a, ok := ctx.Value(admittedKey{}).(admitted); ok && a.id == id && b.host.leading() {
		return a.r, nil
	}
	return b.resolve(ctx, id, false)
}

// GateReportsRead is how many report bodies the gate has read: only
// admitted ranks move it.
func (c *Controller) GateReportsRead() int64 { return c.gate.ReportsRead() }

// Report implements gateserver.Backend.
func (b *gateBackend) Report(ctx context.Context, id gateserver.Identity, req *gate.ReportRequest, wait time.Duration) (*gate.Response, error) {
	r, err := b.resolveReport(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := b.host.checkRestart(r); err != nil {
		return nil, err
	}
	node := r.pod.Spec.NodeName
	if node == "" {
		node = req.Node
	}
	rr := preflight.RankReport{
		Rank: r.rank, Pod: r.pod.Name, Node: node,
		DriverVersion: req.DriverVersion, CUDADriverVersion: req.CUDADriverVersion, Report: req.Report,
		Net: rankNet(req.Net), NCCLVersion: req.NCCLVersion,
	}
	// A rank's own report names no DRA device: only the DRA source does.
	for i := range rr.Report.Devices {
		rr.Report.Devices[i].DRA = ""
	}
	b.againstAllocation(ctx, r.pod, &rr)
	if d, ok := b.decided(r.job); ok {
		// A DRA rank's gang may have been decided from its allocation,
		// before its own report: that report is still judged.
		if dra.UsesClaims(r.pod) {
			if own := b.ownReportFails(r, rr, d); own != nil {
				return b.answerDecided(r, own), nil
			}
		}
		return b.answerDecided(r, d), nil
	}
	g := b.gangs.ensureGang(r.job)
	if err := b.refuseUnexpected(g, r); err != nil {
		return nil, err
	}
	now := b.clk.Now()
	b.gangs.startClock(g, now)
	isNew, decide, why, err := b.addReport(ctx, g, r, rr, now)
	if err != nil {
		return nil, err
	}
	if isNew {
		b.gangs.touchProgress(g.UID(), false)
	}
	b.log.V(1).Info("rank reported", "job", g.Key(), "rank", r.rank, "pod", r.pod.Name, "node", node, "verdict", req.Report.Verdict, "new", isNew)
	if decide {
		b.gangs.askDecide(g, decision.Ask{Why: why})
	}
	g.Wait(ctx, b.clk, wait)
	return response(g, r.rank), nil
}

// Verdict implements gateserver.Backend. Besides the ranks, the launcher
// of an MPIJob that runs no rank may wait for the verdict (rank -1): `rankgate
// launch --gang` starts mpirun only after a pass.
func (b *gateBackend) Verdict(ctx context.Context, id gateserver.Identity, wait time.Duration) (*gate.Response, error) {
	r, err := b.resolve(ctx, id, true)
	if err != nil {
		return nil, err
	}
	if err := b.host.checkRestart(r); err != nil {
		return nil, err
	}
	if d, ok := b.decided(r.job); ok {
		return b.answerDecided(r, d), nil
	}
	g := b.gangs.ensureGang(r.job)
	g.Wait(ctx, b.clk, wait)
	return response(g, r.rank), nil
}

func (b *gateBackend) answerDecided(r rankOf, d *decision.Decision) *gate.Response {
	resp := &gate.Response{Job: decision.JobKey(r.job), Rank: r.rank, Expected: kubeflow.RankPods(r.job)}
	fillDecided(resp, d)
	return resp
}

// decided returns the job's verdict: the in-memory gang's, else the one
// recorded on the job (by this or an earlier leader).
func (b *gateBackend) decided(j job) (*decision.Decision, bool) {
	if g := b.gangs.openGang(j.Object().GetUID()); g != nil {
		if d := g.Verdict(); d != nil {
			return d, true
		}
	}
	if d, ok := decision.FromJob(j.Object()); ok {
		return d, true
	}
	return b.book.Pending(j.Object().GetUID())
}

// resolve finds the authenticated pod, its job and its rank, refusing what
// is not a rank of an opted-in job. With launcher, the MPIJob launcher
// that runs no rank is accepted too, as rank -1.
func (b *gateBackend) resolve(ctx context.Context, id gateserver.Identity, launcher bool) (rankOf, error) {
	if err := b.host.gateReady(); err != nil {
		return rankOf{}, err
	}
	pod, err := b.reportingPod(ctx, id)
	if err != nil {
		return rankOf{}, err
	}
	ref, ok, err := b.jobs.jobOf(ctx, pod)
	if err != nil {
		return rankOf{}, gate.Errorf(gate.CodeUnavailable, "%v", err)
	}
	if !ok {
		return rankOf{}, gate.Errorf(gate.CodeNotARank, "pod %s/%s is not controlled by a %s", pod.Namespace, pod.Name, kubeflow.KindList("or"))
	}
	kind, name, uid := ref.kind, ref.name, string(ref.uid)
	k, _ := kubeflow.ByName(kind)
	if !b.host.watches(k) {
		return rankOf{}, gate.Errorf(gate.CodeNotARank, "%s is not installed or not watched by this controller", kind)
	}
	obj := k.New()
	if err := apicalls.GetFresh(ctx, b.cache, b.api, types.NamespacedName{Namespace: pod.Namespace, Name: name}, obj, uid); err != nil {
		if apierrors.IsNotFound(err) {
			return rankOf{}, gate.Errorf(gate.CodeNotARank, "%s %s/%s of pod %s does not exist", kind, pod.Namespace, name, pod.Name)
		}
		return rankOf{}, gate.Errorf(gate.CodeUnavailable, "reading %s %s/%s: %v", kind, pod.Namespace, name, err)
	}
	if string(obj.GetUID()) != uid {
		return rankOf{}, gate.Errorf(gate.CodeNotARank, "pod %s/%s belongs to an earlier %s named %s", pod.Namespace, pod.Name, kind, name)
	}
	j := kubeflow.MustFromObject(obj)
	if in, err := b.jobs.optedIn(ctx, obj); err != nil {
		return rankOf{}, gate.Errorf(gate.CodeUnavailable, "%v", err)
	} else if !in {
		return rankOf{}, gate.Errorf(gate.CodeNotOptedIn, "%s %s/%s is not opted in to the gate: label it (or its namespace) %s=enabled, or remove the rankgate init container", kind, pod.Namespace, name, contract.KeyGate)
	}
	rank, err := kubeflow.RankOf(j, pod)
	if launcher && errors.Is(err, kubeflow.ErrNoRank) {
		return rankOf{pod: pod, job: j, rank: -1}, nil
	}
	if err != nil {
		return rankOf{}, gate.Errorf(gate.CodeNotARank, "%v", err)
	}
	return rankOf{pod: pod, job: j, rank: rank}, nil
}

func (c *Controller) watches(k kubeflow.Kind) bool {
	for _, w := range c.kinds {
		if w.GVK() == k.GVK() {
			return true
		}
	}
	return false
}

// optedIn: the job's own setting wins, then its namespace's label. A job
// that another watched job stands for (the JobSet of a TrainJob) is never
// gated on its own: its ranks are that job's.
func (c *Controller) optedIn(ctx context.Context, o client.Object) (bool, error) {
	if c.representedBy(o) != "" {
		return false, nil
	}
	s := gateSetting(o)
	if enabled(s) {
		return true, nil
	}
	if contract.GateDisabled(s) {
		return false, nil
	}
	ns := &corev1.Namespace{}
	if err := c.client.Get(ctx, types.NamespacedName{Name: o.GetNamespace()}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading namespace %s: %w", o.GetNamespace(), err)
	}
	return enabled(ns.Labels[contract.KeyGate]), nil
}

// ensureGang returns the job's gang, creating it (and arming its deadline
// when the job records a first report) if needed.
func (c *Controller) ensureGang(j job) *gang {
	o := j.Object()
	g := c.gangs.Get(o.GetUID())
	if g == nil {
		timeout, err := decision.JobTimeout(o, c.opts.GangTimeout)
		if err != nil {
			c.log.Info("ignoring bad annotation", "job", decision.JobKey(j), "error", err.Error())
		}
		var created bool
		if g, created = c.gangs.Ensure(gangSpec(j, timeout)); created {
			c.warnGateBound(j, g.Expected())
		}
	}
	if r := c.w.Book().ForJob(o, j.Kind(), c.opts.GangTimeout); r.Current() == nil {
		c.touchProgress(g.UID(), true) // its Gang, before the verdict needs it
	}
	c.adoptFirstReport(g, o)
	return g
}

// startClock sets the gang's first-report time (the earliest known) and
// its deadline. The Gang's progress write records the time (within
// progressEvery), so that a restarted controller keeps the same deadline.
func (c *Controller) startClock(g *gang, at time.Time) {
	// After a restart, give waiting ranks time to re-send before missing
	// ranks are declared missing.
	var grace time.Time
	if since := c.leaderSince.Load(); since > 0 {
		grace = time.Unix(0, since).Add(c.opts.ResendGrace)
	}
	// The deadline is a requeue of the gang's writes (package leader).
	if deadline := g.Start(at, grace); !deadline.IsZero() {
		c.w.ArmDeadline(g.UID(), deadline)
	}
}

// addReport adds r's report to g unless another pod that still exists
// holds the rank. Anyone who may create pods in the job's namespace can
// make one that claims a rank (the job's controller owner reference and
// rank labels are plain metadata): the first pod to report a rank keeps it
// while it exists and runs, and a second one is refused, named in the log
// and in an Event on the job, and cannot fail the gang. A holder that is
// gone, terminated or being deleted gives the rank up (a pod the operator
// re-created).
func (b *gateBackend) addReport(ctx context.Context, g *gang, r rankOf, rr preflight.RankReport, now time.Time) (isNew, decide bool, why decision.Trigger, err error) {
	for attempt := 0; ; attempt++ {
		isNew, ready, h := g.Add(rr, string(r.pod.UID), now)
		if h == nil {
			why, decide := decision.ReadyTrigger(ready)
			return isNew, decide, why, nil
		}
		alive, err := b.podRuns(ctx, r.pod.Namespace, h.Pod, h.UID)
		if err != nil {
			return false, false, 0, gate.Errorf(gate.CodeUnavailable, "reading pod %s/%s, holder of rank %d: %v", r.pod.Namespace, h.Pod, r.rank, err)
		}
		if alive || attempt >= 2 {
			return false, false, 0, b.refuseClaim(g, r, h)
		}
		g.Release(r.rank, h.UID)
	}
}

// refuseClaim is the answer to a pod claiming a rank another pod holds.
func (b *gateBackend) refuseClaim(g *gang, r rankOf, h *gangstore.Holder) error {
	msg := fmt.Sprintf("rank %d of %s is held by pod %s (uid %s), which reported it first and still runs; pod %s (uid %s) claims the same rank and is refused: a pod the job's operator did not create, or one that replaces a pod still running",
		r.rank, g.Key(), h.Pod, h.UID, r.pod.Name, r.pod.UID)
	if g.FirstRefusal(r.pod.UID) {
		b.log.Info("refused a second pod for a rank another pod holds", "job", g.Key(), "rank", r.rank, "pod", r.pod.Name, "podUID", string(r.pod.UID), "holder", h.Pod, "holderUID", h.UID)
		b.rec.Eventf(r.job.Object(), r.pod, corev1.EventTypeWarning, contract.ReasonRankClaimedTwice, "Gate", "%s", msg)
	}
	return gate.Errorf(gate.CodeForbidden, "%s", msg)
}

// podRuns says whether pod ns/name with uid exists, is not being deleted
// and has not terminated (read from the API server: a holder the cache
// does not show yet must not lose its rank).
func (b *gateBackend) podRuns(ctx context.Context, ns, name, uid string) (bool, error) {
	p := &corev1.Pod{}
	err := b.api.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return string(p.UID) == uid && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed, nil
}

// reportingPod reads the pod id speaks for: from the cache, else (not
// there yet, or an older pod of the same name there) from the API server,
// unless the pod was read before and had no job-name label. A pod without
// that label is no rank.
func (b *gateBackend) reportingPod(ctx context.Context, id gateserver.Identity) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	key := types.NamespacedName{Namespace: id.Namespace, Name: id.Pod}
	err := b.cache.Get(ctx, key, pod)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, gate.Errorf(gate.CodeUnavailable, "reading pod %s/%s: %v", id.Namespace, id.Pod, err)
	}
	if err != nil || string(pod.UID) != id.PodUID {
		if b.notRanks.has(types.UID(id.PodUID)) {
			return nil, notARank(id.Namespace, id.Pod)
		}
		if err := b.api.Get(ctx, key, pod); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, gate.Errorf(gate.CodeForbidden, "pod %s/%s does not exist", id.Namespace, id.Pod)
			}
			return nil, gate.Errorf(gate.CodeUnavailable, "reading pod %s/%s: %v", id.Namespace, id.Pod, err)
		}
	}
	if string(pod.UID) != id.PodUID {
		return nil, gate.Errorf(gate.CodeForbidden, "the token was issued to an earlier pod named %s/%s (uid %s, now %s)", id.Namespace, id.Pod, id.PodUID, pod.UID)
	}
	if pod.Labels[LabelJobName] == "" {
		b.notRanks.add(pod.UID)
		return nil, notARank(id.Namespace, id.Pod)
	}
	return pod, nil
}

// refuseUnexpected refuses the report of a rank's pod that does not fit
// the job's spec (podFits): it must not decide the gang. A rank another
// pod already holds is refused as a second claim (refuseClaim).
func (b *gateBackend) refuseUnexpected(g *gang, r rankOf) error {
	why := podFits(r.job, r.pod)
	if why == nil {
		return nil
	}
	if h, held := g.HolderOf(r.rank); held && h.UID != string(r.pod.UID) {
		return b.refuseClaim(g, r, &h)
	}
	msg := fmt.Sprintf("pod %s (uid %s) claims rank %d of %s but is not a pod its operator creates (%v): its report is refused", r.pod.Name, r.pod.UID, r.rank, g.Key(), why)
	if b.misfits.first(r.pod.UID) {
		b.log.Info("refused the report of a pod that is not one of the job's", "job", g.Key(), "rank", r.rank, "pod", r.pod.Name, "podUID", string(r.pod.UID), "why", why.Error())
		b.rec.Eventf(r.job.Object(), r.pod, corev1.EventTypeWarning, contract.ReasonUnexpectedPod, "Gate", "%s", msg)
	}
	return gate.Errorf(gate.CodeForbidden, "%s", msg)
}

// againstAllocation adds to rr, the rank's own report, the disagreement
// with its pod's DRA allocation, if any.
func (b *gateBackend) againstAllocation(ctx context.Context, pod *corev1.Pod, rr *preflight.RankReport) {
	if !dra.UsesClaims(pod) {
		return
	}
	src := b.host.draSource()
	if src == nil {
		return
	}
	alloc, err := src.Rank(ctx, pod, rr.Rank)
	if err != nil || !alloc.Known {
		return
	}
	if f := devicesource.Disagreement(*rr, alloc.Report); f != nil {
		findings := append(append([]verdict.Finding(nil), rr.Report.Findings...), *f)
		rep := verdict.NewReport(rr.Report.Subject, findings)
		rep.Mode, rep.Devices = rr.Report.Mode, rr.Report.Devices
		rr.Report = rep
	}
}

// ownReportFails is the answer to a rank that reports itself after its
// gang was decided, when its own report fails (its devices' health, or
// a disagreement with its allocation) and the verdict does not: that
// rank is answered fail, with the verdict's findings and its own, so that
// it does not start on devices the verdict did not see; nil otherwise.
func (b *gateBackend) ownReportFails(r rankOf, rr preflight.RankReport, d *decision.Decision) *decision.Decision {
	if d.Report.Failed() || !rr.Report.Failed() {
		return nil
	}
	own := make([]string, 0, len(rr.Report.Findings))
	for _, f := range rr.Report.Findings {
		if f.Severity == verdict.SeverityFail {
			own = append(own, f.Rule+": "+f.Message)
		}
	}
	findings := append([]verdict.Finding(nil), d.Report.Findings...)
	findings = append(findings, verdict.Finding{
		Rule: verdict.RuleRankFailed, Severity: verdict.SeverityFail, Ranks: []int{rr.Rank}, Pods: []string{rr.Pod}, Nodes: []string{rr.Node},
		Message: fmt.Sprintf("rank %d (pod %s on %s) reported itself after the gang's verdict (%s) and fails its own rules: %s",
			rr.Rank, rr.Pod, rr.Node, d.Report.Verdict, joinLimited(own, 4)),
		Remediation: "fix the rank's devices as its findings say, then delete its pod so that it starts again",
	})
	out := *d
	out.Report = verdict.NewReport(d.Report.Subject, findings)
	out.Report.Devices = rr.Report.Devices
	b.log.Info("a rank reported after the verdict and fails its own rules; answered fail", "job", decision.JobKey(r.job), "rank", rr.Rank, "pod", rr.Pod,
		"rules", fmt.Sprint(gangstore.RuleIDs(rr.Report, 8)))
	return &out
}
