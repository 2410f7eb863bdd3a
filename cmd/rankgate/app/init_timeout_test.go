//go:build linux && !rankgate_node

package app

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/webhook"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/review"
)

// A job annotated rankgate.io/gang-timeout: 2562047h47m (about the largest
// Duration) gets an init container whose --timeout rankgate init accepts:
// the webhook used to add its margin past the largest Duration, inject a
// negative --timeout, and every rank exited 2.
func TestInitAcceptsInjectedTimeoutOfHugeGangTimeout(t *testing.T) {
	m, err := webhook.NewMutator(webhook.Options{Image: "ghcr.io/rankgate/rankgate:v1", GateURL: "https://gate:443"})
	require.NoError(t, err)
	raw := []byte(`{"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob",
	"metadata":{"name":"train","namespace":"ml","annotations":{"rankgate.io/gang-timeout":"2562047h47m"}},
	"spec":{"pytorchReplicaSpecs":{"Master":{"replicas":1,"template":{"spec":{"containers":[{"name":"pytorch","image":"t",
	"resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}}}}}`)
	j, err := review.DecodeJob(metav1.GroupVersionKind{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"}, "ml", raw)
	require.NoError(t, err)
	ops, err := m.Patch(j)
	require.NoError(t, err)
	require.NotEmpty(t, ops)
	inits, ok := ops[0].Value.([]corev1.Container)
	require.True(t, ok, "the first operation adds the init containers: %v", ops[0])
	var timeout string
	for _, a := range inits[0].Args {
		if v, ok := strings.CutPrefix(a, "--timeout="); ok {
			timeout = v
		}
	}
	require.Equal(t, "168h5m0s", timeout, "the gang timeout clamped to 7 days, plus the margin")

	gateArgs, pod := passingGate(t)
	args := append([]string{"init", "--timeout=" + timeout, "--sample", "a100-full", "--devices", "0"}, gateArgs...)
	code, out, stderr := run(t, pod, args...)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
}
