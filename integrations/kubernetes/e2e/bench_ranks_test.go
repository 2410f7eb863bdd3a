package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

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

// benchGangRanks creates the pods and tokens of all n ranks of job, each
// on its own node, 16 at a time.
func benchGangRanks(t *testing.T, ctx context.Context, job client.Object, n int) []clientRank {
	ranks := make([]clientRank, n)
	require.NoError(t, parallel(n, 16, func(i int) error {
		p, tok, err := benchRankPod(ctx, job, i, fmt.Sprintf("node-%04d", i))
		if err != nil {
			return err
		}
		ranks[i] = clientRank{Pod: p.Name, Node: p.Spec.NodeName, Token: tok}
		return nil
	}))
	return ranks
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

// sourceIP is client k's own loopback address, 127.block.x.y (Linux routes
// all of 127.0.0.0/8 to the loopback device): the gate limits TokenReviews
// per client address, so benchmark ranks dial from addresses of their own,
// as ranks on different nodes do.
func sourceIP(block byte, k int) net.IP {
	return net.IPv4(127, block+byte(k/62500), byte(k/250%250), byte(k%250+1))
}

// sourceTransport is a gate client's transport (TLS to the CAs in pool,
// HTTP/2) that dials from ip.
func sourceTransport(pool *x509.CertPool, ip net.IP) *http.Transport {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 10 * time.Second}
	return &http.Transport{DialContext: d.DialContext, ForceAttemptHTTP2: true, TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}}
}
