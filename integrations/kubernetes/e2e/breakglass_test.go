package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/verdict"
)

// Break-glass: with the controller down, the ranks of a gated job wait for
// a gate that does not answer. An operator annotates the job's pods
// rankgate.io/bypass=REASON (`kubectl annotate pods -l
// training.kubeflow.org/job-name=JOB rankgate.io/bypass=...`); the
// kubelet projects the pod's annotations into the downward API volume
// the webhook mounted, and the init container exits 0 after its own
// checks, saying why. A rank whose own checks fail still fails.
func TestE2EBreakGlassWhileControllerDown(t *testing.T) {
	c, gateURL := webhookController(t, "rankgate-tls-bg", controller.Options{})
	ctx := context.Background()
	ns := newNamespace(t, "e2e-breakglass", true)
	cm := &corev1.ConfigMap{}
	require.Eventually(t, func() bool {
		return k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rankgate-ca"}, cm) == nil
	}, 10*time.Second, 100*time.Millisecond)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(caFile, []byte(cm.Data["ca.crt"]), 0o600))

	j := gpuPyTorchJob(ns, "stranded", "nvidia.com/gpu", 1)
	require.NoError(t, k8s.Create(ctx, j))
	t.Cleanup(func() { _ = k8s.Delete(ctx, j) })
	c.Stop(t) // the controller is down from here on

	type ranked struct {
		pod  *corev1.Pod
		file string
		r    *rank
	}
	var ranks []ranked
	for i, fixture := range [][]string{fullGPURank, {"--sample", "h100-mig", "--devices", "0:0", "--expect-profile", "full"}} {
		p := podFromTemplate(t, j, kubeflowv1.PyTorchJobReplicaTypeWorker, i, fmt.Sprintf("node-bg-%d", i))
		t.Cleanup(func() { _ = k8s.Delete(ctx, p) })
		file := filepath.Join(t.TempDir(), "annotations")
		project(t, p, file)
		args := append(append([]string{}, fixture...), "--bypass-file="+file)
		ranks = append(ranks, ranked{p, file, runInjected(t, p, gateURL, caFile, args...)})
	}
	for _, x := range ranks {
		select {
		case <-x.r.exited:
			t.Fatalf("rank %s ended before the bypass: %s", x.pod.Name, x.r.stderr.String())
		case <-time.After(3 * time.Second):
		}
		require.Contains(t, x.r.stderr.String(), "gate not answering", "the gate is down: the rank must be retrying")
	}

	// The operator's annotation, through the API server, and the kubelet's
	// projection of what the API server then holds.
	for _, x := range ranks {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+contract.AnnotationBypass+`":"controller down, INC-4711"}}}`))
		require.NoError(t, k8s.Patch(ctx, x.pod, patch))
		project(t, x.pod, x.file)
	}
	require.Equal(t, 0, ranks[0].r.wait(t, 30*time.Second), ranks[0].r.stderr.String())
	require.Contains(t, ranks[0].r.stderr.String(), "INC-4711")
	require.Contains(t, ranks[0].r.stderr.String(), "without a gang verdict")
	// Its own checks failed (a MIG device where a full GPU is expected):
	// the bypass lets a rank skip the gate, not its own checks.
	require.Equal(t, verdict.ExitFail, ranks[1].r.wait(t, 30*time.Second), ranks[1].r.stderr.String())
}

// project writes p's annotations, as the API server holds them now, in the
// kubelet's downward API format (sorted keys, key=%q per line), swapping
// the file as the kubelet does.
func project(t *testing.T, p *corev1.Pod, file string) {
	t.Helper()
	cur := &corev1.Pod{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(p), cur))
	keys := make([]string, 0, len(cur.Annotations))
	for k := range cur.Annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q\n", k, cur.Annotations[k])
	}
	tmp := file + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(b.String()), 0o600))
	require.NoError(t, os.Rename(tmp, file))
}
