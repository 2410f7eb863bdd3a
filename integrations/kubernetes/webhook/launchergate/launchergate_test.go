package launchergate_test

import (
	"testing"

	mpiv2 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/launchergate"
)

var opts = launchergate.Options{
	Image:       "ghcr.io/rankgate/rankgate:v0.9.0",
	GateURL:     "https://rankgate-gate.rankgate-system.svc:443",
	CAConfigMap: "rankgate-ca",
}

// launcher is an MPIJob v2beta1 launcher template as users write it.
func launcher() *corev1.PodTemplateSpec {
	j := kubeflowtest.MakeMPIJob("mpi", "ml").Workers(2).Obj()
	t := &j.Spec.MPIReplicaSpecs[mpiv2.MPIReplicaTypeLauncher].Template
	t.Spec.Containers[0].Command = []string{"mpirun", "-np", "8"}
	t.Spec.Containers[0].Args = []string{"python", "train.py", "--epochs", "3"}
	t.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "OMPI_MCA_plm_rsh_agent", Value: "ssh"}}
	return t
}

func TestWrap(t *testing.T) {
	in := launcher()
	orig := in.DeepCopy()
	out, changed, err := launchergate.Wrap(in, opts)
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, orig, in, "the input is not modified")

	c := out.Spec.Containers[0]
	require.Equal(t, []string{
		"/rankgate/bin/rankgate", "launch", "--gang",
		"--gate-url", "https://rankgate-gate.rankgate-system.svc:443",
		"--ca-file", "/var/run/rankgate/ca.crt", "--token-file", "/var/run/secrets/rankgate/token",
		"--no-preflight", "--",
		"mpirun", "-np", "8", "python", "train.py", "--epochs", "3",
	}, c.Command)
	require.Empty(t, c.Args)
	require.Equal(t, []corev1.VolumeMount{
		{Name: "rankgate-bin", MountPath: "/rankgate/bin", ReadOnly: true},
		{Name: "rankgate-token", MountPath: "/var/run/secrets/rankgate", ReadOnly: true},
		{Name: "rankgate-ca", MountPath: "/var/run/rankgate", ReadOnly: true},
	}, c.VolumeMounts)
	require.Len(t, c.Env, 3)
	require.Equal(t, "OMPI_MCA_plm_rsh_agent", c.Env[0].Name)
	require.Equal(t, "metadata.name", c.Env[1].ValueFrom.FieldRef.FieldPath)
	require.Equal(t, "POD_NAMESPACE", c.Env[2].Name)

	require.Len(t, out.Spec.InitContainers, 1)
	ic := out.Spec.InitContainers[0]
	require.Equal(t, "rankgate-copy", ic.Name)
	require.Equal(t, opts.Image, ic.Image)
	require.Equal(t, []string{"/usr/local/bin/rankgate-node", "copy-binary", "/rankgate/bin"}, ic.Command)
	require.Equal(t, []corev1.VolumeMount{{Name: "rankgate-bin", MountPath: "/rankgate/bin"}}, ic.VolumeMounts)

	vols := map[string]corev1.Volume{}
	for _, v := range out.Spec.Volumes {
		vols[v.Name] = v
	}
	require.NotNil(t, vols["rankgate-bin"].EmptyDir)
	tok := vols["rankgate-token"].Projected.Sources[0].ServiceAccountToken
	require.Equal(t, "rankgate", tok.Audience)
	require.EqualValues(t, 3600, *tok.ExpirationSeconds)
	require.Equal(t, "rankgate-ca", vols["rankgate-ca"].ConfigMap.Name)

	// Idempotent: wrapping the result again changes nothing.
	again, changed, err := launchergate.Wrap(out, opts)
	require.NoError(t, err)
	require.False(t, changed)
	require.Equal(t, out, again)
	require.True(t, launchergate.Wrapped(out))
	require.False(t, launchergate.Wrapped(in))
}

func TestWrapKeepsTheUsersSettings(t *testing.T) {
	in := launcher()
	in.Spec.Containers[0].Env = append(in.Spec.Containers[0].Env, corev1.EnvVar{Name: "POD_NAME", Value: "fixed"})
	in.Spec.InitContainers = []corev1.Container{{Name: "users-init", Image: "busybox"}}
	o := opts
	o.LaunchArgs = []string{"--no-preflight", "--mpi-hostfile", "/etc/mpi/hostfile"}
	out, _, err := launchergate.Wrap(in, o)
	require.NoError(t, err)
	require.Equal(t, []string{"rankgate-copy", "users-init"}, []string{out.Spec.InitContainers[0].Name, out.Spec.InitContainers[1].Name})
	require.Contains(t, out.Spec.Containers[0].Command, "/etc/mpi/hostfile")
	n := 0
	for _, e := range out.Spec.Containers[0].Env {
		if e.Name == "POD_NAME" {
			n++
			require.Equal(t, "fixed", e.Value)
		}
	}
	require.Equal(t, 1, n)
}

func TestWrapRefuses(t *testing.T) {
	in := launcher()
	in.Spec.Containers[0].Command = nil
	_, _, err := launchergate.Wrap(in, opts)
	require.ErrorContains(t, err, "has no command")

	in = launcher()
	in.Spec.Volumes = []corev1.Volume{{Name: "rankgate-ca"}}
	_, _, err = launchergate.Wrap(in, opts)
	require.ErrorContains(t, err, "already has a volume named rankgate-ca")

	_, _, err = launchergate.Wrap(launcher(), launchergate.Options{Image: "x"})
	require.ErrorContains(t, err, "required")
}

func TestEnabled(t *testing.T) {
	require.True(t, launchergate.Enabled(map[string]string{contract.KeyLauncherGate: "enabled"}, nil))
	require.True(t, launchergate.Enabled(nil, map[string]string{contract.KeyLauncherGate: "enabled"}))
	require.False(t, launchergate.Enabled(map[string]string{contract.KeyLauncherGate: "disabled"}, map[string]string{contract.KeyLauncherGate: "enabled"}))
	require.False(t, launchergate.Enabled(nil, nil))
}
