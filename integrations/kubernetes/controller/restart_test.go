package controller

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// A rank of the restart the job's attempt judges passes; one of a later
// restart is asked to retry while the job's next attempt opens; one of an
// earlier restart is refused. Kinds that do not restart that way (a
// PyTorchJob) are not looked at.
func TestCheckRestart(t *testing.T) {
	// The writer takes a restart asked for up by reading the job.
	var reads atomic.Int32
	fns := &interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if key == (client.ObjectKey{Namespace: "ml", Name: "js"}) {
			reads.Add(1)
		}
		return c.Get(ctx, key, obj, opts...)
	}}
	l := newLeader(t, newFakeAPI(t), Options{}, fns)
	js := &jobsetapi.JobSet{ObjectMeta: metav1.ObjectMeta{Name: "js", Namespace: "ml", UID: "js-uid",
		Annotations: map[string]string{contract.AnnotationRestartAttempt: "2"}}}
	j, err := jobset.Kind.Wrap(js)
	require.NoError(t, err)
	pod := func(restart string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ml", Labels: map[string]string{jobset.LabelRestartAttempt: restart}}}
	}
	require.NoError(t, l.checkRestart(rankOf{pod: pod("2"), job: j}))

	var ge *gate.Error
	err = l.checkRestart(rankOf{pod: pod("1"), job: j})
	require.True(t, errors.As(err, &ge))
	require.Equal(t, gate.CodeNotARank, ge.Code, err.Error())

	before := reads.Load()
	err = l.checkRestart(rankOf{pod: pod("3"), job: j})
	require.True(t, errors.As(err, &ge))
	require.Equal(t, gate.CodeUnavailable, ge.Code, err.Error())
	require.True(t, ge.Retryable())
	require.NotNil(t, l.w.Book().Lookup("js-uid"))
	require.Eventually(t, func() bool { return reads.Load() > before }, eventually, tick, "the next attempt is not asked for")

	pj, pods := gangJob(t, 1)
	pods[0].Labels[jobset.LabelRestartAttempt] = "7"
	require.NoError(t, l.checkRestart(rankOf{pod: pods[0], job: kubeflow.MustFromObject(pj)}))
}

// A gang still open on this replica when another replica has recorded and
// applied the verdict (two leaders for a moment) is answered with it when
// the job carrying it reaches the job reconciler, not at its ranks' next
// poll; a gang whose job carries no verdict stays open.
func TestOpenGangAnsweredWithAppliedVerdict(t *testing.T) {
	pj, pods := gangJob(t, 2)
	l := newLeader(t, newFakeAPI(t, objects(pj, pods)...), Options{}, nil)
	l.report(t, pods, 0, verdict.VerdictPass)
	g := l.gangs.Get(pj.UID)
	require.NotNil(t, g)
	k, _ := kubeflow.ByName("PyTorchJob")
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ml", Name: "j"}}
	_, err := l.newJobReconciler().Reconcile(context.Background(), k, req)
	require.NoError(t, err)
	require.True(t, g.Open(), "answered without a verdict on the job")

	// Replica b's verdict, on the job.
	d := &decision.Decision{Report: verdict.NewReport("ml/PyTorchJob/j", []verdict.Finding{{Rule: verdict.RuleRankFailed, Severity: verdict.SeverityFail}}),
		DecidedAt: t0, DecidedBy: "replica-b", Action: ActionSuspend}
	job := l.job(t)
	job.Annotations = decision.AnnotationsFor(d, job.Annotations)
	job.Spec.RunPolicy.Suspend = ptr.To(true) // as replica b suspended it
	require.NoError(t, l.cl.Update(context.Background(), job))
	_, err = l.newJobReconciler().Reconcile(context.Background(), k, req)
	require.NoError(t, err)
	require.False(t, g.Open())
	require.NotNil(t, g.Verdict())
	require.Equal(t, verdict.VerdictFail, g.Verdict().Report.Verdict)
	require.Equal(t, "replica-b", g.Verdict().DecidedBy)
	require.Zero(t, l.Decisions(), "adopted, not decided")
	_, pending := l.w.Book().Pending(pj.UID)
	require.False(t, pending, "nothing left to apply")
}
