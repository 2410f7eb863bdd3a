package leader

import (
	"context"
	"testing"
	"time"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/verdict"
)

// pyTorchJob is an opted-in PyTorchJob ml/name with uid, 4 workers, at
// attempt (its rankgate.io/attempt) and with annotations a besides.
func pyTorchJob(name string, uid types.UID, attempt string, a map[string]string) *kubeflowv1.PyTorchJob {
	ann := map[string]string{contract.AnnotationAttempt: attempt}
	for k, v := range a {
		ann[k] = v
	}
	tmpl := kubeflowv1.ReplicaSpec{Replicas: ptr.To(int32(4))}
	return &kubeflowv1.PyTorchJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: uid, Annotations: ann},
		Spec: kubeflowv1.PyTorchJobSpec{PyTorchReplicaSpecs: map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{kubeflowv1.PyTorchJobReplicaTypeWorker: &tmpl}}}
}

// The Gang book holds one record per job: the job's current attempt, with
// the job's own gang timeout; a cache that still shows an earlier attempt
// never replaces a later one; a record an earlier leader wrote is taken
// in unless a later attempt is known (or it carries a verdict to apply);
// a job's records are dropped by its key, one attempt's alone by its
// target.
func TestBookOneRecordPerJobAttempt(t *testing.T) {
	b := newBook()
	j1 := pyTorchJob("pt", "u1", "1", map[string]string{contract.AnnotationGangTimeout: "90s"})
	r := b.ForJob(j1, "PyTorchJob", time.Minute)
	require.Same(t, r, b.ForJob(j1, "PyTorchJob", time.Minute), "one record per attempt")
	require.Equal(t, int32(1), r.Attempt())
	require.Equal(t, 90*time.Second, r.timeout, "the job's own gang timeout")
	require.Equal(t, int32(4), r.expected)
	require.Nil(t, r.Current(), "no Gang read or written yet")

	j2 := pyTorchJob("pt", "u1", "2", nil)
	r2 := b.ForJob(j2, "PyTorchJob", time.Minute)
	require.NotSame(t, r, r2)
	require.Equal(t, int32(2), r2.Attempt())
	require.Equal(t, time.Minute, r2.timeout, "the default without the job's own")
	require.Same(t, r2, b.ForJob(j1, "PyTorchJob", time.Minute), "a stale cache keeps the later attempt")
	require.Same(t, r2, b.Lookup("u1"))

	// An earlier leader's record: not over a later attempt, unless it
	// carries a verdict to apply (replace).
	old := &GangRecord{t: target{kind: "PyTorchJob", ns: "ml", name: "pt", uid: "u1", attempt: 1}}
	b.adopt(old, false)
	require.Same(t, r2, b.Lookup("u1"))
	b.adopt(old, true)
	require.Same(t, old, b.Lookup("u1"))

	// Dropping one attempt leaves the others' records alone.
	other := b.ForJob(pyTorchJob("other", "u2", "0", nil), "PyTorchJob", time.Minute)
	t2 := target{kind: "PyTorchJob", ns: "ml", name: "pt", uid: "u1", attempt: 2}
	b.drop("ml/PyTorchJob/pt", &t2)
	require.Same(t, old, b.Lookup("u1"), "attempt 1 is not attempt 2")
	b.Drop("ml/PyTorchJob/pt")
	require.Nil(t, b.Lookup("u1"))
	require.Same(t, other, b.Lookup("u2"))
}

// A recorded verdict is pending until its job carries it, and Current
// hands out a copy of the Gang, never the record's own.
func TestBookPendingUntilOnTheJob(t *testing.T) {
	b := newBook()
	r := b.ForJob(pyTorchJob("pt", "u1", "0", nil), "PyTorchJob", time.Minute)
	_, pending := b.Pending("u1")
	require.False(t, pending)
	d := &decision.Decision{Report: verdict.NewReport("", nil)}
	r.mu.Lock()
	r.recorded = d
	r.mu.Unlock()
	got, pending := b.Pending("u1")
	require.True(t, pending)
	require.Same(t, d, got)
	require.Equal(t, 1, b.unapplied())
	r.mu.Lock()
	r.onJobAt = time.Now()
	r.mu.Unlock()
	_, pending = b.Pending("u1")
	require.False(t, pending)
	require.Zero(t, b.unapplied())
	_, pending = b.Pending("nobody")
	require.False(t, pending)

	r.set(newGangObject(r))
	c := r.Current()
	c.Status.Progress = "changed by a reader"
	require.Empty(t, r.Current().Status.Progress)
}

// The bookkeepers' wait for the decisions in flight: none in flight, it
// does not wait; it ends when the last one ends, at most after its bound
// on the clock, or with its context.
func TestBookkeepersWaitForDecisionsInFlight(t *testing.T) {
	var f decisionsInFlight
	clk := clocktesting.NewFakeClock(time.Now())
	ctx := context.Background()
	f.wait(ctx, clk, time.Hour) // none in flight: returns at once

	waited := func(ctx context.Context) chan struct{} {
		done := make(chan struct{})
		go func() { f.wait(ctx, clk, time.Second); close(done) }()
		return done
	}
	f.begin()
	f.begin()
	done := waited(ctx)
	f.end()
	require.Never(t, func() bool { return isClosed(done) }, 50*time.Millisecond, 5*time.Millisecond, "one decision still in flight")
	f.end()
	require.Eventually(t, func() bool { return isClosed(done) }, time.Second, 5*time.Millisecond)

	f.begin()
	done = waited(ctx)
	require.Eventually(t, clk.HasWaiters, time.Second, time.Millisecond)
	clk.Step(time.Second)
	require.Eventually(t, func() bool { return isClosed(done) }, time.Second, 5*time.Millisecond, "bounded on the clock")

	cctx, cancel := context.WithCancel(ctx)
	done = waited(cctx)
	cancel()
	require.Eventually(t, func() bool { return isClosed(done) }, time.Second, 5*time.Millisecond, "ends with its context")
	f.end()
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
