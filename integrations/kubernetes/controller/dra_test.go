package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/watchdog"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

// Through the cache transforms, as GANG_RANK_UNPLACEABLE and the Pending
// watchdog judge: ranks whose devices come through DRA are never
// unplaceable, where the same ranks judged from node allocatable are.
func TestJudgeDRARanks(t *testing.T) {
	// Nodes whose GPUs are in ResourceSlices: nothing in allocatable.
	nodes := []*corev1.Node{gpuNodeObj("dra-0", "example.com/none", 0), gpuNodeObj("dra-1", "example.com/none", 0)}
	withClaim := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("h100")}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
		return p
	}
	classes := []resourcev1.DeviceClass{*clustertest.DeviceClass("gpu.nvidia.com", "nvidia.com/gpu")}
	judge := func(classes []resourcev1.DeviceClass, pods ...*corev1.Pod) (map[string]string, schedule.Result) {
		j, pods := rankJob(t, pods...)
		var tn []corev1.Node
		for _, n := range nodes {
			o, err := trimNode(n.DeepCopy())
			require.NoError(t, err)
			tn = append(tn, *o.(*corev1.Node))
		}
		var tp []*corev1.Pod
		api := fake.NewClientBuilder()
		for _, p := range pods {
			o, err := trimPod(p.DeepCopy())
			require.NoError(t, err)
			tp = append(tp, o.(*corev1.Pod))
			api.WithObjects(p.DeepCopy())
		}
		// The placement rules and claims of the pods judged are read from
		// the API server, as the controller reads them.
		c := &Controller{api: api.Build()}
		tp, err := c.judgedPods(context.Background(), j, tp)
		require.NoError(t, err)
		why, err := judgePlacement(schedule.New(), tn, &draState{classes: classes}, j, tp)
		require.NoError(t, err)
		res, _, ok, err := judgeJob(schedule.New(), tn, &draState{classes: classes}, j, tp, false)
		require.NoError(t, err)
		require.True(t, ok)
		return why, res
	}

	// Judged from allocatable: hopeless.
	why, res := judge(nil, pendingPod("nvidia.com/gpu", 1), pendingPod("nvidia.com/gpu", 1))
	require.Len(t, why, 2)
	require.Equal(t, verdict.RuleShapeMismatch, res.Rule)

	// nvidia.com/gpu that a DeviceClass maps.
	why, res = judge(classes, pendingPod("nvidia.com/gpu", 1), pendingPod("nvidia.com/gpu", 1))
	require.Empty(t, why)
	require.Equal(t, verdict.RuleDRANotJudged, res.Rule)
	require.False(t, res.Hopeless)
	require.Contains(t, res.Report.Findings[0].Message, "nvidia.com/gpu from DeviceClass gpu.nvidia.com")

	// Resource claims are read with the placement rules (the pod cache
	// keeps only their fingerprint): a MIG shape no node has next to a
	// claim is not judged either.
	why, res = judge(nil, withClaim(pendingPod("nvidia.com/mig-1g.5gb", 1)))
	require.Empty(t, why)
	require.Equal(t, verdict.RuleDRANotJudged, res.Rule)
	require.Contains(t, res.Report.Findings[0].Message, "resource claims gpu")

	// The watchdog reads it as a waiting cause, never hopeless.
	hopeless, cause := watchdog.Cause(res, false)
	require.False(t, hopeless)
	require.Equal(t, verdict.RuleDRANotJudged, cause.Rule)
}
