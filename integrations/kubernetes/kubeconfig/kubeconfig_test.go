package kubeconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func writeKubeconfig(t *testing.T, path, server string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: %s}
users:
- name: u
  user: {token: t}
contexts:
- name: main
  context: {cluster: c, user: u}
- name: other
  context: {cluster: c, user: u, namespace: x}
current-context: main
`, server)
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
}

// kubectl's order: --kubeconfig, then $KUBECONFIG, then ~/.kube/config,
// then the in-cluster config.
func TestLoadOrder(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	flag := filepath.Join(dir, "flag.yaml")
	env := filepath.Join(dir, "env.yaml")
	writeKubeconfig(t, flag, "https://from-flag:6443")
	writeKubeconfig(t, env, "https://from-env:6443")
	writeKubeconfig(t, filepath.Join(home, ".kube", "config"), "https://from-home:6443")
	t.Setenv("HOME", home)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")

	t.Setenv("KUBECONFIG", env)
	cfg, err := Load(flag, "", "rankgate-test")
	require.NoError(t, err)
	require.Equal(t, "https://from-flag:6443", cfg.Host, "--kubeconfig wins over $KUBECONFIG")
	require.Equal(t, "rankgate-test", cfg.UserAgent)

	cfg, err = Load("", "", "")
	require.NoError(t, err)
	require.Equal(t, "https://from-env:6443", cfg.Host, "$KUBECONFIG wins over ~/.kube/config")

	t.Setenv("KUBECONFIG", "")
	cfg, err = Load("", "other", "")
	require.NoError(t, err)
	require.Equal(t, "https://from-home:6443", cfg.Host, "then ~/.kube/config")

	_, err = Load("", "nope", "")
	require.Error(t, err, "an unknown context is an error")

	// No file anywhere, and not in a pod: an error, not a guess.
	t.Setenv("HOME", filepath.Join(dir, "empty"))
	_, err = Load("", "", "")
	require.Error(t, err)
	_, err = Load(filepath.Join(dir, "missing.yaml"), "", "")
	require.Error(t, err, "a --kubeconfig that does not exist is an error")
}

// The default namespace is the context's, else "default", as kubectl's;
// Contexts lists the file's contexts.
func TestNamespaceAndContexts(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	writeKubeconfig(t, path, "https://h:6443")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")

	_, ns, err := LoadWithNamespace(path, "", "")
	require.NoError(t, err)
	require.Equal(t, "default", ns, "the current context names no namespace")
	_, ns, err = LoadWithNamespace(path, "other", "")
	require.NoError(t, err)
	require.Equal(t, "x", ns, "the context's namespace")

	names, err := Contexts(path)
	require.NoError(t, err)
	require.Equal(t, []string{"main", "other"}, names)
}
