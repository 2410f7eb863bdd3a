package ncclsettings

import (
	"testing"

	mpiv2 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/verdict"
)

// mpiJob is an MPIJob of two Workers on one 1g.10gb MIG instance each
// (NCCL 2.31 in their env) whose Launcher runs command.
// With cached, the job is the controller cache's copy (kind.Strip).
func mpiJob(t *testing.T, cached bool, command []string, launcherEnv ...corev1.EnvVar) kubeflow.Job {
	t.Helper()
	o := kubeflowtest.MakeMPIJob("mpi", "ml").Workers(2).WorkerRequest("nvidia.com/mig-1g.10gb", "1").Obj()
	l := &o.Spec.MPIReplicaSpecs[mpiv2.MPIReplicaTypeLauncher].Template.Spec.Containers[0]
	l.Command, l.Env = command, launcherEnv
	w := &o.Spec.MPIReplicaSpecs[mpiv2.MPIReplicaTypeWorker].Template.Spec.Containers[0]
	w.Env = []corev1.EnvVar{{Name: "NCCL_VERSION", Value: "2.31.2"}, {Name: "NCCL_NVLS_ENABLE", Value: "0"}}
	if cached {
		k, ok := kubeflow.ByGVK(kubeflow.MPIJobGVK)
		require.True(t, ok)
		k.Strip(o)
	}
	j, err := kubeflow.FromObject(o)
	require.NoError(t, err)
	return j
}

// An MPIJob's ranks run with what the Launcher's mpirun exports to them,
// over their own container's env: the NCCL settings rules judge that.
func TestLauncherExports(t *testing.T) {
	for _, tc := range []struct {
		name    string
		command []string
		env     []corev1.EnvVar
		want    []string
		nvls    string // NCCL_NVLS_ENABLE as rank 0 runs with it
	}{
		{"-x NAME=VALUE overrides the Worker's env",
			[]string{"mpirun", "-np", "2", "-x", "NCCL_NVLS_ENABLE=1", "-x", "LD_LIBRARY_PATH", "python", "train.py"}, nil,
			[]string{verdict.RuleNCCLNVLSOnMIG}, "1"},
		{"-x NAME takes the Launcher's value",
			[]string{"mpirun", "-np", "2", "-x", "NCCL_NVLS_ENABLE", "python", "train.py"}, []corev1.EnvVar{{Name: "NCCL_NVLS_ENABLE", Value: "1"}},
			[]string{verdict.RuleNCCLNVLSOnMIG}, "1"},
		{"a shell command line with -genv",
			[]string{"/bin/bash", "-c", `sleep 5 && mpiexec -n 2 -genv NCCL_NVLS_ENABLE 1 python train.py`}, nil,
			[]string{verdict.RuleNCCLNVLSOnMIG}, "1"},
		{"-x of a name the Launcher does not set exports nothing",
			[]string{"mpirun", "-np", "2", "-x", "NCCL_NVLS_ENABLE", "python", "train.py"}, nil, nil, "0"},
		{"no exports: the Worker's env",
			[]string{"mpirun", "-np", "2", "--mca", "btl", "^openib", "python", "train.py"}, nil, nil, "0"},
		{"a Launcher that runs no mpirun",
			[]string{"python", "-x", "NCCL_NVLS_ENABLE=1"}, nil, nil, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := mpiJob(t, false, tc.command, tc.env...)
			var got []string
			for _, f := range Judge(j) {
				got = append(got, f.Rule)
			}
			require.Equal(t, tc.want, got)
			// The gang verdict reads the controller's cached copy.
			byRank := ByRank(mpiJob(t, true, tc.command, tc.env...))
			require.Len(t, byRank, 2)
			v, _, known := byRank[0].Env.String("NCCL_NVLS_ENABLE")
			require.True(t, known)
			require.Equal(t, tc.nvls, v, "the gang verdict sees the same settings")
		})
	}
}
