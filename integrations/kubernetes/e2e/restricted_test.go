package e2e

import (
	"context"
	"testing"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook"
)

// A namespace with Pod Security "restricted" enforced and a ResourceQuota
// that demands cpu and memory requests and limits admits the rank pods of
// an opted-in job as the webhook mutated them: the injected init
// container carries its own security context and resources. The same pod
// without the init container's security context is refused, which shows
// the API server enforces both.
func TestE2EInjectedInitPassesRestrictedAndQuota(t *testing.T) {
	webhookController(t, "rankgate-tls-psa", controller.Options{})
	ctx := context.Background()
	ns := newNamespace(t, "e2e-wh-psa", true)
	nsObj := &corev1.Namespace{}
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: ns}, nsObj))
	nsObj.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	require.NoError(t, k8s.Update(ctx, nsObj))

	hard := corev1.ResourceList{
		corev1.ResourceRequestsCPU: resource.MustParse("64"), corev1.ResourceRequestsMemory: resource.MustParse("512Gi"),
		corev1.ResourceLimitsCPU: resource.MustParse("64"), corev1.ResourceLimitsMemory: resource.MustParse("512Gi"),
	}
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "compute", Namespace: ns}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
	require.NoError(t, k8s.Create(ctx, quota))
	// No quota controller runs here: set the status it would, so that
	// admission enforces the quota.
	used := corev1.ResourceList{}
	for name := range hard {
		used[name] = resource.MustParse("0")
	}
	quota.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: used}
	require.NoError(t, k8s.Status().Update(ctx, quota))

	j := gpuPyTorchJob(ns, "restricted", "nvidia.com/gpu", 1)
	for _, rs := range j.Spec.PyTorchReplicaSpecs {
		c := &rs.Template.Spec.Containers[0]
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("32Gi")}
		c.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("4")
		c.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("32Gi")
		c.SecurityContext = &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true),
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}
	}
	require.NoError(t, k8s.Create(ctx, j))
	t.Cleanup(func() { _ = k8s.Delete(ctx, j) })
	master := j.Spec.PyTorchReplicaSpecs[kubeflowv1.PyTorchJobReplicaTypeMaster].Template.Spec
	require.Equal(t, 1, countInit(master), "not mutated")

	// Without the init container's security context: refused.
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "restricted-probe", Namespace: ns}, Spec: *master.DeepCopy()}
	bare.Spec.ServiceAccountName = serviceAccount
	bare.Spec.InitContainers[0].SecurityContext = nil
	err := k8s.Create(ctx, bare, client.DryRunAll)
	require.Error(t, err, "Pod Security restricted is not enforced here: the test proves nothing")
	require.Contains(t, err.Error(), webhook.InitName)

	// Without the init container's own cpu and memory: refused by the quota.
	noRes := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "quota-probe", Namespace: ns}, Spec: *master.DeepCopy()}
	noRes.Spec.ServiceAccountName = serviceAccount
	ic := &noRes.Spec.InitContainers[0]
	ic.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": ic.Resources.Limits["nvidia.com/gpu"]}}
	err = k8s.Create(ctx, noRes, client.DryRunAll)
	require.Error(t, err, "the ResourceQuota is not enforced here: the test proves nothing")
	require.Contains(t, err.Error(), "limits.cpu")

	// As mutated: admitted, and counted by the quota.
	p := podFromTemplate(t, j, kubeflowv1.PyTorchJobReplicaTypeMaster, 0, "node-psa")
	t.Cleanup(func() { _ = k8s.Delete(ctx, p) })
	require.NotNil(t, p.Spec.InitContainers[0].SecurityContext)
}
