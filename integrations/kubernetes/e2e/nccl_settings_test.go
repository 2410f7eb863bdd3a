package e2e

import (
	"context"
	"testing"
	"time"

	mpiv2beta1 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// pytorchJobEnv creates a PyTorchJob of a Master and one Worker whose
// containers carry the given env.
func pytorchJobEnv(t *testing.T, ns, name string, master, worker []corev1.EnvVar) *kubeflowv1.PyTorchJob {
	t.Helper()
	tmpl := func(env []corev1.EnvVar) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pytorch", Image: "pytorch/pytorch", Env: env}}}}
	}
	j := &kubeflowv1.PyTorchJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kubeflowv1.PyTorchJobSpec{PyTorchReplicaSpecs: map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{
			kubeflowv1.PyTorchJobReplicaTypeMaster: {Replicas: ptr.To(int32(1)), Template: tmpl(master)},
			kubeflowv1.PyTorchJobReplicaTypeWorker: {Replicas: ptr.To(int32(1)), Template: tmpl(worker)},
		}},
	}
	require.NoError(t, k8s.Create(context.Background(), j))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), j) })
	return j
}

// The gang verdict judges the NCCL settings of the job's templates against
// the devices every rank reports: CUDA_VISIBLE_DEVICES naming 8 GPUs on
// ranks given 4 fails every rank (VISIBLE_DEVICES_MISMATCH);
// NCCL_NVLS_ENABLE=1 on ranks given MIG instances fails (NCCL_NVLS_ON_MIG)
// and passes without it; NCCL_PROTO set differently for Master and Worker
// passes with a warning (NCCL_SETTINGS_DIFFER), and so does
// NCCL_P2P_DISABLE=1 on ranks whose four A100s are joined by NVLink
// (NCCL_P2P_DISABLED_NVLINK, from the NVLinks each rank reports); the
// same settings everywhere pass.
func TestE2EGangNCCLSettings(t *testing.T) {
	ns := newNamespace(t, "e2e-nccl", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute})
	eight := []corev1.EnvVar{{Name: "CUDA_VISIBLE_DEVICES", Value: "0,1,2,3,4,5,6,7"}}
	nvls := []corev1.EnvVar{{Name: "NCCL_VERSION", Value: "2.31.2"}, {Name: "NCCL_NVLS_ENABLE", Value: "1"}}
	nccl231 := []corev1.EnvVar{{Name: "NCCL_VERSION", Value: "2.31.2"}}
	p2pOff := []corev1.EnvVar{{Name: "NCCL_P2P_DISABLE", Value: "1"}}
	// Two ranks on 1g.10gb instances of GPU 0, one per pod.
	mig := [2][]string{{"--sample", "h100-mig", "--devices", "0:2"}, {"--sample", "h100-mig", "--devices", "0:3"}}
	full := [2][]string{fullGPURank, fullGPURank}
	for _, tc := range []struct {
		name           string
		master, worker []corev1.EnvVar
		devices        [2][]string
		want           verdict.Verdict
		rule           string
		code           int
	}{
		{"visible-eight", eight, eight, full, verdict.VerdictFail, verdict.RuleVisibleDevicesMismatch, verdict.ExitFail},
		{"nvls-on-mig", nvls, nvls, mig, verdict.VerdictFail, verdict.RuleNCCLNVLSOnMIG, verdict.ExitFail},
		{"mig-default-nvls", nccl231, nccl231, mig, verdict.VerdictPass, "", verdict.ExitPass},
		{"proto-differs", []corev1.EnvVar{{Name: "NCCL_PROTO", Value: "Simple"}}, []corev1.EnvVar{{Name: "NCCL_PROTO", Value: "LL128"}},
			full, verdict.VerdictWarn, verdict.RuleNCCLSettingsDiffer, verdict.ExitPass},
		{"p2p-off-nvlink", p2pOff, p2pOff, full, verdict.VerdictWarn, verdict.RuleNCCLP2PDisabledNVLink, verdict.ExitPass},
		{"same-settings", []corev1.EnvVar{{Name: "NCCL_PROTO", Value: "Simple"}}, []corev1.EnvVar{{Name: "NCCL_PROTO", Value: "Simple"}},
			full, verdict.VerdictPass, "", verdict.ExitPass},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := pytorchJobEnv(t, ns, tc.name, tc.master, tc.worker)
			var ranks []*rank
			for i, p := range []*corev1.Pod{rankPod(t, job, "master", 0, "node-a", ""), rankPod(t, job, "worker", 0, "node-b", "")} {
				ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), tc.devices[i]...))
			}
			for _, r := range ranks {
				require.Equal(t, tc.code, r.wait(t, time.Minute), r.String())
				v := decodeVerdict(t, r)
				require.Equal(t, tc.want, v.Verdict, r.String())
				if tc.rule != "" {
					require.Contains(t, v.RuleIDs(), tc.rule, r.String())
				}
			}
		})
	}
}

// The gang verdict judges NCCL_SOCKET_IFNAME against the interfaces each
// rank reports (rankgate init reads its pod's network): a Worker template
// naming an interface its rank's node lacks fails the gang with
// NCCL_SOCKET_IFNAME_MISSING on that rank; an interface every rank has
// (lo, in every network namespace) passes.
func TestE2EGangNCCLSocketIfname(t *testing.T) {
	ns := newNamespace(t, "e2e-nccl-nics", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute})
	lo := []corev1.EnvVar{{Name: "NCCL_SOCKET_IFNAME", Value: "=lo"}}
	for _, tc := range []struct {
		name   string
		worker []corev1.EnvVar
		want   verdict.Verdict
		code   int
	}{
		{"missing", []corev1.EnvVar{{Name: "NCCL_SOCKET_IFNAME", Value: "=rgnosuch0"}}, verdict.VerdictFail, verdict.ExitFail},
		{"present", lo, verdict.VerdictPass, verdict.ExitPass},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := pytorchJobEnv(t, ns, "ifname-"+tc.name, lo, tc.worker)
			var ranks []*rank
			for _, p := range []*corev1.Pod{rankPod(t, job, "master", 0, "node-a", ""), rankPod(t, job, "worker", 0, "node-b", "")} {
				ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), fullGPURank...))
			}
			for _, r := range ranks {
				require.Equal(t, tc.code, r.wait(t, time.Minute), r.String())
				v := decodeVerdict(t, r)
				require.Equal(t, tc.want, v.Verdict, r.String())
				if tc.want != verdict.VerdictFail {
					require.NotContains(t, v.RuleIDs(), verdict.RuleNCCLSocketIfnameMissing, r.String())
					continue
				}
				var found []verdict.Finding
				for _, f := range v.Findings {
					if f.Rule == verdict.RuleNCCLSocketIfnameMissing {
						found = append(found, f)
					}
				}
				require.Len(t, found, 1, r.String())
				require.Equal(t, []int{1}, found[0].Ranks, "the Worker's rank: %s", r.String())
				require.Equal(t, []string{"node-b"}, found[0].Nodes, r.String())
				require.Contains(t, found[0].Message, "=rgnosuch0", r.String())
			}
		})
	}
}

// An MPIJob's ranks run with what the Launcher's mpirun exports to them:
// the gang verdict, reading the controller's cached job, fails two Worker
// ranks on MIG instances whose Launcher runs `mpirun -x
// NCCL_NVLS_ENABLE=1` (NCCL_NVLS_ON_MIG), though the Workers' own env
// leaves NVLS at its default; the same job without the export passes.
func TestE2EGangNCCLMPIRunExports(t *testing.T) {
	ns := newNamespace(t, "e2e-nccl-mpi", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute})
	for _, tc := range []struct {
		name string
		cmd  []string
		want verdict.Verdict
		code int
	}{
		{"export-nvls", []string{"mpirun", "-np", "2", "-x", "NCCL_NVLS_ENABLE=1", "python", "train.py"}, verdict.VerdictFail, verdict.ExitFail},
		{"no-export", []string{"mpirun", "-np", "2", "python", "train.py"}, verdict.VerdictPass, verdict.ExitPass},
	} {
		t.Run(tc.name, func(t *testing.T) {
			launcher := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "mpi", Image: "mpioperator/openmpi", Command: tc.cmd}}}}
			worker := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "mpi", Image: "mpioperator/openmpi",
				Env: []corev1.EnvVar{{Name: "NCCL_VERSION", Value: "2.31.2"}}}}}}
			job := &mpiv2beta1.MPIJob{
				ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: ns},
				Spec: mpiv2beta1.MPIJobSpec{RunLauncherAsWorker: ptr.To(false), MPIReplicaSpecs: map[mpiv2beta1.MPIReplicaType]*mpiv2beta1.ReplicaSpec{
					mpiv2beta1.MPIReplicaTypeLauncher: {Replicas: ptr.To(int32(1)), Template: launcher},
					mpiv2beta1.MPIReplicaTypeWorker:   {Replicas: ptr.To(int32(2)), Template: worker},
				}},
			}
			require.NoError(t, k8s.Create(context.Background(), job))
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), job) })
			var ranks []*rank
			for i, dev := range []string{"0:2", "0:3"} {
				p := rankPod(t, job, "worker", i, "h100-node", "nvidia.com/mig-1g.10gb")
				ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), "--sample", "h100-mig", "--devices", dev))
			}
			for _, r := range ranks {
				require.Equal(t, tc.code, r.wait(t, time.Minute), r.String())
				v := decodeVerdict(t, r)
				require.Equal(t, tc.want, v.Verdict, r.String())
				if tc.want == verdict.VerdictFail {
					require.Contains(t, v.RuleIDs(), verdict.RuleNCCLNVLSOnMIG, r.String())
				} else {
					require.NotContains(t, v.RuleIDs(), verdict.RuleNCCLNVLSOnMIG, r.String())
				}
			}
		})
	}
}
