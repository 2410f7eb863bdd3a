package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// A person resumes a job its fail verdict suspended: the job reconciler
// only asks, and the writes re-gate it (the verdict annotations cleared,
// the old verdict kept in previous-verdict, one more attempt).
func TestResumedJobRegatedByTheWrites(t *testing.T) {
	pj, pods := gangJob(t, 2)
	l := newLeader(t, newFakeAPI(t, objects(pj, pods)...), Options{}, nil)
	l.report(t, pods, 0, verdict.VerdictPass)
	l.report(t, pods, 1, verdict.VerdictFail)
	require.Eventually(t, func() bool { return l.answer(t, pods, 0).State == gate.StateDecided }, eventually, tick)
	require.Eventually(t, func() bool { return suspended(l.job(t)) }, eventually, tick)
	require.Equal(t, "fail", l.job(t).Annotations[contract.AnnotationVerdict])

	j := l.job(t)
	j.Spec.RunPolicy.Suspend = ptr.To(false)
	require.NoError(t, l.cl.Update(context.Background(), j))
	k, _ := kubeflow.ByName("PyTorchJob")
	require.Eventually(t, func() bool {
		_, err := l.newJobReconciler().Reconcile(context.Background(), k, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ml", Name: "j"}})
		require.NoError(t, err)
		return l.job(t).Annotations[contract.AnnotationVerdict] == ""
	}, eventually, tick, "the resumed job was not re-gated")
	a := l.job(t).Annotations
	require.Equal(t, "2", a[contract.AnnotationAttempt])
	require.Contains(t, a[contract.AnnotationPreviousVerdict], "fail ")
	require.Empty(t, a[contract.AnnotationRules])
	require.False(t, suspended(l.job(t)))
}
