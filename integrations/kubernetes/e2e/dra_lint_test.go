package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/validate"
	"github.com/rankgate/rankgate/verdict"
)

// The validating webhook's claim checks on the real API server: the
// DeviceClasses, ResourceSlices and claim templates are the API server's
// (validate.ListDeviceClasses, validate.ListDRAObjects over the test's
// client), and the warnings are those the API server hands back to the
// client (what kubectl prints after "Warning:").

// lintMIGClaimTemplate creates a claim template in ns asking count
// 1g.10gb devices of class; parent adds a matchAttribute on the driver's
// parentUUID.
func lintMIGClaimTemplate(t *testing.T, ns, name, class string, count int64, parent bool) {
	t.Helper()
	e := &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count,
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}}}
	tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	tmpl.Spec.Spec.Devices.Requests = []resourcev1.DeviceRequest{{Name: "gpu", Exactly: e}}
	if parent {
		tmpl.Spec.Spec.Devices.Constraints = []resourcev1.DeviceConstraint{{MatchAttribute: ptr.To(resourcev1.FullyQualifiedName("gpu.nvidia.com/parentUUID"))}}
	}
	require.NoError(t, k8s.Create(context.Background(), tmpl))
}

// lintJob is a PyTorchJob of workers (and a Master, with master) whose
// pods each get claim "gpu" from template tmpl.
func lintJob(ns, name, tmpl string, workers int, master bool) *kubeflowv1.PyTorchJob {
	j := migPyTorchJob(ns, name, "cpu", 1, 1, workers)
	if !master {
		delete(j.Spec.PyTorchReplicaSpecs, kubeflowv1.PyTorchJobReplicaTypeMaster)
	}
	for _, rs := range j.Spec.PyTorchReplicaSpecs {
		s := &rs.Template.Spec
		s.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(tmpl)}}
		s.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	}
	return j
}

func TestDRALintWarnings(t *testing.T) {
	ctx := context.Background()
	group := fmt.Sprintf("l%d", time.Now().UnixNano())
	node := "dra-lint-" + group
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"kubernetes.io/hostname": node, "e2e-validate": group}}}
	require.NoError(t, k8s.Create(ctx, n))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), n) })
	nodes := func(ctx context.Context) ([]corev1.Node, error) {
		l := &corev1.NodeList{}
		err := k8s.List(ctx, l, client.MatchingLabels{"e2e-validate": group})
		return l.Items, err
	}
	// Two H100s split into three 1g.10gb devices each, as the NVIDIA DRA
	// driver publishes them, and its MIG class under a name of this test's.
	class := clustertest.MIGClass()
	class.Name = "mig.nvidia.com-" + group
	migGPU := func(uuid, prefix string) clustertest.DRAMIGGPU {
		g := clustertest.DRAMIGGPU{UUID: uuid, Product: "NVIDIA H100 80GB HBM3", Driver: "580.126.20"}
		for k := range 3 {
			g.MIG = append(g.MIG, clustertest.DRAMIG{UUID: fmt.Sprintf("MIG-%s%d", prefix, k), Profile: "1g.10gb", SMs: 16, MemoryMiB: 9984})
		}
		return g
	}
	draObjects(t, class, clustertest.MIGSlice(node, migGPU("GPU-6513270e-269e-4d37-b2a7-4de452e6b438", "a"), migGPU("GPU-8d116ece-1738-47d9-bd9c-172411e20b8f", "b")))

	nsWarn := newNamespace(t, "e2e-dra-lint", true)
	nsDeny := newNamespace(t, "e2e-dra-lint-deny", true)
	for _, ns := range []string{nsWarn, nsDeny} {
		lintMIGClaimTemplate(t, ns, "mig-1g", class.Name, 1, false)
		lintMIGClaimTemplate(t, ns, "mig-1g-x2-one-gpu", class.Name, 2, true)
		lintMIGClaimTemplate(t, ns, "typo-class", class.Name+"-typo", 1, false)
	}
	opts := validate.Options{Nodes: nodes, DeviceClasses: validate.ListDeviceClasses(k8s), DRAObjects: validate.ListDRAObjects(k8s)}
	strict := opts
	strict.Policies = map[string]validate.Policy{verdict.RuleDRAMIGMaySpanGPUs: validate.Deny, verdict.RuleDRAClaimUnmatched: validate.Deny}
	base := serveWebhooks(t, map[string]admission.Handler{
		validate.Path:             validate.NewHandler(opts),
		"/strict" + validate.Path: validate.NewHandler(strict),
	})
	cfg := &admissionregv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "rankgate-dra-lint-" + group},
		Webhooks: []admissionregv1.ValidatingWebhook{
			validatingWebhook("default.validate.rankgate.io", base+validate.Path, nsWarn),
			validatingWebhook("strict.validate.rankgate.io", base+"/strict"+validate.Path, nsDeny),
		}}
	require.NoError(t, k8s.Create(ctx, cfg))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), cfg) })

	warned := &warnings{}
	wcfg := rest.CopyConfig(restCfg)
	wcfg.WarningHandler = warned
	c, err := client.New(wcfg, client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)
	// The API server picks the configuration up within a second or so:
	// wait until the strict webhook refuses (dry run) and the default one
	// warns.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Create(ctx, lintJob(nsDeny, "probe", "mig-1g", 1, true), client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), verdict.RuleDRAMIGMaySpanGPUs) {
			break
		}
		require.True(t, time.Now().Before(deadline), "the strict webhook was not called within 30s: %v", err)
		time.Sleep(200 * time.Millisecond)
	}
	for {
		require.NoError(t, c.Create(ctx, lintJob(nsWarn, "probe", "mig-1g", 1, true), client.DryRunAll))
		if strings.Contains(strings.Join(warned.take(), "\n"), verdict.RuleDRAMIGMaySpanGPUs) {
			break
		}
		require.True(t, time.Now().Before(deadline), "the default webhook was not called within 30s")
		time.Sleep(200 * time.Millisecond)
	}
	draWarnings := func(t *testing.T) []string {
		var out []string
		for _, w := range warned.take() {
			t.Logf("Warning: %s", w)
			if strings.HasPrefix(w, "DRA_") {
				out = append(out, w)
			}
		}
		return out
	}

	t.Run("a claim per pod from a template: admitted with DRA_MIG_MAY_SPAN_GPUS", func(t *testing.T) {
		require.NoError(t, c.Create(ctx, lintJob(nsWarn, "split", "mig-1g", 3, true)))
		ws := draWarnings(t)
		require.Len(t, ws, 1)
		require.True(t, strings.HasPrefix(ws[0], "DRA_MIG_MAY_SPAN_GPUS: 4 MIG devices in 4 claims (claim gpu from ResourceClaimTemplate "+nsWarn+"/mig-1g per pod of Master (1 pod), Worker (3 pods)): nothing"), ws[0])
		require.Contains(t, ws[0], "Fix: one claim with matchAttribute gpu.nvidia.com/parentUUID for all MIG ranks, or full GPUs")
	})
	t.Run("one pod, one claim with matchAttribute on parentUUID: admitted silently", func(t *testing.T) {
		require.NoError(t, c.Create(ctx, lintJob(nsWarn, "one-gpu", "mig-1g-x2-one-gpu", 1, false)))
		require.Empty(t, draWarnings(t))
	})
	t.Run("a DeviceClass the cluster does not have: DRA_CLAIM_UNMATCHED", func(t *testing.T) {
		require.NoError(t, c.Create(ctx, lintJob(nsWarn, "typo", "typo-class", 1, false)))
		ws := draWarnings(t)
		require.Len(t, ws, 1)
		require.True(t, strings.HasPrefix(ws[0], "DRA_CLAIM_UNMATCHED: ResourceClaimTemplate "+nsWarn+"/typo-class request gpu names DeviceClass "+class.Name+"-typo, which do"), ws[0])
	})
	t.Run("a template created after the job: DRA_NOT_JUDGED, then silent once it exists", func(t *testing.T) {
		require.NoError(t, c.Create(ctx, lintJob(nsWarn, "later", "later", 1, false)))
		ws := draWarnings(t)
		require.Len(t, ws, 1)
		require.True(t, strings.HasPrefix(ws[0], "DRA_NOT_JUDGED: ResourceClaimTemplate "+nsWarn+"/later (claim gpu of Worker pods) does not exist yet"), ws[0])
		lintMIGClaimTemplate(t, nsWarn, "later", class.Name, 1, false)
		require.NoError(t, c.Create(ctx, lintJob(nsWarn, "later-2", "later", 1, false)))
		require.Empty(t, draWarnings(t))
	})
	t.Run("deny policies: the split job is refused, a missing template still only warns", func(t *testing.T) {
		err := c.Create(ctx, lintJob(nsDeny, "split", "mig-1g", 3, true))
		require.Error(t, err)
		require.True(t, apierrors.IsForbidden(err), "%v", err)
		t.Logf("Error from server: %v", err)
		for _, s := range []string{`admission webhook "strict.validate.rankgate.io" denied the request`, "rankgate refused PyTorchJob " + nsDeny + "/split",
			"DRA_MIG_MAY_SPAN_GPUS: 4 MIG devices in 4 claims", "the gate fails the gang (GANG_MIG_SPANS_GPUS)", "Fix: "} {
			require.Contains(t, err.Error(), s)
		}
		err = c.Create(ctx, lintJob(nsDeny, "typo", "typo-class", 1, false))
		require.Error(t, err)
		require.Contains(t, err.Error(), "DRA_CLAIM_UNMATCHED: ResourceClaimTemplate "+nsDeny+"/typo-class request gpu names DeviceClass "+class.Name+"-typo, which does not exist")
		require.NoError(t, c.Create(ctx, lintJob(nsDeny, "later", "not-yet", 3, true)))
		ws := draWarnings(t)
		require.Len(t, ws, 1)
		require.True(t, strings.HasPrefix(ws[0], "DRA_NOT_JUDGED: ResourceClaimTemplate "+nsDeny+"/not-yet"), ws[0])
	})
}
