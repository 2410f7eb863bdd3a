package controller

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
)

// A rank of the restart the job's attempt judges passes; one of a later
// restart is asked to retry while the job's next attempt opens; one of an
// earlier restart is refused. Kinds that do not restart that way (a
// PyTorchJob) are not looked at.
func TestCheckRestart(t *testing.T) {
	l := newLeader(t, newFakeAPI(t), Options{}, nil)
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

	err = l.checkRestart(rankOf{pod: pod("3"), job: j})
	require.True(t, errors.As(err, &ge))
	require.Equal(t, gate.CodeUnavailable, ge.Code, err.Error())
	require.True(t, ge.Retryable())
	r := l.lookupRes("js-uid")
	require.NotNil(t, r)
	require.EqualValues(t, 3, r.restart, "the next attempt is asked for")

	pj, pods := gangJob(t, 1)
	pods[0].Labels[jobset.LabelRestartAttempt] = "7"
	require.NoError(t, l.checkRestart(rankOf{pod: pods[0], job: wrap(pj)}))
}
