package trainjob_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
)

func loadRuntime(t *testing.T, name string) *trainjob.Runtime {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	js, err := yaml.YAMLToJSON(raw)
	require.NoError(t, err)
	rt, err := trainjob.DecodeRuntime(js)
	require.NoError(t, err)
	return rt
}

func trainJob(t *testing.T, doc string) *trainjob.TrainJob {
	t.Helper()
	tj := &trainjob.TrainJob{}
	require.NoError(t, yaml.Unmarshal([]byte(doc), tj))
	return tj
}

func q(s string) resource.Quantity { return resource.MustParse(s) }

// A suspended TrainJob queued by Kueue: numNodes and resourcesPerNode
// from the TrainJob, merged key by key over the runtime's node container
// (the runtime's nvidia.com/gpu stays, as the Trainer keeps it); Kueue's
// runtime patch adds its flavor's node selector to the node step; the
// trainer image and env land on the node container.
func TestDeriveTorch(t *testing.T) {
	rt := loadRuntime(t, "torch-distributed.yaml")
	tj := trainJob(t, `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: fine-tune, namespace: ml}
spec:
  runtimeRef: {name: torch-distributed, kind: ClusterTrainingRuntime}
  suspend: true
  trainer:
    image: example.com/train:1
    env: [{name: NCCL_DEBUG, value: INFO}]
    numNodes: 3
    resourcesPerNode:
      limits: {nvidia.com/mig-1g.10gb: "1", cpu: "6"}
  runtimePatches:
  - manager: kueue.x-k8s.io/manager
    trainingRuntimeSpec:
      template:
        metadata: {labels: {kueue.x-k8s.io/podset: node}}
        spec:
          replicatedJobs:
          - name: node
            template:
              spec:
                template:
                  spec:
                    nodeSelector: {pool: h100-mig}
`)
	spec, err := trainjob.Derive(tj, rt)
	require.NoError(t, err)
	require.Len(t, spec.ReplicatedJobs, 2)
	require.Equal(t, "model-initializer", spec.ReplicatedJobs[0].Name, "the runtime's order is kept")
	node := spec.ReplicatedJobs[1]
	require.Equal(t, int32(3), *node.Template.Spec.Parallelism)
	require.Equal(t, int32(3), *node.Template.Spec.Completions)
	pod := node.Template.Spec.Template.Spec
	require.Equal(t, map[string]string{"pool": "h100-mig"}, pod.NodeSelector)
	require.Len(t, pod.Tolerations, 1, "the runtime's tolerations stay")
	c := pod.Containers[0]
	require.Equal(t, "example.com/train:1", c.Image)
	require.Equal(t, []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "INFO"}}, c.Env)
	require.Equal(t, corev1.ResourceList{"nvidia.com/gpu": q("1"), "nvidia.com/mig-1g.10gb": q("1"), "cpu": q("6")}, c.Resources.Limits)
	require.Equal(t, corev1.ResourceList{"cpu": q("4"), "memory": q("32Gi")}, c.Resources.Requests)
	require.Equal(t, int32(1), *spec.ReplicatedJobs[0].Template.Spec.Parallelism, "the initializer runs one pod")
	require.Empty(t, rt.Spec.Template.Spec.ReplicatedJobs[1].Template.Spec.Template.Spec.NodeSelector, "the runtime is not changed")

	j, err := kubeflow.FromObject(tj)
	require.NoError(t, err)
	r, err := trainjob.Resolve(j, rt)
	require.NoError(t, err)
	require.NoError(t, r.Validate())
	specs := r.ReplicaSpecs()
	require.Len(t, specs, 1, "the initializer completes before the node step: left out")
	require.Equal(t, "node", specs[0].Type)
	require.Equal(t, int32(3), specs[0].Replicas)
	require.True(t, specs[0].RunsRanks)
	require.Equal(t, 3, kubeflow.RankPods(r))
	require.Contains(t, r.Templates(), "node")
}

// Without numNodes the runtime's mlPolicy.numNodes is the node count, and
// without resourcesPerNode the runtime's resources stand.
func TestDeriveRuntimeDefaults(t *testing.T) {
	rt := loadRuntime(t, "torch-distributed.yaml")
	rt.Spec.MLPolicy.NumNodes = ptr.To[int32](4)
	tj := trainJob(t, `{metadata: {name: x, namespace: ml}, spec: {runtimeRef: {name: torch-distributed}}}`)
	j, err := kubeflow.FromObject(tj)
	require.NoError(t, err)
	require.ErrorContains(t, j.Validate(), "numNodes is not set", "alone, the TrainJob has no node count")
	r, err := trainjob.Resolve(j, rt)
	require.NoError(t, err)
	require.NoError(t, r.Validate())
	specs := r.ReplicaSpecs()
	require.Equal(t, int32(4), specs[0].Replicas)
	require.Equal(t, corev1.ResourceList{"nvidia.com/gpu": q("1"), "cpu": q("8")}, specs[0].Template.Spec.Containers[0].Resources.Limits)
}

// An MPI runtime whose launcher runs as a node: the node step runs
// numNodes-1 pods with resourcesPerNode, the launcher one pod with them
// too; the launcher is kept as a pod that runs no rank.
func TestDeriveMPILauncherAsNode(t *testing.T) {
	rt := loadRuntime(t, "deepspeed-distributed.yaml")
	tj := trainJob(t, `{metadata: {name: ds, namespace: ml}, spec: {runtimeRef: {name: deepspeed-distributed}, trainer: {numNodes: 3, resourcesPerNode: {limits: {nvidia.com/gpu: "8"}}}}}`)
	spec, err := trainjob.Derive(tj, rt)
	require.NoError(t, err)
	require.Equal(t, int32(2), *spec.ReplicatedJobs[0].Template.Spec.Parallelism)
	require.Equal(t, int32(1), *spec.ReplicatedJobs[1].Template.Spec.Parallelism)
	for _, rj := range spec.ReplicatedJobs {
		require.Equal(t, q("8"), rj.Template.Spec.Template.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"], rj.Name)
	}

	// Without runLauncherAsNode the node step runs numNodes pods and the
	// launcher gets no resourcesPerNode beyond its trainer label's.
	rt.Spec.MLPolicy.MPI.RunLauncherAsNode = ptr.To(false)
	spec, err = trainjob.Derive(tj, rt)
	require.NoError(t, err)
	require.Equal(t, int32(3), *spec.ReplicatedJobs[0].Template.Spec.Parallelism)
	require.Empty(t, spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Resources.Limits)

	j, err := kubeflow.FromObject(tj)
	require.NoError(t, err)
	r, err := trainjob.Resolve(j, rt)
	require.NoError(t, err)
	specs := r.ReplicaSpecs()
	require.Len(t, specs, 2)
	require.Equal(t, "launcher", specs[1].Type)
	require.False(t, specs[1].RunsRanks)
	_, err = kubeflow.RankOf(r, nodePod("launcher", 0))
	require.ErrorIs(t, err, kubeflow.ErrNoRank)
}

// Runtime references and runtimes that cannot give the pods.
func TestRuntimeErrors(t *testing.T) {
	_, err := trainjob.RuntimeRef{Name: "x", Kind: ptr.To("Other")}.Key("ml")
	require.ErrorContains(t, err, `spec.runtimeRef.kind "Other"`)
	k, err := trainjob.RuntimeRef{Name: "x", Kind: ptr.To(trainjob.KindTrainingRuntime)}.Key("ml")
	require.NoError(t, err)
	require.Equal(t, "TrainingRuntime ml/x", k.String())

	_, err = trainjob.DecodeRuntime([]byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainingRuntime","metadata":{"name":"x"}}`))
	require.ErrorContains(t, err, "metadata.namespace is empty")

	rt := loadRuntime(t, "torch-distributed.yaml")
	rt.Spec.Template.Spec.ReplicatedJobs[1].Name = "trainer"
	j, err := kubeflow.FromObject(trainJob(t, `{metadata: {name: x, namespace: ml}, spec: {runtimeRef: {name: torch-distributed}, trainer: {numNodes: 1}}}`))
	require.NoError(t, err)
	_, err = trainjob.Resolve(j, rt)
	require.ErrorContains(t, err, `ClusterTrainingRuntime torch-distributed has no ReplicatedJob "node"`)
}

// A runtime written by hand may leave replicas out: one Job, as the
// API server's default makes it; an explicit 0 stays 0.
func TestDecodeRuntimeDefaultsReplicas(t *testing.T) {
	rt, err := trainjob.DecodeRuntime([]byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"ClusterTrainingRuntime","metadata":{"name":"mpi"},
"spec":{"mlPolicy":{"mpi":{}},"template":{"spec":{"replicatedJobs":[{"name":"node","template":{"spec":{"template":{"spec":{"containers":[{"name":"node","image":"i"}]}}}}},
 {"name":"spare","replicas":0}]}}}}`))
	require.NoError(t, err)
	require.Equal(t, int32(1), rt.Spec.Template.Spec.ReplicatedJobs[0].Replicas)
	require.Equal(t, int32(0), rt.Spec.Template.Spec.ReplicatedJobs[1].Replicas)
	j, err := kubeflow.FromObject(trainJob(t, `{metadata: {name: x, namespace: ml}, spec: {runtimeRef: {name: mpi}, trainer: {numNodes: 3}}}`))
	require.NoError(t, err)
	r, err := trainjob.Resolve(j, rt)
	require.NoError(t, err)
	require.Equal(t, int32(3), r.ReplicaSpecs()[0].Replicas, "the MPI node step, not labelled as the trainer, runs numNodes pods")
}
