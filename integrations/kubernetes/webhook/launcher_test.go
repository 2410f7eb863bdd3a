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
