package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// A job annotated rankgate.io/multi-node-nvlink=enabled whose two ranks sit
// on nodes with no shared NVLink fabric (their GPUs report no fabric
// cluster, so each node is its own domain) fails with
// GANG_NVLINK_DOMAIN_SPLIT; the same job without the annotation passes.
func TestE2EMultiNodeNVLinkExpected(t *testing.T) {
	ns := newNamespace(t, "e2e-nvl", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute})
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        verdict.Verdict
		code        int
	}{
		{"nvl-expected", map[string]string{contract.AnnotationMultiNodeNVLink: "enabled"}, verdict.VerdictFail, verdict.ExitFail},
		{"nvl-not-asked", nil, verdict.VerdictPass, verdict.ExitPass},
	} {
		job := pytorchJob(t, ns, tc.name, true, 1, tc.annotations)
		var ranks []*rank
		for _, p := range []*corev1.Pod{rankPod(t, job, "master", 0, "node-a", ""), rankPod(t, job, "worker", 0, "node-b", "")} {
			ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), fullGPURank...))
		}
		for _, r := range ranks {
			require.Equal(t, tc.code, r.wait(t, time.Minute), r.String())
			v := decodeVerdict(t, r)
			require.Equal(t, tc.want, v.Verdict, r.String())
			if tc.want == verdict.VerdictFail {
				require.Contains(t, v.RuleIDs(), verdict.RuleGangNVLinkDomainSplit, r.String())
			} else {
				require.NotContains(t, v.RuleIDs(), verdict.RuleGangNVLinkDomainSplit, r.String())
			}
		}
	}
}
