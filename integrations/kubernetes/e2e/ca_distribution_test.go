package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rgcerts "github.com/rankgate/rankgate/integrations/kubernetes/certs"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
)

// Tenants may label any ConfigMap rankgate.io/ca-bundle=true. The CA
// distribution of a controller process (the shipped GOMEMLIMIT, its own
// certificates) started among 128 such ConfigMaps of 1 MiB each, in
// namespaces that are not opted in, reads none of their data (its peak
// RSS stays under the memory limit) and rewrites none of them, not even
// those named rankgate-ca; a labelled namespace and the namespace of a job
// opted in by its own label still get the current CA.
func TestE2ECADistributionIgnoresTenantConfigMaps(t *testing.T) {
	ctx := context.Background()
	const tenants, perTenant = 8, 16
	mib := strings.Repeat("x", 1<<20-512)
	var tenantCMs []*corev1.ConfigMap
	create := func(ns, name string, data map[string]string) *corev1.ConfigMap {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{contract.LabelCABundle: "true"}}, Data: data}
		require.NoError(t, k8s.Create(ctx, cm))
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), cm) }) // namespaces outlive tests: free etcd
		return cm
	}
	for i := 0; i < tenants; i++ {
		ns := newNamespace(t, fmt.Sprintf("e2e-ca-tenant-%d", i), false)
		for k := 0; k < perTenant; k++ {
			name := fmt.Sprintf("tenant-%d", k)
			if k == 0 {
				name = rgcerts.CAConfigMap // the tenant's own, in a namespace not opted in
			}
			tenantCMs = append(tenantCMs, create(ns, name, map[string]string{"ca.crt": "tenant's", "blob": mib}))
		}
	}
	optedIn := newNamespace(t, "e2e-ca-opted-in", true)
	tenantCMs = append(tenantCMs, create(optedIn, "tenant-in", map[string]string{"ca.crt": "tenant's", "blob": mib}))
	// A namespace that is not labelled, with a job opted in by its own
	// label and a CA ConfigMap from an earlier CA.
	jobNS := newNamespace(t, "e2e-ca-job", false)
	job := pytorchJob(t, jobNS, "gated", false, 1, nil)
	job.Labels = map[string]string{contract.KeyGate: "enabled"}
	require.NoError(t, k8s.Update(ctx, job))
	create(jobNS, rgcerts.CAConfigMap, map[string]string{"ca.crt": "an earlier CA"})
	versions := map[types.NamespacedName]string{}
	for _, cm := range tenantCMs {
		versions[client.ObjectKeyFromObject(cm)] = cm.ResourceVersion
	}

	secret := "rankgate-tls-cadist"
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: controllerNamespace, Name: secret}})
	})
	g := startGateProcess(t, "--manage-certs=true", "--cert-secret", secret, "--cert-dir", t.TempDir(), "--webhook-addr", "0")
	caOf := func(ns string) string {
		cm := &corev1.ConfigMap{}
		if k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: rgcerts.CAConfigMap}, cm) != nil {
			return ""
		}
		return cm.Data["ca.crt"]
	}
	require.Eventually(t, func() bool {
		ca := caOf(optedIn)
		return strings.HasPrefix(ca, "-----BEGIN CERTIFICATE-----") && caOf(jobNS) == ca
	}, 60*time.Second, 200*time.Millisecond, "the opted-in namespaces never got the CA")
	sec := &corev1.Secret{}
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Namespace: controllerNamespace, Name: secret}, sec))
	require.Equal(t, string(sec.Data["ca.crt"]), caOf(optedIn), "the CA of the controller's Secret")

	s := g.snapshot(t)
	t.Logf("after the first distribution among %d tenant ConfigMaps of 1 MiB: %s", len(tenantCMs), s)
	// Under the shipped GOMEMLIMIT (120 MiB), let alone the 256 MiB limit:
	// reading the tenants' 129 MiB would take well over both.
	require.LessOrEqual(t, s.peak, 120.0, "peak RSS: the tenants' ConfigMaps were read")
	for _, cm := range tenantCMs {
		got := &corev1.ConfigMap{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(cm), got))
		require.Equal(t, versions[client.ObjectKeyFromObject(cm)], got.ResourceVersion, "tenant ConfigMap %s/%s was rewritten", cm.Namespace, cm.Name)
		require.Equal(t, "tenant's", got.Data["ca.crt"])
	}
}
