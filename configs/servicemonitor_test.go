package configs_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/rankgate/rankgate/integrations/kubernetes/certs"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
)

// kustomize is the pinned kustomize that make test builds (and passes as
// $RANKGATE_KUSTOMIZE); without it the test is skipped unless make asked.
func kustomize(t *testing.T) string {
	t.Helper()
	if kz := os.Getenv("RANKGATE_KUSTOMIZE"); kz != "" {
		return kz
	}
	kz, err := filepath.Abs(filepath.Join("..", "bin", "tools", "kustomize-v5.8.0"))
	require.NoError(t, err)
	if _, err := os.Stat(kz); err != nil {
		t.Skipf("kustomize v5.8.0 not built (make test builds it into bin/tools): %v", err)
	}
	return kz
}

func decodeYAML(t *testing.T, b []byte) []*unstructured.Unstructured {
	t.Helper()
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		err := d.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		if m != nil {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	return nil
}

// The ServiceMonitor overlay builds with the pinned kustomize; its
// ServiceMonitor selects the metrics Service of configs/deploy/service.yaml
// (and no other Service), by its port name, over HTTPS verified with the
// controller's CA from a ConfigMap the controller keeps (the Secret also
// holds the CA's key), with a bearer token whose account may read /metrics.
func TestServiceMonitorOverlay(t *testing.T) {
	out, err := exec.Command(kustomize(t), "build", filepath.Join("overlays", "servicemonitor")).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("kustomize build: %v\n%s", err, ee.Stderr)
	}
	require.NoError(t, err)
	objs := decodeYAML(t, out)

	svcFile, err := os.ReadFile(filepath.Join("deploy", "service.yaml"))
	require.NoError(t, err)
	services := decodeYAML(t, svcFile)
	metrics := find(services, "Service", "rankgate-metrics")
	require.NotNil(t, metrics, "deploy/service.yaml has no rankgate-metrics Service")
	require.Equal(t, metrics.Object, find(objs, "Service", "rankgate-metrics").Object, "the overlay changed the metrics Service")

	sm := find(objs, "ServiceMonitor", "rankgate-controller")
	require.NotNil(t, sm, "no ServiceMonitor in the build")
	require.Equal(t, "monitoring.coreos.com/v1", sm.GetAPIVersion())

	// The selector picks the metrics Service, and only it.
	ml, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	require.NotEmpty(t, ml)
	sel := labels.SelectorFromSet(ml)
	for _, s := range services {
		require.Equal(t, s.GetName() == "rankgate-metrics", sel.Matches(labels.Set(s.GetLabels())), "Service %s", s.GetName())
	}
	nss, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
	require.Equal(t, []string{metrics.GetNamespace()}, nss)
	require.Equal(t, metrics.GetNamespace(), sm.GetNamespace())

	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	require.Len(t, eps, 1)
	ep := eps[0].(map[string]any)
	ports, _, _ := unstructured.NestedSlice(metrics.Object, "spec", "ports")
	var portNames []any
	for _, p := range ports {
		portNames = append(portNames, p.(map[string]any)["name"])
	}
	require.Contains(t, portNames, ep["port"], "the endpoint's port is not a port name of the metrics Service")
	require.Equal(t, "https", ep["scheme"])
	require.Equal(t, "/metrics", ep["path"])
	require.Equal(t, "/var/run/secrets/kubernetes.io/serviceaccount/token", ep["bearerTokenFile"])
	server, _, _ := unstructured.NestedString(ep, "tlsConfig", "serverName")
	require.Equal(t, metrics.GetName()+"."+metrics.GetNamespace()+".svc", server, "a name the controller's serving certificate carries")
	_, insecure, _ := unstructured.NestedBool(ep, "tlsConfig", "insecureSkipVerify")
	require.False(t, insecure)
	cmName, _, _ := unstructured.NestedString(ep, "tlsConfig", "ca", "configMap", "name")
	cmKey, _, _ := unstructured.NestedString(ep, "tlsConfig", "ca", "configMap", "key")
	require.Equal(t, certs.CAConfigMap, cmName)
	require.Equal(t, "ca.crt", cmKey)

	// The CA ConfigMap is in the build, labelled so that the controller
	// fills and rotates it, without data of its own that an apply would
	// put back over the controller's.
	cm := find(objs, "ConfigMap", cmName)
	require.NotNil(t, cm)
	require.Equal(t, sm.GetNamespace(), cm.GetNamespace())
	require.Equal(t, "true", cm.GetLabels()[contract.LabelCABundle])
	require.NotContains(t, cm.Object, "data")

	// The scraper's account is bound to the role the controller checks.
	crb := find(objs, "ClusterRoleBinding", "prometheus-rankgate-metrics")
	require.NotNil(t, crb)
	role, _, _ := unstructured.NestedString(crb.Object, "roleRef", "name")
	require.Equal(t, "rankgate-metrics-reader", role)
	require.NotNil(t, find(objs, "ClusterRole", role))
}
