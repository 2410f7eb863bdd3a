package jobkind

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// A cached template keeps its rank container's launch settings and GPU
// resources and nothing else, however large the template.
func TestStripTemplateKeepsLaunchSettingsOnly(t *testing.T) {
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "fetch", Image: "busybox"}},
		Volumes:        []corev1.Volume{{Name: "data"}},
		Containers: []corev1.Container{
			{Name: "sidecar", Image: "envoy", Env: []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "INFO"}}},
			{Name: "pytorch", Image: "nvcr.io/nvidia/pytorch:25.10-py3",
				Command: []string{"torchrun", "train.py"},
				Env: []corev1.EnvVar{
					{Name: "NCCL_NVLS_ENABLE", Value: "1"}, {Name: "HF_TOKEN", Value: "secret"},
					{Name: "FI_PROVIDER", Value: "efa"}, {Name: "UCX_TLS", Value: "rc"},
					{Name: "CUDA_VISIBLE_DEVICES", Value: "0"}, {Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"},
					{Name: "NCCL_SOCKET_IFNAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				},
				EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{}}, {SecretRef: &corev1.SecretEnvSource{}}},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					"nvidia.com/mig-1g.10gb": resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("8")}}},
		},
	}}
	StripTemplate(&tmpl)
	require.Len(t, tmpl.Spec.Containers, 1)
	c := tmpl.Spec.Containers[0]
	require.Equal(t, "pytorch", c.Name, "the first container asking for GPUs")
	require.Equal(t, "nvcr.io/nvidia/pytorch:25.10-py3", c.Image)
	var names []string
	for _, e := range c.Env {
		names = append(names, e.Name)
	}
	require.Equal(t, []string{"NCCL_NVLS_ENABLE", "FI_PROVIDER", "UCX_TLS", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NCCL_SOCKET_IFNAME"}, names)
	require.NotNil(t, c.Env[5].ValueFrom, "a valueFrom stays one: neither set nor unset")
	require.Len(t, c.EnvFrom, 1, "envFrom is kept as a mark that other names are unknown")
	require.Equal(t, corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1")}, c.Resources.Limits)
	require.Empty(t, c.Command)
	require.Empty(t, tmpl.Spec.InitContainers)
	require.Empty(t, tmpl.Spec.Volumes)

	// No GPU container: the first one; no container: nothing.
	none := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}, {Name: "b"}}}}
	StripTemplate(&none)
	require.Equal(t, "a", none.Spec.Containers[0].Name)
	empty := corev1.PodTemplateSpec{}
	StripTemplate(&empty)
	require.Empty(t, empty.Spec.Containers)
}

// A cached MPI Launcher template keeps the launch settings its mpirun
// exports to the ranks, as an mpirun command line, and nothing else of it.
func TestStripTemplateKeepsMPIRunExports(t *testing.T) {
	for _, tc := range []struct {
		name string
		argv []string
		want []string
	}{
		{"mpirun words", []string{"mpirun", "-np", "16", "-x", "NCCL_NVLS_ENABLE=1", "-x", "LD_LIBRARY_PATH", "-x", "NCCL_DEBUG", "--mca", "pml", "ob1", "python", "train.py"},
			[]string{"mpirun", "-x", "NCCL_NVLS_ENABLE=1", "-x", "NCCL_DEBUG"}},
		{"a shell script with -genv and quotes", []string{"/bin/sh", "-c", `cd /w && mpiexec.hydra -n 2 -genv FI_PROVIDER "efa" -genv HF_TOKEN s -x NCCL_PROTO="Simple" ./a.out`},
			[]string{"mpirun", "-genv", "FI_PROVIDER", "efa", "-x", "NCCL_PROTO=Simple"}},
		{"no mpirun", []string{"python", "-x", "NCCL_NVLS_ENABLE=1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "launcher", Command: tc.argv[:1], Args: tc.argv[1:]}}}}
			StripTemplate(&tmpl)
			require.Equal(t, tc.want, tmpl.Spec.Containers[0].Command)
			require.Empty(t, tmpl.Spec.Containers[0].Args)
		})
	}
}
