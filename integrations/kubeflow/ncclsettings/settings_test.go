package ncclsettings

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/verdict"
)

func job(t *testing.T, w *kubeflowtest.PyTorchJobWrapper) kubeflow.Job {
	t.Helper()
	j, err := kubeflow.FromObject(w.Obj())
	require.NoError(t, err)
	return j
}

func TestTemplatesReadTheGPUContainer(t *testing.T) {
	j := job(t, kubeflowtest.MakePyTorchJob("train", "ml").Master().Workers(3).
		Request("nvidia.com/mig-1g.10gb", "2").
		PodSpec(func(s *corev1.PodSpec) {
			s.Containers[0].Env = []corev1.EnvVar{
				{Name: "NCCL_MULTI_RANK_GPU_ENABLE", Value: "1"},
				{Name: "NCCL_SOCKET_IFNAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "NCCL_IB_HCA", Value: "$(HCAS)"},
			}
			// A sidecar without GPUs first: the rank container is the one with them.
			s.Containers = append([]corev1.Container{{Name: "sidecar", Image: "busybox", Env: []corev1.EnvVar{{Name: "NCCL_P2P_DISABLE", Value: "1"}}}}, s.Containers...)
		}))
	ts := Templates(j)
	require.Len(t, ts, 2)
	for _, r := range ts {
		require.Equal(t, -1, r.Rank)
		require.Equal(t, 2, r.GPUs)
		require.True(t, r.MIGRequested)
		require.Contains(t, r.Name, "container pytorch")
		v, set, known := r.Env.String("NCCL_MULTI_RANK_GPU_ENABLE")
		require.Equal(t, "1", v)
		require.True(t, set && known)
		for _, unresolved := range []string{"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"} {
			_, _, known := r.Env.String(unresolved)
			require.False(t, known, unresolved)
		}
		_, set, _ = r.Env.String("NCCL_P2P_DISABLE")
		require.False(t, set, "the sidecar's env is not the rank's")
	}
	require.Equal(t, 1, ts[0].Replicas) // Master
	require.Equal(t, 3, ts[1].Replicas) // Worker

	byRank := ByRank(j)
	require.Len(t, byRank, 4)
	for i := 0; i < 4; i++ {
		require.Equal(t, i, byRank[i].Rank)
	}
}

func TestEnvFromMakesOtherNamesUnknown(t *testing.T) {
	j := job(t, kubeflowtest.MakePyTorchJob("train", "ml").Request("nvidia.com/mig-1g.10gb", "4").
		PodSpec(func(s *corev1.PodSpec) {
			s.Containers[0].Env = []corev1.EnvVar{{Name: "NCCL_VERSION", Value: "2.31.2"}}
			s.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "nccl"}}}}
		}))
	// NCCL_MULTI_RANK_GPU_ENABLE may come from the ConfigMap: not judged.
	require.Empty(t, Judge(j))

	j = job(t, kubeflowtest.MakePyTorchJob("train", "ml").Request("nvidia.com/mig-1g.10gb", "4").
		PodSpec(func(s *corev1.PodSpec) {
			s.Containers[0].Env = []corev1.EnvVar{{Name: "NCCL_VERSION", Value: "2.31.2"}}
		}))
	fs := Judge(j)
	require.Len(t, fs, 1)
	require.Equal(t, verdict.RuleNCCLMultiRankGPU, fs[0].Rule)
}
