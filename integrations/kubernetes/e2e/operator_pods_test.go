package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
)

// operatorPodsPolicy names the policy of the operator-pods overlay.
const operatorPodsPolicy = "rankgate-operator-pods"

// The operator-pods overlay's admission policy: a user who may create
// pods cannot create one controlled by a Kubeflow job (nor a batch Job, an
// MPIJob's launcher), nor give an existing pod such an owner; the
// training-operator's service account can, and other pods are not
// affected.
func TestE2EOperatorPodsPolicy(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "e2e-operator-pods", true)
	grant(t, ns, "mallory", "", []string{"pods"}, "create", "update", "get")
	grant(t, ns, "mallory", "batch", []string{"jobs"}, "create")
	operator := "system:serviceaccount:kubeflow:training-operator"
	grant(t, ns, operator, "", []string{"pods"}, "create")
	job := pytorchJob(t, ns, "victim", false, 2, nil)
	owned := func(name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{controller.LabelJobName: job.Name},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{ServiceAccountName: serviceAccount, Containers: []corev1.Container{{Name: "x", Image: "busybox"}}},
		}
	}
	mallory := asUser(t, "mallory")
	// Runs last (after the policy's deletion): later tests create such
	// pods as mallory again.
	t.Cleanup(func() {
		require.Eventually(t, func() bool {
			p := owned(fmt.Sprintf("victim-probe-%d", time.Now().UnixNano()))
			err := mallory.Create(ctx, p)
			_ = k8s.Delete(ctx, p, client.GracePeriodSeconds(0))
			return err == nil
		}, 30*time.Second, 200*time.Millisecond, "policy %s still enforced after its deletion", operatorPodsPolicy)
	})
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	applyManifest(t, filepath.Join(root, "configs", "components", "operator-pods", "operator-pods.yaml"))

	var refused error
	require.Eventually(t, func() bool {
		// The API server loads new policies asynchronously.
		p := owned(fmt.Sprintf("victim-probe-%d", time.Now().UnixNano()))
		if refused = mallory.Create(ctx, p); refused == nil {
			require.NoError(t, k8s.Delete(ctx, p, client.GracePeriodSeconds(0)))
		}
		return refused != nil && strings.Contains(refused.Error(), operatorPodsPolicy)
	}, 30*time.Second, 200*time.Millisecond, "the API server never enforced %s: %v", operatorPodsPolicy, refused)
	require.Error(t, mallory.Create(ctx, owned("victim-worker-0")))
	require.Contains(t, refused.Error(), "only the Kubeflow operators create pods and batch Jobs controlled by a Kubeflow job; this one names PyTorchJob victim as its controller")

	// The operator creates the pod.
	require.NoError(t, asUser(t, operator).Create(ctx, owned("victim-worker-0")))
	// Other pods are not affected; an owner added later is refused.
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns},
		Spec: corev1.PodSpec{ServiceAccountName: serviceAccount, Containers: []corev1.Container{{Name: "x", Image: "busybox"}}}}
	require.NoError(t, mallory.Create(ctx, plain))
	plain.OwnerReferences = owned("").OwnerReferences
	err = mallory.Update(ctx, plain)
	require.Error(t, err)
	require.Contains(t, err.Error(), operatorPodsPolicy)
	// Nor a batch Job controlled by an MPIJob (its pods would be the
	// launcher's).
	bj := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "victim-launcher", Namespace: ns,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubeflow.org/v2beta1", Kind: "MPIJob", Name: "victim", UID: "u", Controller: ptr.To(true)}}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "x", Image: "busybox"}}}}}}
	err = mallory.Create(ctx, bj)
	require.Error(t, err)
	require.Contains(t, err.Error(), operatorPodsPolicy)
	require.NoError(t, k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "victim-worker-0", Namespace: ns}}, client.GracePeriodSeconds(0)))
}
