package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// A JobSet that restarts is gated again: its pods of restart 0 pass; the
// JobSet controller replaces every pod (restart-attempt 1), and the new
// pods land on MIG instances of two GPUs. They are a new gang, judged
// afresh (not answered with the first pass), which fails: the JobSet is
// suspended, at its next attempt, with the restart recorded and the first
// verdict kept as the previous one.
func TestE2EJobSetRestartIsANewGang(t *testing.T) {
	c := startController(t, controller.Options{GangTimeout: time.Minute})
	ns := newNamespace(t, "e2e-jsrestart", true)
	js := newJobSet(t, ns, "restarts", 2, nil)
	ctx := context.Background()

	var ranks []*rank
	first := jobSetRankPods(t, js, 2, []string{"node-0", "node-1"}, "nvidia.com/gpu")
	for _, p := range first {
		ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), fullGPURank...))
	}
	for _, r := range ranks {
		require.Equal(t, 0, r.wait(t, time.Minute), joinRanks(ranks))
	}
	require.Equal(t, "pass", appliedVerdict(t, js)[contract.AnnotationVerdict])

	// The restart: every pod and the Job go, and come back labelled
	// restart-attempt 1.
	for _, p := range first {
		require.NoError(t, k8s.Delete(ctx, p, client.GracePeriodSeconds(0)))
	}
	bj := &batchv1.Job{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: js.Name + "-node-0"}, bj))
	require.NoError(t, k8s.Delete(ctx, bj, client.PropagationPolicy(client.PropagationPolicy("Background"))))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(bj), &batchv1.Job{}))
	}, 10*time.Second, 50*time.Millisecond)
	second := jobSetRankPods(t, js, 2, []string{"h100-node", "h100-node"}, "nvidia.com/mig-3g.40gb", func(p *corev1.Pod) {
		p.Name = strings.Replace(p.Name, "x7k2p", "r1q8z", 1)
		p.Labels[jobset.LabelRestartAttempt] = "1"
	})
	ranks = nil
	for i, p := range second {
		ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), "--sample", "h100-mig", "--devices", []string{"0:0", "1:0"}[i]))
	}
	for _, r := range ranks {
		require.Equal(t, verdict.ExitFail, r.wait(t, time.Minute), joinRanks(ranks))
	}
	a := appliedVerdict(t, js)
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	require.Contains(t, a[contract.AnnotationRules], "GANG_MIG_SPANS_GPUS")
	require.Equal(t, "1", a[contract.AnnotationRestartAttempt])
	require.Equal(t, "2", a[contract.AnnotationAttempt], "the restart is the job's next attempt")
	require.True(t, strings.HasPrefix(a[contract.AnnotationPreviousVerdict], "pass "), a[contract.AnnotationPreviousVerdict])
	require.True(t, jobSetSuspended(t, js))
	g := gangOf(t, js)
	require.NotNil(t, g)
	require.EqualValues(t, 2, g.Spec.Attempt)
	require.EqualValues(t, 2, c.Decisions(), "each restart decided once")
}
