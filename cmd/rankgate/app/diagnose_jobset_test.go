//go:build !rankgate_node

package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

// A JobSet from a `kubectl get -o yaml` dump is judged offline against
// the nodes like any job: its rank step from its template; a Trainer
// JobSet's initializer is not counted as a rank.
func TestDiagnoseOfflineJobSet(t *testing.T) {
	dir := t.TempDir()
	nodes := filepath.Join(dir, "nodes.yaml")
	require.NoError(t, os.WriteFile(nodes, []byte(`apiVersion: v1
kind: NodeList
items:
- metadata: {name: h100-1, labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/mig.strategy: none}}
  status: {allocatable: {nvidia.com/gpu: "8", pods: "110", cpu: "128", memory: 2Ti}}
`), 0o644))
	js := filepath.Join(dir, "jobset.yaml")
	require.NoError(t, os.WriteFile(js, []byte(`apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: train, namespace: ml}
spec:
  replicatedJobs:
  - name: model-initializer
    replicas: 1
    template:
      metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: model-initializer}}
      spec:
        template:
          spec:
            containers: [{name: model-initializer, image: init}]
  - name: node
    replicas: 1
    template:
      metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
      spec:
        parallelism: 2
        completions: 2
        completionMode: Indexed
        template:
          spec:
            containers:
            - name: node
              image: pytorch
              resources: {limits: {nvidia.com/gpu: "4"}}
`), 0o644))
	code, out, errOut := run(t, nil, "diagnose", "--offline", "-f", nodes, "-f", js)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "verdict: PASS  JobSet ml/train")
	require.Contains(t, out, "node (2 pods)")

}

// A TrainJob queued by Kueue (suspended, no JobSet yet) is judged offline
// by the pods its TrainingRuntime makes: numNodes x resourcesPerNode on
// the runtime's node template, with Kueue's node selector from its
// runtime patch. On an H100 in the all-1g.10gb layout both node pods fit;
// where the layout offers 3g.40gb only, 1g.10gb is SHAPE_MISMATCH.
func TestDiagnoseOfflineQueuedTrainJob(t *testing.T) {
	dump := filepath.Join("testdata", "trainjob-queued.yaml")
	code, out, errOut := run(t, nil, "diagnose", "--offline", "-f", filepath.Join("testdata", "nodes-h100-1g.yaml"), "-f", dump, "trainjob/fine-tune", "-n", "ml")
	require.Equal(t, 0, code, out+errOut)
	require.Contains(t, out, "TrainJob ml/fine-tune (suspended: judged as if resumed)")
	require.Contains(t, out, "SCHEDULABLE")
	require.Contains(t, out, "node (2 pods)")

	code, out, errOut = run(t, nil, "diagnose", "--offline", "-f", filepath.Join("testdata", "nodes-h100-3g.yaml"), "-f", dump, "ml/fine-tune")
	require.Equal(t, 1, code, out+errOut)
	require.Contains(t, out, "verdict: FAIL  TrainJob ml/fine-tune")
	require.Contains(t, out, "SHAPE_MISMATCH")
	require.Contains(t, out, "nvidia.com/mig-1g.10gb")

	// Kueue's flavor selector is the runtime patch's: a node outside the
	// pool is no place for the node pods, however well it fits.
	nodes := filepath.Join(t.TempDir(), "nodes.yaml")
	raw, err := os.ReadFile(filepath.Join("testdata", "nodes-h100-1g.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(nodes, []byte(strings.Replace(string(raw), "pool: h100-mig", "pool: a100", 1)), 0o644))
	code, out, errOut = run(t, nil, "diagnose", "--offline", "-f", nodes, "-f", dump, "trainjob/fine-tune")
	require.Equal(t, 1, code, out+errOut)
	require.Contains(t, out, "NODE_CONSTRAINTS")
}

// A TrainJob whose runtime is not in the files cannot be judged: exit 2,
// naming the runtime and the command that dumps it; so is a job the
// files do not hold.
func TestDiagnoseOfflineTrainJobRuntimeMissing(t *testing.T) {
	tj := filepath.Join(t.TempDir(), "trainjob.yaml")
	require.NoError(t, os.WriteFile(tj, []byte(`apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: fine-tune, namespace: ml}
spec:
  runtimeRef: {name: torch-distributed}
  trainer:
    numNodes: 2
    resourcesPerNode: {limits: {nvidia.com/mig-3g.40gb: "1"}}
`), 0o644))
	nodes := filepath.Join("testdata", "nodes-h100-1g.yaml")
	for _, args := range [][]string{{}, {"trainjob/fine-tune"}} {
		code, out, errOut := run(t, nil, append([]string{"diagnose", "--offline", "-f", nodes, "-f", tj}, args...)...)
		require.Equal(t, verdict.ExitUsage, code, out)
		require.Empty(t, out)
		require.Contains(t, errOut, "TrainJob ml/fine-tune: its runtime ClusterTrainingRuntime torch-distributed is not in the files")
		require.Contains(t, errOut, "kubectl get clustertrainingruntime torch-distributed -o yaml")
	}
	code, _, errOut := run(t, nil, "diagnose", "--offline", "-f", nodes, "-f", tj, "pytorchjob/fine-tune")
	require.Equal(t, verdict.ExitUsage, code)
	require.Contains(t, errOut, "no job pytorchjob/fine-tune in the files (they hold 1 job(s))")
}

// A JobSet's pods, controlled by batch Jobs and labelled by the JobSet
// controller, are judged as the JobSet's, not as pods of no job.
func TestDiagnoseOfflineJobSetPods(t *testing.T) {
	nodes := filepath.Join(t.TempDir(), "nodes.yaml")
	require.NoError(t, os.WriteFile(nodes, []byte(`apiVersion: v1
kind: NodeList
items:
- metadata: {name: h100-1, labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/mig.strategy: none}}
  status: {allocatable: {nvidia.com/gpu: "4", pods: "110", cpu: "128", memory: 2Ti}}
`), 0o644))
	code, out, errOut := run(t, nil, "diagnose", "--offline", "-f", nodes, "-f", filepath.Join("testdata", "jobset-pending.yaml"))
	require.Equal(t, 1, code, errOut)
	require.Contains(t, out, "verdict: FAIL  JobSet ml/train")
	require.Contains(t, out, "GANG_TOO_LARGE")
	require.NotContains(t, out, "Pod ml/train-node-0-1", "the pending pod is the JobSet's")
}
