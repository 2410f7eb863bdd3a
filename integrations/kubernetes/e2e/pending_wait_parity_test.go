package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/verdict"
)

// (i) What a waiting job waits for, as the controller writes it
// (rankgate.io/waiting-for, from its informers), is what `rankgate
// diagnose job` says from a full read: the same WAIT_CAPACITY text, with
// the busy node and its use summed over a pod outside any job and a bound
// replica of another job.
func TestE2EPendingWaitDiagnoseParity(t *testing.T) {
	ns := newNamespace(t, "e2e-pending-wait-parity", true)
	startScheduler(t)
	const node = "wait-parity-1"
	gpuNode(t, node, "nvidia.com/gpu", 8)
	realNode(t, node, map[string]int64{"nvidia.com/gpu": 8}, map[string]string{"pending-test": node})
	// 5 GPUs held by a pod outside any job, 2 by a replica of another job.
	h := &corev1.Pod{}
	h.Name, h.Namespace, h.Spec.NodeName = "holder-"+node, ns, node
	h.Spec.Containers = []corev1.Container{{Name: "hold", Image: "busybox"}}
	withGPUsOn(h, "nvidia.com/gpu", 5)
	require.NoError(t, k8s.Create(context.Background(), h))
	other := pytorchJob(t, ns, "running", true, 1, nil)
	rankPod(t, other, "worker", 0, node, "nvidia.com/gpu", func(p *corev1.Pod) { withGPUsOn(p, "nvidia.com/gpu", 2) })

	c := startController(t, controller.Options{GangTimeout: time.Hour, PendingGrace: ptr.To(time.Duration(0))})
	job, _ := pendingJob(t, ns, "waits", nil, "nvidia.com/gpu", 2, onNode(node))
	var wf string
	require.Eventually(t, func() bool { wf = jobAnnotations(t, job)[contract.AnnotationWaitingFor]; return wf != "" }, 20*time.Second, 100*time.Millisecond, c.logs.String())

	var out, errb bytes.Buffer
	cmd := exec.Command(binary, "diagnose", "job", ns+"/"+job.Name, "--kind", "PyTorchJob", "--kubeconfig", kubeconfigFile(t), "-o", "json")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee) && ee.ExitCode() == verdict.ExitFail, "diagnose: %v %s", err, errb.String())
	}
	var diag verdict.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &diag), out.String())
	var want string
	for _, f := range diag.Findings {
		if f.Rule == verdict.RuleWaitCapacity {
			want = f.Rule + ": " + f.Message
		}
	}
	require.NotEmpty(t, want, "diagnose: %v", diag.RuleIDs())
	require.Contains(t, want, node+" (7/8 nvidia.com/gpu in use)")
	require.Equal(t, want, wf, "the controller's waiting-for differs from diagnose")
	require.False(t, isSuspended(t, job), "a waiting job was failed")
	t.Logf("diagnose and controller agree: %s", wf)
}
