package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/validate"
	"github.com/rankgate/rankgate/verdict"
)

// GPUs through DRA: a DeviceClass whose extendedResourceName is
// nvidia.com/gpu (KEP-5004), and no nvidia.com/gpu in any node's
// allocatable. Judged from allocatable, a job asking nvidia.com/gpu looks
// hopeless (SHAPE_MISMATCH: "The cluster offers no NVIDIA GPU resource at
// all"); rankgate judges it on the devices published in ResourceSlices
// (dra_pending_test.go), and where it cannot, stands down: never refuse,
// suspend or call it hopeless.

// draObjects creates cluster-wide objects and deletes them when the test
// ends (a DeviceClass mapping nvidia.com/gpu changes how the scheduler
// serves every pod asking for it).
func draObjects(t testing.TB, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		require.NoError(t, k8s.Create(context.Background(), o))
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	}
}

// The validating webhook on the real API server, over the real
// DeviceClasses: a job asking nvidia.com/gpu on a cluster of mixed-strategy
// A100s is STRATEGY_MISMATCH from node allocatable; with a DeviceClass
// that serves nvidia.com/gpu it is admitted, with no warning.
func TestValidatingWebhookAdmitsDRAJobs(t *testing.T) {
	ctx := context.Background()
	group := fmt.Sprintf("d%d", time.Now().UnixNano())
	validateNode(t, "validate-dra-a100-"+group, group)
	nodes := func(ctx context.Context) ([]corev1.Node, error) {
		l := &corev1.NodeList{}
		err := k8s.List(ctx, l, client.MatchingLabels{"e2e-validate": group})
		return l.Items, err
	}
	draObjects(t, clustertest.DeviceClass("gpu.nvidia.com-"+group, "nvidia.com/gpu"))
	nsDRA := newNamespace(t, "e2e-validate-dra", true)
	nsPlain := newNamespace(t, "e2e-validate-nodra", true)
	base := serveWebhooks(t, map[string]admission.Handler{
		validate.Path:            validate.NewHandler(validate.Options{Nodes: nodes, DeviceClasses: validate.ListDeviceClasses(k8s)}),
		"/nodra" + validate.Path: validate.NewHandler(validate.Options{Nodes: nodes}),
	})
	cfg := &admissionregv1.ValidatingWebhookConfiguration{}
	cfg.Name = "rankgate-validate-" + group
	cfg.Webhooks = []admissionregv1.ValidatingWebhook{
		validatingWebhook("dra.validate.rankgate.io", base+validate.Path, nsDRA),
		validatingWebhook("nodra.validate.rankgate.io", base+"/nodra"+validate.Path, nsPlain),
	}
	require.NoError(t, k8s.Create(ctx, cfg))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), cfg) })

	// Both webhooks are called once a MIG shape no node has is refused
	// in each namespace (dry run).
	for _, ns := range []string{nsDRA, nsPlain} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := k8s.Create(ctx, migPyTorchJob(ns, "probe", "nvidia.com/mig-1g.5gb", 1, 1, 1), client.DryRunAll)
			if err != nil && strings.Contains(err.Error(), verdict.RuleShapeMismatch) {
				break
			}
			require.True(t, time.Now().Before(deadline), "the webhook for %s was not called within 30s: %v", ns, err)
			time.Sleep(200 * time.Millisecond)
		}
	}
	// Without DeviceClasses the job is refused.
	err := k8s.Create(ctx, migPyTorchJob(nsPlain, "llm", "nvidia.com/gpu", 1, 1, 1))
	require.Error(t, err)
	require.True(t, apierrors.IsForbidden(err), "%v", err)
	require.Contains(t, err.Error(), verdict.RuleStrategyMismatch)
	// Where DeviceClasses are read, the same job is admitted.
	require.NoError(t, k8s.Create(ctx, migPyTorchJob(nsDRA, "llm", "nvidia.com/gpu", 1, 1, 1)))
}
