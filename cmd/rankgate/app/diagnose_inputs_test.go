//go:build !rankgate_node

package app

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

var kubeFixtures = filepath.Join("..", "..", "..", "testdata", "fixtures", "kubernetes")

// A node's labels alone (fixture 23: single strategy, MIG disabled) and a
// pod asking a MIG profile: the node is named from its hostname label, and
// the verdict is STRATEGY_MISMATCH.
func TestDiagnoseOfflineNodeLabels(t *testing.T) {
	pod := filepath.Join(t.TempDir(), "pod.yaml")
	require.NoError(t, os.WriteFile(pod, []byte(`apiVersion: v1
kind: Pod
metadata: {name: notebook-1g, namespace: research}
spec:
  containers:
  - name: nb
    resources:
      requests: {cpu: "4", memory: 16Gi}
      limits: {nvidia.com/mig-1g.10gb: "1"}
`), 0o644))
	labels := filepath.Join(kubeFixtures, "23_node-labels-json_h100_mig-disabled_single_nvidia-cloud-native-docs.json")
	code, out, errOut := run(t, nil, "diagnose", "--offline", "-f", labels, "-f", pod)
	require.Equal(t, verdict.ExitFail, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, errOut, "node s4124-0073 read from its labels alone (name from label kubernetes.io/hostname)")
	require.Contains(t, out, "STRATEGY_MISMATCH")
	require.Contains(t, out, "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-MIG-1g.10gb")
}

// kubectl describe text is refused with exit 2 and the command to run.
func TestDiagnoseOfflineRefusesDescribe(t *testing.T) {
	for file, cmd := range map[string]string{
		filepath.Join(kubeFixtures, "35_node-capacity_8gpu_mig-disabled-stale-zero-mig-resources_kai1120.txt"):       "kubectl get node NAME -o yaml",
		filepath.Join(kubeFixtures, "38_pod-event_aks_a100_NotTriggerScaleUp_Insufficient-mig-1g.10gb_gpuop693.txt"): "kubectl get pod NAME -n NAMESPACE -o yaml",
	} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			code, out, errOut := run(t, nil, "diagnose", "--offline", "-f", file)
			require.Equal(t, verdict.ExitUsage, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			require.Empty(t, out)
			require.Contains(t, errOut, "kubectl describe")
			require.Contains(t, errOut, cmd)
		})
	}
}

// A job pasted with no nodes: the GPU shape is the finding, never "pods"
// (every kubelet offers pods, cpu and memory; none known means no nodes).
func TestDiagnoseOfflineJobAloneNamesNoCoreResource(t *testing.T) {
	code, out, errOut := run(t, nil, "diagnose", "--offline", "-f", "../../../configs/deploy/examples/pytorchjob-label.yaml")
	require.Equal(t, verdict.ExitFail, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, "nvidia.com/gpu")
	require.NotContains(t, out, "asks pods")
	require.NotContains(t, out, "no node offers pods")
}
