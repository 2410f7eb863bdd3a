package kubeconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"
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

// kubectl's connection flags (cli-runtime's ConfigFlags) override the
// file: --server, --token, --as, --as-group, --request-timeout, -n.
func TestFromFlagsOverrides(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	writeKubeconfig(t, path, "https://h:6443")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")

	var f Flags
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	f.AddFlags(fs, "30s", true)
	require.NoError(t, fs.Parse([]string{"--kubeconfig", path, "--server", "https://other:6443", "--token", "secret", "--as", "alice", "--as-group", "team", "--request-timeout", "45s", "-n", "ml"}))
	cfg, gotNS, err := FromFlags(&f, "ua")
	require.NoError(t, err)
	require.Equal(t, "https://other:6443", cfg.Host)
	require.Equal(t, "secret", cfg.BearerToken)
	require.Equal(t, "alice", cfg.Impersonate.UserName)
	require.Equal(t, []string{"team"}, cfg.Impersonate.Groups)
	require.Equal(t, 45*time.Second, cfg.Timeout)
	require.Equal(t, "ml", gotNS)
	require.Equal(t, "ua", cfg.UserAgent)

	// --server and --token alone, without any file: no guess needed.
	t.Setenv("HOME", filepath.Join(dir, "empty"))
	t.Setenv("KUBECONFIG", "")
	f = Flags{}
	fs = pflag.NewFlagSet("t", pflag.ContinueOnError)
	f.AddFlags(fs, "30s", true)
	require.NoError(t, fs.Parse([]string{"--server", "https://other:6443", "--token", "secret"}))
	cfg, gotNS, err = FromFlags(&f, "")
	require.NoError(t, err)
	require.Equal(t, "https://other:6443", cfg.Host)
	require.Equal(t, "default", gotNS)
	require.Equal(t, 30*time.Second, cfg.Timeout, "the default --request-timeout")
	require.Nil(t, fs.Lookup("password"), "no basic auth")
}

// A kubeconfig error names the file it read or looked for.
func TestErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	writeKubeconfig(t, path, "https://h:6443")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")

	_, err := Load(path, "nope", "")
	require.ErrorContains(t, err, path+": ")
	require.ErrorContains(t, err, `context "nope" does not exist`)

	t.Setenv("KUBECONFIG", path)
	_, err = Load("", "nope", "")
	require.ErrorContains(t, err, path+" ($KUBECONFIG): ")

	t.Setenv("KUBECONFIG", "")
	t.Setenv("HOME", filepath.Join(dir, "home"))
	_, err = Load("", "", "")
	require.ErrorContains(t, err, "no kubeconfig at "+filepath.Join(dir, "home", ".kube", "config")+" and not in a pod")

	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, []byte("{not yaml"), 0o600))
	_, err = Load(bad, "", "")
	require.ErrorContains(t, err, bad)
}
