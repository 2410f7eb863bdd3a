//go:build !rankgate_node

package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/verdict"
)

// diagnose job takes a JobSet and a TrainJob in every form it takes a
// PyTorchJob, and judges the JobSet with its pods.
func TestDiagnoseLiveJobSetAndTrainJob(t *testing.T) {
	var objs []runtime.Object
	raw, err := os.ReadFile(filepath.Join("testdata", "jobset-pending.yaml"))
	require.NoError(t, err)
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		u := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object))
		if u.GetKind() == "Pod" {
			p := &corev1.Pod{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p))
			objs = append(objs, p)
			continue
		}
		objs = append(objs, u)
	}
	tj := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(`apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: fine-tune, namespace: ml}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: 1, resourcesPerNode: {limits: {nvidia.com/gpu: "4"}}}
`), &tj.Object))
	objs = append(objs, tj, clustertest.MakeNode("h100-1").Allocatable("nvidia.com/gpu", "4").Obj())
	// Without its runtime the TrainJob's pods are unknown: exit 2.
	l, _ := fakeLive(t, objs...)
	useLive(t, l)
	code, out, errOut := run(t, nil, "diagnose", "job", "trainjob/fine-tune", "-n", "ml")
	require.Equal(t, verdict.ExitUsage, code, out)
	require.Contains(t, errOut, "TrainJob ml/fine-tune: its runtime ClusterTrainingRuntime torch-distributed does not exist")

	rt := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(`apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: torch-distributed}
spec:
  mlPolicy: {numNodes: 1, torch: {numProcPerNode: auto}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec:
            template:
              spec:
                containers: [{name: node, image: pytorch}]
`), &rt.Object))
	l, _ = fakeLive(t, append(objs, rt)...)
	useLive(t, l)

	for _, args := range [][]string{{"jobset", "train", "-n", "ml"}, {"jobset/train", "-n", "ml"}, {"jobsets.jobset.x-k8s.io/train", "-n", "ml"}, {"ml/train"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := run(t, nil, append([]string{"diagnose", "job", "-o", "json"}, args...)...)
			require.Equal(t, verdict.ExitFail, code, errOut)
			rep := decodeReport(t, out)
			require.Equal(t, "JobSet ml/train", rep.Subject)
			require.Equal(t, []string{"GANG_TOO_LARGE"}, rep.RuleIDs())
		})
	}
	code, out, errOut = run(t, nil, "diagnose", "job", "trainjob/fine-tune", "-n", "ml", "-o", "json")
	require.Equal(t, verdict.ExitPass, code, errOut)
	require.Equal(t, "TrainJob ml/fine-tune", decodeReport(t, out).Subject)
}

// Live, a TrainJob's pods come from the Trainer's snapshot of its runtime
// when there is one (the runtime asks 2g.20gb now, the snapshot the
// TrainJob was built from 1g.10gb, which the node offers).
func TestDiagnoseLiveTrainJobRuntimeSnapshot(t *testing.T) {
	var objs []runtime.Object
	for _, doc := range []string{`apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: fine-tune, namespace: ml, uid: 0b6c5a8e-tj}
spec:
  runtimeRef: {name: torch-mig, kind: TrainingRuntime}
  suspend: true
  trainer: {numNodes: 2}
`, `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: torch-mig, namespace: ml}
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
                containers: [{name: node, image: pytorch, resources: {limits: {nvidia.com/mig-2g.20gb: "1"}}}]
`} {
		u := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object))
		objs = append(objs, u)
	}
	snapshot := &corev1.ConfigMap{}
	require.NoError(t, yaml.Unmarshal([]byte(`metadata:
  name: fine-tune-runtime-snapshot
  namespace: ml
  ownerReferences: [{apiVersion: trainer.kubeflow.org/v1alpha1, kind: TrainJob, name: fine-tune, uid: 0b6c5a8e-tj, controller: true}]
data:
  runtime: |
    apiVersion: trainer.kubeflow.org/v1alpha1
    kind: TrainingRuntime
    metadata: {name: torch-mig, namespace: ml}
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
                    containers: [{name: node, image: pytorch, resources: {limits: {nvidia.com/mig-1g.10gb: "1"}}}]
`), snapshot))
	node := clustertest.MakeNode("h100-1").Labels(map[string]string{
		"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "1", "nvidia.com/mig.strategy": "mixed",
		"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "success",
	}).Allocatable("nvidia.com/mig-1g.10gb", "7").Obj()
	l, _ := fakeLive(t, append(objs, snapshot, node)...)
	useLive(t, l)
	code, out, errOut := run(t, nil, "diagnose", "job", "trainjob/fine-tune", "-n", "ml", "-o", "json")
	require.Equal(t, verdict.ExitPass, code, out+errOut)
	rep := decodeReport(t, out)
	require.Equal(t, "TrainJob ml/fine-tune (suspended: judged as if resumed)", rep.Subject)
	require.Contains(t, rep.RuleIDs(), "SCHEDULABLE")

	// Without the snapshot, the runtime as it is now: 2g.20gb is offered
	// by no node.
	l, _ = fakeLive(t, append(objs, node)...)
	useLive(t, l)
	code, out, errOut = run(t, nil, "diagnose", "job", "trainjob/fine-tune", "-n", "ml", "-o", "json")
	require.Equal(t, verdict.ExitFail, code, out+errOut)
	require.Contains(t, decodeReport(t, out).RuleIDs(), "SHAPE_MISMATCH")
}
