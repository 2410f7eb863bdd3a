package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook"
)

// After a CA change every opted-in namespace holds a stale CA ConfigMap,
// and one pass of the leader rewrites them one by one. A namespace opted
// in meanwhile has none at all, so its rank pods cannot start: it must get
// its ConfigMap within seconds, not after the whole backlog.
func TestE2ECANewNamespaceNotBehindBacklog(t *testing.T) {
	ctx := context.Background()
	const backlog = 1000
	var made []string
	// Namespaces outlive tests (no namespace controller): deleted ones stay
	// Terminating, which the controller does not count as opted in, so
	// later tests do not inherit the backlog.
	t.Cleanup(func() {
		_ = parallel(len(made), 8, func(i int) error {
			return k8s.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: made[i]}})
		})
	})
	for i := 0; i < backlog; i++ {
		ns := newNamespace(t, fmt.Sprintf("e2e-ca-backlog-%d", i), true)
		made = append(made, ns)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: webhook.CAConfigMapName},
			Data: map[string]string{webhook.CAKey: "-----BEGIN CERTIFICATE-----\nstale\n-----END CERTIFICATE-----\n"}}
		require.NoError(t, k8s.Create(ctx, cm))
	}
	webhookController(t, "rankgate-tls-backlog", controller.Options{})
	ns := newNamespace(t, "e2e-ca-backlog-new", true)
	start := time.Now()
	require.Eventually(t, func() bool {
		return k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: webhook.CAConfigMapName}, &corev1.ConfigMap{}) == nil
	}, 5*time.Second, 100*time.Millisecond, "the new namespace waited behind %d stale CA ConfigMaps", backlog)
	t.Logf("CA ConfigMap in the new namespace after %s", time.Since(start).Round(time.Millisecond))
	made = append(made, ns)
}
