package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/preflight"
)

// gang is one job's ranks as the leader sees them, until its verdict.
type gang struct {
	uid  types.UID
	key  string // namespace/kind/name
	kind string
	ns   string
	name string

	mu       sync.Mutex
	expected int
	timeout  time.Duration
	reports  map[int]heldReport
	// check holds what the reports contribute to the early-fail check.
	check    *preflight.GangCheck
	podUIDs  map[int]string
	firstAt  time.Time // the gang's first report, possibly from an earlier leader
	lastAt   time.Time // the report that completed the gang, or the latest one
	deadline time.Time
	// ask: a decision asked for (writes.go), until the gang is decided.
	ask      *ask
	deciding bool
	verdict  *decision
	done     chan struct{}
	// answeredAt: when this replica answered with verdict.
	answeredAt time.Time
	// attempt: the job's gated attempt (rankgate.io/attempt), its Gang's.
	attempt int32
	// firstAdopted: the recorded first report (the Gang's, or the job's
	// rankgate.io/first-report-at) last adopted.
	firstAdopted string
	// closed: decided or forgotten, no longer counted as open.
	closed bool
	// refused: pods refused for a rank another pod holds (one Event each).
	refused map[types.UID]bool
	// multiNodeNVLink: the job says it expects multi-node NVLink.
	multiNodeNVLink bool
}

// close takes the gang out of the open-gang and waiting-rank gauges, once.
func (g *gang) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	g.closed = true
	metricWaiting.Sub(float64(len(g.reports)))
	metricGangs.Dec()
}

func newGang(j job, timeout time.Duration) *gang {
	o := j.Object()
	multi := enabled(strings.ToLower(o.GetAnnotations()[contract.AnnotationMultiNodeNVLink]))
	return &gang{
		uid: o.GetUID(), key: jobKey(j), kind: j.Kind(), ns: o.GetNamespace(), name: o.GetName(), attempt: jobAttempt(o),
		expected: kubeflow.RankPods(j), timeout: timeout, multiNodeNVLink: multi,
		reports: map[int]heldReport{}, check: preflight.NewGangCheck(multi),
		podUIDs: map[int]string{}, done: make(chan struct{}),
	}
}

// trigger says why a gang is decided.
type trigger int

const (
	trigComplete    trigger = iota // every expected rank reported
	trigEarlyFail                  // the ranks so far already fail together
	trigDeadline                   // gang timeout with ranks missing
	trigUnplaceable                // a missing rank's pod can never be placed
	trigPending                    // the Pending watchdog: hopeless, or past the pending timeout
)

func (t trigger) String() string {
	return [...]string{"complete", "early-fail", "deadline", "unplaceable", "pending"}[t]
}

// add records a rank's report. It says whether the rank is new to the gang
// and whether the gang should now be decided. A rank is held by the first
// pod that reported it: a report from another pod is not added, and
// heldBy names the holder (see Controller.addReport).
func (g *gang) add(rr preflight.RankReport, podUID string, now time.Time) (isNew bool, decide bool, why trigger, heldBy *holder) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.verdict != nil || g.deciding || g.closed {
		return false, false, 0, nil
	}
	if uid, ok := g.podUIDs[rr.Rank]; ok && uid != podUID {
		return false, false, 0, &holder{pod: g.reports[rr.Rank].pod, uid: uid}
	}
	_, had := g.reports[rr.Rank]
	g.reports[rr.Rank] = holdReport(rr, g.expected)
	g.check.Add(rr)
	g.podUIDs[rr.Rank] = podUID
	if !had {
		g.lastAt = now
	}
	if len(g.reports) >= g.expected {
		return !had, true, trigComplete, nil
	}
	if rr.Report.Failed() {
		return !had, true, trigEarlyFail, nil
	}
	// Gang rules that fail on a subset fail on the whole gang too (mixed
	// kinds, MIG on several GPUs, shape mismatch, duplicate devices, an
	// NVLink domain split): decide now and free the GPUs the other ranks
	// hold. The check keeps up with each report (its cost is that rank's
	// devices, not the gang's) and answers as the gang rules would over
	// the ranks so far; decide runs the rules themselves.
	if len(g.reports) > 1 && g.check.Failed() {
		return !had, true, trigEarlyFail, nil
	}
	return !had, false, 0, nil
}

// adoptFirstReport starts g's clock at the first report its Gang records
// (status.firstReportAt, written by an earlier leader), or that the job
// records (rankgate.io/first-report-at, written by earlier releases), but
// never before the gang's oldest rank pod was created: anyone who may
// patch the job can write the annotation, and a time in the past must not
// fail the gang at once.
func (c *Controller) adoptFirstReport(g *gang, o client.Object) {
	s := o.GetAnnotations()[contract.AnnotationFirstReport]
	g.mu.Lock()
	started := !g.firstAt.IsZero()
	g.mu.Unlock()
	// A Gang's first report is an earlier leader's, loaded when this one
	// took the lead: it matters before this leader's own first report.
	if r := c.lookupRes(g.uid); s == "" && r != nil && !started {
		if obj := r.current(); obj != nil && obj.Status.FirstReportAt != nil && r.t.attempt == jobAttempt(o) {
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
	g.mu.Lock()
	seen := g.firstAdopted == s
	g.firstAdopted = s
	g.mu.Unlock()
	if seen {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	oldest, err := c.oldestRankPod(ctx, g)
	switch {
	case err != nil:
		c.log.Error(err, "listing the gang's pods; its clock starts now", "job", g.key)
		oldest = c.now()
	case oldest.IsZero():
		oldest = c.now() // no rank pod yet: no rank can have reported
	}
	if at.Before(oldest) {
		c.log.Info("the job's first-report time is older than its oldest rank pod; using the pod's creation", "job", g.key, "firstReportAt", s, "oldestPod", oldest.UTC().Format(time.RFC3339))
		at = oldest
	}
	c.startClock(g, at)
}

// oldestRankPod is the creation time of the gang's oldest pod (zero when
// it has none).
func (c *Controller) oldestRankPod(ctx context.Context, g *gang) (time.Time, error) {
	pods := &corev1.PodList{}
	if err := c.listJobPods(ctx, pods, g.ns, g.name); err != nil {
		return time.Time{}, err
	}
	var oldest time.Time
	for i := range pods.Items {
		p := &pods.Items[i]
		if ref, ok, err := c.jobOf(ctx, p); err != nil || !ok || ref.uid != g.uid {
			continue
		}
		if t := p.CreationTimestamp.Time; oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	return oldest, nil
}

// holder is the pod that holds a rank.
type holder struct{ pod, uid string }

// release drops rank's report if pod uid still holds it (the holder is
// gone); it says whether it did.
func (g *gang) release(rank int, uid string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.verdict != nil || g.deciding || g.closed || g.podUIDs[rank] != uid {
		return false
	}
	delete(g.reports, rank)
	g.check.Remove(rank)
	delete(g.podUIDs, rank)
	metricWaiting.Dec()
	return true
}

// firstRefusal says whether pod uid is refused for the first time.
func (g *gang) firstRefusal(uid types.UID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refused[uid] {
		return false
	}
	if g.refused == nil {
		g.refused = map[types.UID]bool{}
	}
	g.refused[uid] = true
	return true
}

// addReport adds r's report to g unless another pod that still exists
// holds the rank. Anyone who may create pods in the job's namespace can
// make one that claims a rank (the job's controller owner reference and
// rank labels are plain metadata): the first pod to report a rank keeps it
// while it exists and runs, and a second one is refused, named in the log
// and in an Event on the job, and cannot fail the gang. A holder that is
// gone, terminated or being deleted gives the rank up (a pod the operator
// re-created).
func (c *Controller) addReport(ctx context.Context, g *gang, r rankOf, rr preflight.RankReport, now time.Time) (isNew, decide bool, why trigger, err error) {
	for attempt := 0; ; attempt++ {
		var h *holder
		isNew, decide, why, h = g.add(rr, string(r.pod.UID), now)
		if h == nil {
			return isNew, decide, why, nil
		}
		alive, err := c.podRuns(ctx, r.pod.Namespace, h.pod, h.uid)
		if err != nil {
			return false, false, 0, gate.Errorf(gate.CodeUnavailable, "reading pod %s/%s, holder of rank %d: %v", r.pod.Namespace, h.pod, r.rank, err)
		}
		if alive || attempt >= 2 {
			return false, false, 0, c.refuseClaim(g, r, h)
		}
		g.release(r.rank, h.uid)
	}
}

// refuseClaim is the answer to a pod claiming a rank another pod holds.
func (c *Controller) refuseClaim(g *gang, r rankOf, h *holder) error {
	msg := fmt.Sprintf("rank %d of %s is held by pod %s (uid %s), which reported it first and still runs; pod %s (uid %s) claims the same rank and is refused: a pod the job's operator did not create, or one that replaces a pod still running",
		r.rank, g.key, h.pod, h.uid, r.pod.Name, r.pod.UID)
	if g.firstRefusal(r.pod.UID) {
		c.log.Info("refused a second pod for a rank another pod holds", "job", g.key, "rank", r.rank, "pod", r.pod.Name, "podUID", string(r.pod.UID), "holder", h.pod, "holderUID", h.uid)
		c.rec.Eventf(r.job.Object(), r.pod, corev1.EventTypeWarning, contract.ReasonRankClaimedTwice, "Gate", "%s", msg)
	}
	return gate.Errorf(gate.CodeForbidden, "%s", msg)
}

// podRuns says whether pod ns/name with uid exists, is not being deleted
// and has not terminated (read from the API server: a holder the cache
// does not show yet must not lose its rank).
func (c *Controller) podRuns(ctx context.Context, ns, name, uid string) (bool, error) {
	p := &corev1.Pod{}
	err := c.api.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return string(p.UID) == uid && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed, nil
}

// heldLocked lists the reports held, in rank order, still packed: the
// caller unpacks them (unpackAll) without holding the gang's lock.
func (g *gang) heldLocked() []heldRank {
	out := make([]heldRank, 0, len(g.reports))
	for rank, h := range g.reports {
		out = append(out, heldRank{rank, h})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rank < out[j].rank })
	return out
}

// rankListLocked unpacks the reports held, in rank order.
func (g *gang) rankListLocked() []preflight.RankReport { return unpackAll(g.heldLocked()) }

// summariesLocked lists the ranks as a Gang shows them (heldReport.summary),
// in rank order.
func (g *gang) summariesLocked() []preflight.RankReport {
	out := make([]preflight.RankReport, 0, len(g.reports))
	for rank, h := range g.reports {
		out = append(out, h.summary(rank))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out
}

// reportedLocked lists the ranks that reported and their pods, without
// their reports.
func (g *gang) reportedLocked() []preflight.RankReport {
	out := make([]preflight.RankReport, 0, len(g.reports))
	for rank, r := range g.reports {
		out = append(out, preflight.RankReport{Rank: rank, Pod: r.pod})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out
}

// wait blocks until the verdict, ctx's end, or d on clk.
func (g *gang) wait(ctx context.Context, clk clock.Clock, d time.Duration) {
	if d <= 0 {
		return
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-g.done:
	case <-ctx.Done():
	case <-t.C():
	}
}

// response is the gate's answer for rank.
func (g *gang) response(rank int) *gate.Response {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := &gate.Response{Job: g.key, Rank: rank, Expected: g.expected, Reported: len(g.reports), State: gate.StateWaiting}
	if !g.deadline.IsZero() {
		d := g.deadline
		r.Deadline = &d
	}
	if g.verdict != nil {
		fillDecided(r, g.verdict)
	}
	return r
}

// fillDecided answers with d. Every answer of the gang points to d's one
// report (the gate encodes it once for all of them): d must not change.
func fillDecided(r *gate.Response, d *decision) {
	r.State = gate.StateDecided
	r.Verdict = &d.Report
	if !d.DecidedAt.IsZero() {
		at := d.DecidedAt
		r.DecidedAt = &at
	}
	r.Action = d.Action
}
