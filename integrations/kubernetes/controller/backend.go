package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource/dra"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	gateserver "github.com/rankgate/rankgate/integrations/kubernetes/gate/server"
	"github.com/rankgate/rankgate/preflight"
)

var _ gateserver.Backend = (*Controller)(nil)

// rankOf is a reporting pod resolved to its job and rank.
type rankOf struct {
	pod  *corev1.Pod
	job  job
	rank int
}

// Admit implements gateserver.Backend: the sender must be a rank of an
// opted-in job, and this replica the leader, before its report is read.
func (c *Controller) Admit(ctx context.Context, id gateserver.Identity) (context.Context, error) {
	r, err := c.resolve(ctx, id, false)
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
func (c *Controller) resolveReport(ctx context.Context, id gateserver.Identity) (rankOf, error) {
	if a, ok := ctx.Value(admittedKey{}).(admitted); ok && a.id == id && c.leader.Load() {
		return a.r, nil
	}
	return c.resolve(ctx, id, false)
}

// GateReportsRead is how many report bodies the gate has read: only
// admitted ranks move it.
func (c *Controller) GateReportsRead() int64 { return c.gate.ReportsRead() }

// Report implements gateserver.Backend.
func (c *Controller) Report(ctx context.Context, id gateserver.Identity, req *gate.ReportRequest, wait time.Duration) (*gate.Response, error) {
	r, err := c.resolveReport(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := c.checkRestart(r); err != nil {
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
	c.againstAllocation(ctx, r.pod, &rr)
	if d, ok := c.decided(r.job); ok {
		// A DRA rank's gang may have been decided from its allocation,
		// before its own report: that report is still judged.
		if dra.UsesClaims(r.pod) {
			if own := c.ownReportFails(r, rr, d); own != nil {
				return c.answerDecided(r, own), nil
			}
		}
		return c.answerDecided(r, d), nil
	}
	g := c.ensureGang(r.job)
	if err := c.refuseUnexpected(g, r); err != nil {
		return nil, err
	}
	now := c.now()
	c.startClock(g, now)
	isNew, decide, why, err := c.addReport(ctx, g, r, rr, now)
	if err != nil {
		return nil, err
	}
	if isNew {
		c.touchProgress(g.UID(), false)
	}
	c.log.V(1).Info("rank reported", "job", g.Key(), "rank", r.rank, "pod", r.pod.Name, "node", node, "verdict", req.Report.Verdict, "new", isNew)
	if decide {
		c.askDecide(g, ask{why: why})
	}
	g.Wait(ctx, c.clock(), wait)
	return response(g, r.rank), nil
}

// Verdict implements gateserver.Backend. Besides the ranks, the launcher
// of an MPIJob that runs no rank may wait for the verdict (rank -1): `rankgate
// launch --gang` starts mpirun only after a pass.
func (c *Controller) Verdict(ctx context.Context, id gateserver.Identity, wait time.Duration) (*gate.Response, error) {
	r, err := c.resolve(ctx, id, true)
	if err != nil {
		return nil, err
	}
	if err := c.checkRestart(r); err != nil {
		return nil, err
	}
	if d, ok := c.decided(r.job); ok {
		return c.answerDecided(r, d), nil
	}
	g := c.ensureGang(r.job)
	g.Wait(ctx, c.clock(), wait)
	return response(g, r.rank), nil
}

func (c *Controller) answerDecided(r rankOf, d *decision) *gate.Response {
	resp := &gate.Response{Job: jobKey(r.job), Rank: r.rank, Expected: kubeflow.RankPods(r.job)}
	fillDecided(resp, d)
	return resp
}

// decided returns the job's verdict: the in-memory gang's, else the one
// recorded on the job (by this or an earlier leader).
func (c *Controller) decided(j job) (*decision, bool) {
	if g := c.gangs.Get(j.Object().GetUID()); g != nil {
		if d := g.Verdict(); d != nil {
			return d, true
		}
	}
	if d, ok := recordedDecision(j.Object()); ok {
		return d, true
	}
	return c.book.pending(j.Object().GetUID())
}

// resolve finds the authenticated pod, its job and its rank, refusing what
// is not a rank of an opted-in job. With launcher, the MPIJob launcher
// that runs no rank is accepted too, as rank -1.
func (c *Controller) resolve(ctx context.Context, id gateserver.Identity, launcher bool) (rankOf, error) {
	if !c.leader.Load() {
		return rankOf{}, &gate.Error{HTTPStatus: 503, Code: gate.CodeNotLeader, RetryAfter: time.Second,
			Message: fmt.Sprintf("replica %s is not the leader; the gate service may route to any replica, retry", c.opts.Identity)}
	}
	if !c.synced.Load() {
		return rankOf{}, gate.Errorf(gate.CodeUnavailable, "controller starting: caches not synced")
	}
	if !c.recovered.Load() {
		why := "controller starting: loading recorded verdicts"
		if e := c.sweepErr.Load(); e != nil {
			why += ": " + *e
		}
		return rankOf{}, gate.Errorf(gate.CodeUnavailable, "%s", why)
	}
	pod, err := c.reportingPod(ctx, id)
	if err != nil {
		return rankOf{}, err
	}
	ref, ok, err := c.jobOf(ctx, pod)
	if err != nil {
		return rankOf{}, gate.Errorf(gate.CodeUnavailable, "%v", err)
	}
	if !ok {
		return rankOf{}, gate.Errorf(gate.CodeNotARank, "pod %s/%s is not controlled by a %s", pod.Namespace, pod.Name, kubeflow.KindList("or"))
	}
	kind, name, uid := ref.kind, ref.name, string(ref.uid)
	k, _ := kubeflow.ByName(kind)
	if !c.watches(k) {
		return rankOf{}, gate.Errorf(gate.CodeNotARank, "%s is not installed or not watched by this controller", kind)
	}
	obj := k.New()
	if err := c.getFresh(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, obj, uid); err != nil {
		if apierrors.IsNotFound(err) {
			return rankOf{}, gate.Errorf(gate.CodeNotARank, "%s %s/%s of pod %s does not exist", kind, pod.Namespace, name, pod.Name)
		}
		return rankOf{}, gate.Errorf(gate.CodeUnavailable, "reading %s %s/%s: %v", kind, pod.Namespace, name, err)
	}
	if string(obj.GetUID()) != uid {
		return rankOf{}, gate.Errorf(gate.CodeNotARank, "pod %s/%s belongs to an earlier %s named %s", pod.Namespace, pod.Name, kind, name)
	}
	j := wrap(obj)
	if in, err := c.optedIn(ctx, obj); err != nil {
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

// getFresh reads from the cache and falls back to the API server when the
// cache does not have the object yet or has an older one (uid differs).
func (c *Controller) getFresh(ctx context.Context, key types.NamespacedName, obj client.Object, wantUID string) error {
	err := c.client.Get(ctx, key, obj)
	if err == nil && (wantUID == "" || string(obj.GetUID()) == wantUID) {
		return nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return c.api.Get(ctx, key, obj)
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
		timeout, err := jobTimeout(o, c.opts.GangTimeout)
		if err != nil {
			c.log.Info("ignoring bad annotation", "job", jobKey(j), "error", err.Error())
		}
		var created bool
		if g, created = c.gangs.Ensure(gangSpec(j, timeout)); created {
			c.warnGateBound(j, g.Expected())
		}
	}
	if r := c.book.forJob(o, j.Kind(), c.opts.GangTimeout); r.current() == nil {
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
	// The deadline is a requeue of the gang's writes (writes.go).
	if deadline := g.Start(at, grace); !deadline.IsZero() {
		c.armDeadline(g.UID(), deadline)
	}
}

// forget drops a gang (job deleted, opted out, or re-gated).
func (c *Controller) forget(key string) { c.gangs.Forget(key) }
