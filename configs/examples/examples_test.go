// Package examples holds example manifests (YAML only); this test keeps
// them honest: they decode strictly into the real Kubeflow types, and every
// rankgate flag they use exists.
package examples_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	mpiv2 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	kftraining "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/cmd/rankgate/app"
)

func decode(t *testing.T, file string, into any) {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(data, into), file)
}

// launchHelp is `rankgate launch --help`.
func launchHelp(t *testing.T) string {
	t.Helper()
	var out bytes.Buffer
	code := app.Run(context.Background(), app.Streams{In: strings.NewReader(""), Out: &out, Err: &out}, []string{"launch", "--help"})
	require.Equal(t, 0, code)
	return out.String()
}

// checkLaunch checks a container's `rankgate launch [flags] -- CMD` and
// returns CMD.
func checkLaunch(t *testing.T, c corev1.Container, help string) []string {
	t.Helper()
	cmd := c.Command
	require.GreaterOrEqual(t, len(cmd), 3, c.Name)
	require.Equal(t, []string{"rankgate", "launch"}, cmd[:2])
	dash := -1
	for i, a := range cmd {
		if a == "--" {
			dash = i
			break
		}
	}
	require.Positive(t, dash, "%s: no -- before CMD", c.Name)
	for _, f := range cmd[2:dash] {
		name, _, _ := strings.Cut(f, "=")
		require.Contains(t, help, "  "+name+" ", "%s: unknown flag %s", c.Name, name)
	}
	require.Contains(t, cmd, "--termination-log=/dev/termination-log")
	require.Equal(t, corev1.TerminationMessageFallbackToLogsOnError, c.TerminationMessagePolicy)
	return cmd[dash+1:]
}

func TestPyTorchJobExample(t *testing.T) {
	var job kftraining.PyTorchJob
	decode(t, "pytorchjob-launch.yaml", &job)
	help := launchHelp(t)
	require.NotNil(t, job.Spec.NprocPerNode)
	nproc, err := strconv.Atoi(*job.Spec.NprocPerNode)
	require.NoError(t, err)
	for _, rt := range []kftraining.ReplicaType{kftraining.PyTorchJobReplicaTypeMaster, kftraining.PyTorchJobReplicaTypeWorker} {
		spec := job.Spec.PyTorchReplicaSpecs[rt]
		require.NotNil(t, spec, rt)
		c := spec.Template.Spec.Containers[0]
		require.Equal(t, "pytorch", c.Name, "the training operator looks for this container name")
		cmd := checkLaunch(t, c, help)
		require.Equal(t, "torchrun", cmd[0])
		gpus := c.Resources.Limits["nvidia.com/gpu"]
		require.Equal(t, int64(nproc), gpus.Value(), "nprocPerNode must match the GPUs (NPROC_EXCEEDS_DEVICES)")
		require.Greater(t, *spec.Template.Spec.TerminationGracePeriodSeconds, int64(60), "above --grace")
	}
}

func TestMPIJobExample(t *testing.T) {
	var job mpiv2.MPIJob
	decode(t, "mpijob-launch.yaml", &job)
	help := launchHelp(t)
	launcher := job.Spec.MPIReplicaSpecs[mpiv2.MPIReplicaTypeLauncher]
	worker := job.Spec.MPIReplicaSpecs[mpiv2.MPIReplicaTypeWorker]
	require.NotNil(t, launcher)
	require.NotNil(t, worker)
	cmd := checkLaunch(t, launcher.Template.Spec.Containers[0], help)
	require.Contains(t, launcher.Template.Spec.Containers[0].Command, "--mpi-hostfile=/etc/mpi/hostfile")
	require.Equal(t, "mpirun", cmd[0])
	np, err := strconv.Atoi(cmd[2])
	require.Equal(t, "-np", cmd[1])
	require.NoError(t, err)
	require.Equal(t, int(*worker.Replicas)*int(*job.Spec.SlotsPerWorker), np, "-np must equal workers x slotsPerWorker (HOSTFILE_SLOTS)")
	joined := strings.Join(cmd, " ")
	require.Contains(t, joined, "-x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS", "Open MPI forwards these only with -x")
}
