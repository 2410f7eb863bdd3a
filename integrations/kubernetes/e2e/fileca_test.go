package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate/gatetest"
)

// Certificates from another issuer (cert-manager: --manage-certs=false, the
// Secret mounted as --cert-dir with its ca.crt): the controller writes that
// CA into ConfigMap rankgate-ca of every opted-in namespace, as it does its
// own, and rewrites the copies when the issuer renews the CA; nothing is
// copied by hand.
func TestE2ECertManagerCAIsDistributed(t *testing.T) {
	dir := t.TempDir()
	first, err := gatetest.WriteCerts(dir, "localhost")
	require.NoError(t, err)
	startController(t, controller.Options{CertDir: dir, WebhookOptions: controller.WebhookOptions{CertInterval: 200 * time.Millisecond}})
	ctx := context.Background()
	ns := newNamespace(t, "e2e-fileca", true)
	want, err := os.ReadFile(first.CAFile)
	require.NoError(t, err)
	holds := func(pem []byte) func() bool {
		return func() bool {
			cm := &corev1.ConfigMap{}
			return k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rankgate-ca"}, cm) == nil && cm.Data["ca.crt"] == string(pem)
		}
	}
	require.Eventually(t, holds(want), 20*time.Second, 100*time.Millisecond, "the issuer's CA never reached the opted-in namespace")

	// The issuer renews its CA (the kubelet swaps the mounted files).
	next := t.TempDir()
	renewed, err := gatetest.WriteCerts(next, "localhost")
	require.NoError(t, err)
	pem, err := os.ReadFile(renewed.CAFile)
	require.NoError(t, err)
	require.NotEqual(t, want, pem)
	tmp := filepath.Join(dir, ".ca.tmp")
	require.NoError(t, os.WriteFile(tmp, pem, 0o600))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "ca.crt")))
	require.Eventually(t, holds(pem), 20*time.Second, 100*time.Millisecond, "the renewed CA never replaced the copy")
}
