package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook"
)

// The shipped mutating webhook on ranks whose GPUs come through DRA
// claims: a PyTorchJob whose trainer container uses a claim made from a
// template that asks MIG devices of NVIDIA's driver gets the init
// container with the trainer's claims (the API server accepts an init
// container using the pod's claims), so that the rank reports what NVML
// shows of its allocation; a job whose containers use only a claim of
// another driver (a NIC) is no GPU job and is left alone.
func TestE2EWebhookGatesDRAClaimRanks(t *testing.T) {
	webhookController(t, "rankgate-tls-dra-claims", controller.Options{})
	ctx := context.Background()
	ns := newNamespace(t, "e2e-wh-dra-claims", true)
	migTemplate(t, ns, "mig-1g", "1g.10gb", 1)
	nic := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "rdma", Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "nic", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "rdma.example.com",
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.driver == 'rdma.example.com'"}}}}}}}}}}
	require.NoError(t, k8s.Create(ctx, nic))

	claimJob := func(name string, trainerClaims ...string) *kubeflowv1.PyTorchJob {
		j := draPyTorchJob(ns, name, "", 0)
		for _, rs := range j.Spec.PyTorchReplicaSpecs {
			spec := &rs.Template.Spec
			spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("mig-1g")}, {Name: "nic", ResourceClaimTemplateName: ptr.To("rdma")}}
			for _, c := range trainerClaims {
				spec.Containers[0].Resources.Claims = append(spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: c})
			}
			spec.Containers = append(spec.Containers, corev1.Container{Name: "sidecar", Image: "busybox",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "nic"}}}})
		}
		return j
	}
	// The controller's cache has the templates once a dry run is gated.
	require.Eventually(t, func() bool {
		j := claimJob("probe", "gpu")
		return k8s.Create(ctx, j, client.DryRunAll) == nil && countInit(j.Spec.PyTorchReplicaSpecs[kubeflowv1.PyTorchJobReplicaTypeWorker].Template.Spec) == 1
	}, 30*time.Second, 200*time.Millisecond, "a DRA claim rank was never gated")

	gated := claimJob("gated", "gpu", "nic")
	require.NoError(t, k8s.Create(ctx, gated))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), gated) })
	for _, rs := range gated.Spec.PyTorchReplicaSpecs {
		ic := rs.Template.Spec.InitContainers[0]
		require.Equal(t, webhook.InitName, ic.Name)
		require.Equal(t, []corev1.ResourceClaim{{Name: "gpu"}, {Name: "nic"}}, ic.Resources.Claims)
	}
	nicOnly := claimJob("nic-only")
	require.NoError(t, k8s.Create(ctx, nicOnly))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), nicOnly) })
	for _, rs := range nicOnly.Spec.PyTorchReplicaSpecs {
		require.Empty(t, rs.Template.Spec.InitContainers, "a job without a GPU claim was gated")
	}
}
