package app

import (
	"github.com/rankgate/rankgate/integrations/kubeflow/pytorchjob"

	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/webhook"
)

// A job annotated rankgate.io/gang-timeout: 2562047h47m (about the largest
// Duration) gets an init container whose --timeout rankgate init accepts:
// the webhook used to add its margin past the largest Duration, inject a
// negative --timeout, and every rank exited 2.
func TestInitAcceptsInjectedTimeoutOfHugeGangTimeout(t *testing.T) {
	m, err := webhook.NewMutator(webhook.Options{Image: "ghcr.io/rankgate/rankgate:v1", GateURL: "https://gate:443"})
	require.NoError(t, err)
	var obj map[string]any
	require.NoError(t, json.Unmarshal([]byte(`{"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob",
	"metadata":{"name":"train","namespace":"ml","annotations":{"rankgate.io/gang-timeout":"2562047h47m"}},
	"spec":{"pytorchReplicaSpecs":{"Master":{"replicas":1,"template":{"spec":{"containers":[{"name":"pytorch","image":"t",
	"resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}}}}}`), &obj))
	_, err = m.Mutate(obj, pytorchjob.Kind)
	require.NoError(t, err)
	ps := obj["spec"].(map[string]any)["pytorchReplicaSpecs"].(map[string]any)["Master"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	ic := ps["initContainers"].([]any)[0].(map[string]any)
	var timeout string
	for _, a := range ic["args"].([]any) {
		if v, ok := strings.CutPrefix(a.(string), "--timeout="); ok {
			timeout = v
		}
	}
	require.Equal(t, "168h5m0s", timeout, "the gang timeout clamped to 7 days, plus the margin")

	gateArgs, pod := passingGate(t)
	args := append([]string{"init", "--timeout=" + timeout, "--sample", "a100-full", "--devices", "0"}, gateArgs...)
	code, out, stderr := run(t, pod, args...)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
}
