package leader

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/metrics"
)

// Progress writes: what an open gang's Gang shows (ranks reported, the
// deadline, what the job waits for). Nobody waits for them, and a burst of
// reports must not multiply API writes: a report only marks its Gang
// dirty, and the writes (writes.go) write a dirty Gang at most once per
// progress interval, at the lowest priority. A gang that completes within
// the interval of a report costs no progress write: its verdict write
// carries the ranks.
//
// The interval is ProgressEvery, longer with many open gangs: each is
// written at most once per (open gangs / progressRate) seconds, so that
// all of them together write about progressRate times a second at most.
// The gang latency benchmark (200 jobs x 8 ranks reporting over 20 s)
// needs that budget: written every 2 s each, the open gangs' progress
// writes were 2.6 times the Gang writes of the run and slowed the verdict
// writes ranks wait for (p99 several times the budgeted run's, side by
// side on one machine).
const (
	// ProgressEvery is how often one gang's progress is written at most.
	ProgressEvery = 2 * time.Second
	progressRate  = 10 // progress writes a second, all gangs together
	progressRetry = 5 * time.Second
)

// progressInterval is how often one dirty Gang is written now.
func (w *Writes) progressInterval() time.Duration {
	return max(ProgressEvery, time.Duration(w.gangs.Open())*time.Second/progressRate)
}

// touchProgress marks job uid's Gang dirty: written within ProgressEvery,
// or at once with soon (a Gang that does not exist yet).
func (w *Writes) TouchProgress(uid types.UID, soon bool) {
	r := w.book.Lookup(uid)
	if r == nil {
		return
	}
	r.mu.Lock()
	r.dirty = true
	r.mu.Unlock()
	delay := w.progressInterval()
	if soon {
		delay = 0
	}
	w.enqueue(uid, prioBook, delay)
}

// progressStep writes r's Gang (created if needed) with its gang g's
// progress, if it is dirty and not written within the progress interval
// (then it is requeued for that time). A gang being decided is left to its
// verdict write.
func (w *Writes) progressStep(ctx context.Context, r *GangRecord, g *gang) {
	r.mu.Lock()
	dirty, done, last := r.dirty, r.decidedLocked(), r.progressAt
	r.mu.Unlock()
	if !dirty || done {
		return
	}
	if g != nil && !g.Open() {
		return // decided: its verdict write carried the ranks
	}
	if left := w.progressInterval() - w.since(last); !last.IsZero() && left > 0 {
		w.enqueue(r.t.uid, prioBook, left)
		return
	}
	snap := gangSnapshot{Expected: int(r.expected)}
	if g != nil {
		snap = g.Snapshot()
	}
	r.mu.Lock()
	r.dirty = false
	r.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := w.writeProgress(wctx, r, g, snap)
	if err == nil || ctx.Err() != nil {
		return
	}
	metrics.APIErrors.WithLabelValues("gang-progress").Inc()
	msg := err.Error()
	if apierrors.IsForbidden(err) || isNoGangKind(err) {
		msg += " (" + GangsRBACHint("create and update") + ")"
	}
	w.log.Info("writing the gang's progress; retrying", "job", r.t.key(), "gang", r.key().Name, "in", progressRetry.String(), "error", msg)
	r.mu.Lock()
	r.dirty = true
	r.mu.Unlock()
	w.enqueue(r.t.uid, prioBook, progressRetry)
}

// writeProgress writes snap into r's Gang unless it holds a verdict (then
// an open in-memory gang g adopts it: another replica recorded it) or
// already shows it.
func (w *Writes) writeProgress(ctx context.Context, r *GangRecord, g *gang, snap gangSnapshot) error {
	for attempt := 0; attempt < 3; attempt++ {
		obj, err := w.ensureObject(ctx, r)
		if err != nil {
			return err
		}
		if obj == nil {
			continue
		}
		if d, ok := gangDecision(obj); ok {
			// Recorded by another replica: adopted, unless it was applied
			// and the job no longer carries it (then the gang's verdict
			// write starts a new attempt).
			// Only a gang still open here adopts it: this replica's own
			// verdict (decided while this write waited) is being applied
			// or applied already, and must not be marked pending again.
			if g == nil || !g.Open() {
				return nil
			}
			// Applied too: the job carries it, and the job reconciler,
			// which sees the job's verdict, answers the gang with it
			// (reconcileDecided).
			if !meta.IsStatusConditionTrue(obj.Status.Conditions, contract.ConditionApplied) {
				w.setPending(r, d)
				w.adoptVerdict(g, d)
			}
			return nil
		}
		before := obj.Status.DeepCopy()
		r.mu.Lock()
		waiting := r.waiting
		r.mu.Unlock()
		setProgress(&obj.Status, snap, waiting)
		if equality.Semantic.DeepEqual(before, &obj.Status) {
			return nil
		}
		// The response is decoded into obj, into these very lists: a copy.
		sent := make([]v1alpha1.RankStatus, len(obj.Status.Ranks))
		for i := range sent {
			obj.Status.Ranks[i].DeepCopyInto(&sent[i])
		}
		err = w.gangAPI.Status().Update(ctx, obj)
		switch {
		case err == nil:
			shareRanks(obj.Status.Ranks, sent)
			r.set(obj)
			r.mu.Lock()
			r.progressAt = w.now()
			r.mu.Unlock()
			return nil
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			if _, err := w.refresh(ctx, r); err != nil {
				return err
			}
		default:
			return err
		}
	}
	return nil
}

// shareRanks puts the ranks written (whose strings are the held reports')
// in place of the same ranks as the API server echoed them, so that an
// open gang's Gang does not hold a second copy of every pod, node and
// device name.
func shareRanks(echoed, sent []v1alpha1.RankStatus) {
	if len(echoed) != len(sent) {
		return
	}
	for i := range echoed {
		if equality.Semantic.DeepEqual(echoed[i], sent[i]) {
			echoed[i] = sent[i]
		}
	}
}
