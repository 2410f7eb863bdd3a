package cluster

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// A queued TrainJob, its ClusterTrainingRuntime as it is now (one full
// GPU per node) and the Trainer's snapshot of it from when the TrainJob
// was first built (one 1g.10gb MIG instance per node).
const snapshotDump = `apiVersion: v1
kind: List
items:
- apiVersion: trainer.kubeflow.org/v1alpha1
  kind: TrainJob
  metadata: {name: fine-tune, namespace: ml, uid: tj-uid}
  spec:
    runtimeRef: {name: torch-distributed, kind: ClusterTrainingRuntime}
    suspend: true
    trainer: {numNodes: 2}
- apiVersion: trainer.kubeflow.org/v1alpha1
  kind: ClusterTrainingRuntime
  metadata: {name: torch-distributed}
  spec:
    mlPolicy: {numNodes: 1}
    template:
      spec:
        replicatedJobs:
        - name: node
          template:
            metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
            spec:
              template:
                spec:
                  containers: [{name: node, image: t, resources: {limits: {nvidia.com/gpu: "1"}}}]
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: fine-tune-runtime-snapshot
    namespace: ml
    ownerReferences:
    - {apiVersion: trainer.kubeflow.org/v1alpha1, kind: TrainJob, name: fine-tune, uid: OWNER, controller: true}
  data:
    runtime: |
      metadata:
        name: torch-distributed
      spec:
        mlPolicy: {numNodes: 1}
        template:
          spec:
            replicatedJobs:
            - name: node
              template:
                metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
                spec:
                  template:
                    spec:
                      containers: [{name: node, image: t, resources: {limits: {nvidia.com/mig-1g.10gb: "1"}}}]
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: other, namespace: ml}
`

// As the Trainer, diagnose builds a TrainJob's pods from its runtime
// snapshot (a ConfigMap the TrainJob controls) rather than from the
// runtime as it is now; a snapshot of another TrainJob of that name (an
// earlier one: another UID) is not used, and other ConfigMaps are skipped.
func TestResolveTakesTheRuntimeSnapshot(t *testing.T) {
	for owner, want := range map[string]corev1.ResourceName{"tj-uid": "nvidia.com/mig-1g.10gb", "earlier-uid": "nvidia.com/gpu"} {
		t.Run(owner, func(t *testing.T) {
			b := NewBuilder()
			var stats LoadStats
			require.NoError(t, Load(b, "dump.yaml", strings.NewReader(strings.Replace(snapshotDump, "OWNER", owner, 1)), &stats))
			require.Equal(t, map[string]int{"v1 ConfigMap": 1}, stats.Skipped)
			require.Len(t, b.Jobs(), 1)
			j, err := b.Resolve(b.Jobs()[0])
			require.NoError(t, err)
			specs := j.ReplicaSpecs()
			require.Len(t, specs, 1)
			require.Equal(t, int32(2), specs[0].Replicas)
			require.Contains(t, specs[0].Template.Spec.Containers[0].Resources.Limits, want)
			require.Len(t, specs[0].Template.Spec.Containers[0].Resources.Limits, 1)
		})
	}
}

// The runtime deleted since: the snapshot alone gives the pods; without
// either, the error names the runtime and is bad input (exit 2).
func TestResolveWithoutTheRuntime(t *testing.T) {
	docs := strings.Split(snapshotDump, "\n- ")
	noRuntime := strings.Join([]string{docs[0], docs[1], docs[3], docs[4]}, "\n- ")
	noRuntime = strings.Replace(noRuntime, "OWNER", "tj-uid", 1)
	b := NewBuilder()
	require.NoError(t, Load(b, "dump.yaml", strings.NewReader(noRuntime), nil))
	ws, err := b.Workloads()
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.Equal(t, "node", ws[0].PodSets[0].Name)

	b = NewBuilder()
	require.NoError(t, Load(b, "dump.yaml", strings.NewReader(strings.Join([]string{docs[0], docs[1]}, "\n- ")), nil))
	_, err = b.Workloads()
	var missing *RuntimeMissingError
	require.ErrorAs(t, err, &missing)
	require.Equal(t, 2, missing.ExitCode())
	require.EqualError(t, err, "TrainJob ml/fine-tune: its runtime ClusterTrainingRuntime torch-distributed is not in the files: a TrainJob's pods are made from it; add its dump (kubectl get clustertrainingruntime torch-distributed -o yaml, or kubectl get trainjobs,trainingruntimes,clustertrainingruntimes -A -o yaml)")
}
