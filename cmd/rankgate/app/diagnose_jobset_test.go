//go:build !rankgate_node

package app

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A JobSet and a TrainJob from `kubectl get -o yaml` dumps are judged
// offline against the nodes like any job: the JobSet's rank step from its
// template, the TrainJob's node pods from its trainer settings
// (numNodes, resourcesPerNode); a Trainer JobSet's initializer is not
// counted as a rank.
func TestDiagnoseOfflineJobSetAndTrainJob(t *testing.T) {
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

	tj := filepath.Join(dir, "trainjob.yaml")
	require.NoError(t, os.WriteFile(tj, []byte(`apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: fine-tune, namespace: ml}
spec:
  runtimeRef: {name: torch-distributed}
  trainer:
    numNodes: 2
    resourcesPerNode: {limits: {nvidia.com/mig-3g.40gb: "1"}}
`), 0o644))
	code, out, errOut = run(t, nil, "diagnose", "--offline", "-f", nodes, "-f", tj)
	require.Equal(t, 1, code, out+errOut)
	require.Contains(t, out, "TrainJob ml/fine-tune")
	require.Contains(t, out, "node (2 pods)")
	require.Contains(t, out, "SHAPE_MISMATCH")
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
