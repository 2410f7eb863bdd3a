package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	rgcerts "github.com/rankgate/rankgate/integrations/kubernetes/certs"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
)

// The ServiceMonitor overlay's CA ConfigMap (configs/components/servicemonitor/
// ca-configmap.yaml) ships empty, in the controller's own namespace, which
// is not opted in: the controller fills it with its CA, the CA the scraper verifies /metrics
// against, and keeps it current through a CA rotation.
func TestE2EServiceMonitorCAConfigMap(t *testing.T) {
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	objs := decodeManifest(t, filepath.Join(root, "configs", "components", "servicemonitor", "ca-configmap.yaml"))
	require.Len(t, objs, 1)
	cm := &corev1.ConfigMap{}
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, cm))
	require.Empty(t, cm.Data)
	// The overlay's namespace is the controller's own.
	require.Equal(t, "rankgate-system", cm.Namespace)
	ns := controllerNamespace
	ensureNamespace(t, ns)
	ctx := context.Background()
	_ = k8s.Delete(ctx, cm.DeepCopy())
	require.NoError(t, k8s.Create(ctx, cm))
	t.Cleanup(func() { _ = k8s.Delete(ctx, cm) })

	c, _ := webhookController(t, "rankgate-tls-sm", controller.Options{
		WebhookOptions: controller.WebhookOptions{CertDurations: rgcerts.Durations{CA: 6 * time.Second, Cert: 3 * time.Second, Lookahead: 2 * time.Second}},
	})
	caOf := func() string {
		got := &corev1.ConfigMap{}
		if k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: cm.Name}, got) != nil {
			return ""
		}
		return got.Data["ca.crt"]
	}
	first := string(c.Certificates().Current().CAPEM())
	require.Eventually(t, func() bool { return caOf() == first || caOf() == string(c.Certificates().Current().CAPEM()) },
		10*time.Second, 50*time.Millisecond, "the controller never filled the overlay's CA ConfigMap")
	require.Eventually(t, func() bool {
		cur := string(c.Certificates().Current().CAPEM())
		return cur != first && caOf() == cur
	}, 20*time.Second, 100*time.Millisecond, "the CA ConfigMap did not follow a CA rotation")
}
