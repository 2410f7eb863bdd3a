package e2e

import (
	"context"
	"crypto/x509"
	"os"
	"testing"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
)

// benchGangJob creates PyTorchJob name in ns with n ranks: a master and
// n-1 workers.
func benchGangJob(ctx context.Context, ns, name string, n int) (*kubeflowv1.PyTorchJob, error) {
	job := &kubeflowv1.PyTorchJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kubeflowv1.PyTorchJobSpec{PyTorchReplicaSpecs: map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{
			kubeflowv1.PyTorchJobReplicaTypeMaster: {Replicas: ptr.To(int32(1)), Template: minimalTemplate},
			kubeflowv1.PyTorchJobReplicaTypeWorker: {Replicas: ptr.To(int32(n - 1)), Template: minimalTemplate},
		}}}
	return job, k8s.Create(ctx, job)
}

// benchRankPod creates rank i's pod of job on node (rank 0 is the master,
// rank i>0 worker i-1) and a token bound to it for the gate, as the
// projected token of a rank's init container.
func benchRankPod(ctx context.Context, job client.Object, i int, node string) (*corev1.Pod, string, error) {
	typ, idx := "worker", i-1
	if i == 0 {
		typ, idx = "master", 0
	}
	p := benchPod(job, typ, idx, node)
	if err := k8s.Create(ctx, p); err != nil {
		return nil, "", err
	}
	tr, err := clientset.CoreV1().ServiceAccounts(p.Namespace).CreateToken(ctx, serviceAccount, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{gate.Audience}, ExpirationSeconds: ptr.To(int64(3600)),
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}, metav1.CreateOptions{})
	if err != nil {
		return nil, "", err
	}
	return p, tr.Status.Token, nil
}

// caPool is a certificate pool holding the PEM certificates in file.
func caPool(t testing.TB, file string) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(file)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem), "no certificate in %s", file)
	return pool
}
