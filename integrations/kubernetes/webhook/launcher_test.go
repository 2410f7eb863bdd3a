package webhook

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/launchergate"
)

const mpiJob = `{"apiVersion":"kubeflow.org/v2beta1","kind":"MPIJob","metadata":{"name":"m","namespace":"ml","labels":{"rankgate.io/launcher-gate":"enabled"}},
"spec":{"mpiReplicaSpecs":{
 "Launcher":{"replicas":1,"template":{"spec":{"containers":[{"name":"launcher","image":"u","command":["mpirun"],"args":["-np","2","python","train.py"]}]}}},
 "Worker":{"replicas":2,"template":{"spec":{"containers":[{"name":"worker","image":"u","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}}}}}`

func mpiTemplate(t *testing.T, obj map[string]any, rt string) corev1.PodSpec {
	t.Helper()
	return templateSpec(t, obj, "mpiReplicaSpecs", rt)
}

// The mutating webhook gates an MPIJob's launcher when the job asks for it
// (rankgate.io/launcher-gate=enabled), once; the workers get their rank
// init containers as always; a job that does not ask keeps its launcher.
func TestMutateGatesTheMPIJobLauncher(t *testing.T) {
	m, err := NewMutator(Options{Image: "ghcr.io/rankgate/rankgate:v1.2.3", GateURL: "https://rankgate-gate.rankgate-system.svc:443",
		LauncherGate: &launchergate.Options{Image: "ghcr.io/rankgate/rankgate:v1.2.3", GateURL: "https://rankgate-gate.rankgate-system.svc:443", CAConfigMap: CAConfigMapName}})
	require.NoError(t, err)
	obj, changed := mutate(t, m, mpiKind, []byte(mpiJob))
	require.True(t, changed)

	l := mpiTemplate(t, obj, "Launcher")
	require.Equal(t, launchergate.InitContainerName, l.InitContainers[0].Name)
	argv := l.Containers[0].Command
	require.Equal(t, []string{launchergate.Binary, "launch", "--gang"}, argv[:3])
	require.Equal(t, []string{"--", "mpirun", "-np", "2", "python", "train.py"}, argv[len(argv)-6:], "the original command runs behind the gate")
	require.Equal(t, InitName, mpiTemplate(t, obj, "Worker").InitContainers[0].Name)

	before, _ := json.Marshal(obj)
	after, changed := mutate(t, m, mpiKind, before)
	require.False(t, changed, "second pass")
	require.Equal(t, obj, after)

	require.NoError(t, json.Unmarshal([]byte(mpiJob), &obj))
	delete(obj["metadata"].(map[string]any), "labels")
	unlabelled, _ := json.Marshal(obj)
	obj, _ = mutate(t, m, mpiKind, unlabelled)
	require.Equal(t, []string{"mpirun"}, mpiTemplate(t, obj, "Launcher").Containers[0].Command, "no launcher gate unless asked")
}

// A JobSet as the Trainer makes it from an MPI runtime (runLauncherAsNode
// false): the node step runs the ranks, the launcher (labelled as the
// trainer step) runs mpirun. With the launcher gate the node template
// gets the label that sends its pods to the Pod webhook, the launcher the gate and the job-name
// label the gate finds its job by; once. A TrainJob asking for the gate
// carries the ask to its JobSet in its runtime patch.
func TestMutateGatesTheTrainJobMPILauncher(t *testing.T) {
	const mpiJobSet = `{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"mpi-train","namespace":"ml","labels":{"rankgate.io/gate":"enabled","rankgate.io/launcher-gate":"enabled"}},
"spec":{"replicatedJobs":[
 {"name":"node","replicas":1,"template":{"spec":{"parallelism":2,"completions":2,"completionMode":"Indexed","template":{"spec":{"containers":[{"name":"node","image":"u","command":["/usr/sbin/sshd"],"resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}}}},
 {"name":"launcher","replicas":1,"template":{"metadata":{"labels":{"trainer.kubeflow.org/trainjob-ancestor-step":"trainer"}},
  "spec":{"parallelism":1,"completions":1,"completionMode":"Indexed","template":{"spec":{"containers":[{"name":"node","image":"u","command":["mpirun"],"args":["-np","2","python","train.py"]}]}}}}}]}}`
	m, err := NewMutator(Options{Image: "ghcr.io/rankgate/rankgate:v1.2.3", GateURL: "https://rankgate-gate.rankgate-system.svc:443",
		LauncherGate: &launchergate.Options{Image: "ghcr.io/rankgate/rankgate:v1.2.3", GateURL: "https://rankgate-gate.rankgate-system.svc:443", CAConfigMap: CAConfigMapName}})
	require.NoError(t, err)
	obj, changed := mutate(t, m, jobSetKind, []byte(mpiJobSet))
	require.True(t, changed)
	node := jobSetPod(t, obj, 0)
	require.Equal(t, "rank-init", node.Labels["rankgate.io/inject"], "the node step runs the ranks")
	require.Equal(t, "mpi-train", node.Labels["training.kubeflow.org/job-name"])
	l := jobSetPod(t, obj, 1)
	require.Equal(t, launchergate.InitContainerName, l.Spec.InitContainers[0].Name)
	require.Len(t, l.Spec.InitContainers, 1, "the launcher runs no rank: no rank init container")
	argv := l.Spec.Containers[0].Command
	require.Equal(t, []string{launchergate.Binary, "launch", "--gang"}, argv[:3])
	require.Equal(t, []string{"--", "mpirun", "-np", "2", "python", "train.py"}, argv[len(argv)-6:])
	require.Equal(t, "mpi-train", l.Labels["training.kubeflow.org/job-name"])

	before, _ := json.Marshal(obj)
	after, changed := mutate(t, m, jobSetKind, before)
	require.False(t, changed, "second pass")
	require.Equal(t, obj, after)

	// Without the ask, the launcher is left as it is.
	require.NoError(t, json.Unmarshal([]byte(mpiJobSet), &obj))
	delete(obj["metadata"].(map[string]any)["labels"].(map[string]any), "rankgate.io/launcher-gate")
	unasked, _ := json.Marshal(obj)
	obj, _ = mutate(t, m, jobSetKind, unasked)
	l = jobSetPod(t, obj, 1)
	require.Equal(t, []string{"mpirun"}, l.Spec.Containers[0].Command)
	require.Empty(t, l.Labels["training.kubeflow.org/job-name"])

	tj := `{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"mpi-train","namespace":"ml","labels":{"rankgate.io/gate":"enabled","rankgate.io/launcher-gate":"enabled"}},
"spec":{"runtimeRef":{"name":"mpi-distributed"},"trainer":{"numNodes":2}}}`
	obj, changed = mutate(t, m, trainJobKind, []byte(tj))
	require.True(t, changed)
	patch := obj["spec"].(map[string]any)["runtimePatches"].([]any)[0].(map[string]any)
	require.Equal(t, map[string]any{"rankgate.io/gate": "enabled", "rankgate.io/launcher-gate": "enabled"},
		patch["trainingRuntimeSpec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["labels"])
}
