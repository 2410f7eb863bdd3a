package controller

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
)

// gang is one job's ranks as the leader holds them until its verdict
// (package gangstore: reports in, answers out).
type gang = decision.Gang

// gangSpec is what job j's gang is for.
func gangSpec(j job, timeout time.Duration) gangstore.Spec {
	o := j.Object()
	return gangstore.Spec{
		UID: o.GetUID(), Key: decision.JobKey(j), Kind: j.Kind(), Namespace: o.GetNamespace(), Name: o.GetName(), Attempt: contract.Attempt(o.GetAnnotations()),
		Expected: kubeflow.RankPods(j), Timeout: timeout,
		MultiNodeNVLink: enabled(strings.ToLower(o.GetAnnotations()[contract.AnnotationMultiNodeNVLink])),
	}
}

// adoptFirstReport starts g's clock at the first report its Gang records
// (status.firstReportAt, written by an earlier leader), or that the job
// records (rankgate.io/first-report-at, written by earlier releases), but
// never before the gang's oldest rank pod was created: anyone who may
// patch the job can write the annotation, and a time in the past must not
// fail the gang at once.
func (c *Controller) adoptFirstReport(g *gang, o client.Object) {
	s := o.GetAnnotations()[contract.AnnotationFirstReport]
	started := g.Started()
	// A Gang's first report is an earlier leader's, loaded when this one
	// took the lead: it matters before this leader's own first report.
	if r := c.w.Book().Lookup(g.UID()); s == "" && r != nil && !started {
		if obj := r.Current(); obj != nil && obj.Status.FirstReportAt != nil && r.Attempt() == contract.Attempt(o.GetAnnotations()) {
			// Stored to the second: the report came within the second
			// after it. The end of that second never shortens the gang's
			// time (this leader's own first report is never later).
			s = obj.Status.FirstReportAt.Add(time.Second - time.Millisecond).UTC().Format(time.RFC3339Nano)
		}
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return
	}
	if !g.AdoptFirst(s) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	oldest, err := c.oldestRankPod(ctx, g)
	switch {
	case err != nil:
		c.log.Error(err, "listing the gang's pods; its clock starts now", "job", g.Key())
		oldest = c.now()
	case oldest.IsZero():
		oldest = c.now() // no rank pod yet: no rank can have reported
	}
	if at.Before(oldest) {
		c.log.Info("the job's first-report time is older than its oldest rank pod; using the pod's creation", "job", g.Key(), "firstReportAt", s, "oldestPod", oldest.UTC().Format(time.RFC3339))
		at = oldest
	}
	c.startClock(g, at)
}

// oldestRankPod is the creation time of the gang's oldest pod (zero when
// it has none).
func (c *Controller) oldestRankPod(ctx context.Context, g *gang) (time.Time, error) {
	pods := &corev1.PodList{}
	if err := c.listJobPods(ctx, pods, g.Namespace(), g.Name()); err != nil {
		return time.Time{}, err
	}
	var oldest time.Time
	for i := range pods.Items {
		p := &pods.Items[i]
		if ref, ok, err := c.jobOf(ctx, p); err != nil || !ok || ref.uid != g.UID() {
			continue
		}
		if t := p.CreationTimestamp.Time; oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	return oldest, nil
}

// response is the gate's answer for rank of gang g.
func response(g *gang, rank int) *gate.Response {
	reported, deadline, d := g.Progress()
	r := &gate.Response{Job: g.Key(), Rank: rank, Expected: g.Expected(), Reported: reported, State: gate.StateWaiting}
	if !deadline.IsZero() {
		r.Deadline = &deadline
	}
	if d != nil {
		fillDecided(r, d)
	}
	return r
}

// fillDecided answers with d. Every answer of the gang points to d's one
// report (the gate encodes it once for all of them): d must not change.
func fillDecided(r *gate.Response, d *decision.Decision) {
	r.State = gate.StateDecided
	r.Verdict = &d.Report
	if !d.DecidedAt.IsZero() {
		at := d.DecidedAt
		r.DecidedAt = &at
	}
	r.Action = d.Action
}
