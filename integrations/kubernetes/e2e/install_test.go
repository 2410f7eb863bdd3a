package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
)

// controlPlaneKinds are the objects of an install that gangThroughInstall
// needs (the controller runs in the test process, not from its Deployment).
var controlPlaneKinds = []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
	"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "FlowSchema", "Service"}

func ofKinds(objs []*unstructured.Unstructured, kinds []string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range objs {
		if slices.Contains(kinds, u.GetKind()) {
			out = append(out, u)
		}
	}
	return out
}

// helmRender renders charts/rankgate with the pinned helm ($RANKGATE_HELM,
// else bin/tools; the test is skipped without it) into namespace ns.
func helmRender(t *testing.T, ns string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	h := os.Getenv("RANKGATE_HELM")
	if h == "" {
		h = filepath.Join(root, "bin", "tools", "helm-v3.22.0")
	}
	if _, err := os.Stat(h); err != nil {
		t.Skipf("helm v3.22.0 not built (make test builds it into bin/tools): %v", err)
	}
	// The chart needs Kubernetes 1.30; a helm built from its module
	// assumes 1.20 unless told.
	cmd := append([]string{"template", "rankgate", filepath.Join(root, "charts", "rankgate"), "--namespace", ns, "--kube-version", "1.30.0"}, args...)
	out, err := exec.Command(h, cmd...).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("helm %v: %v\n%s", cmd, err, ee.Stderr)
	}
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "chart.yaml")
	require.NoError(t, os.WriteFile(file, out, 0o600))
	return decodeManifest(t, file)
}

// The kustomize install under another namespace (namespace: in the user's
// kustomization over configs/deploy): the controller, as that namespace's
// service account, decides gangs and every write it makes passes the
// built admission policies and RBAC.
func TestE2EKustomizeInstallInAnotherNamespace(t *testing.T) {
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	const ns = "e2e-rankgate-elsewhere"
	dir := t.TempDir()
	base, err := filepath.Rel(dir, filepath.Join(root, "configs", "deploy"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"),
		fmt.Appendf(nil, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: %s\nresources:\n  - %s\n", ns, base), 0o600))
	out, err := exec.Command(kustomizeBin(t, root), "build", dir).Output()
	require.NoError(t, err)
	file := filepath.Join(dir, "out.yaml")
	require.NoError(t, os.WriteFile(file, out, 0o600))
	gangThroughInstall(t, ofKinds(decodeManifest(t, file), controlPlaneKinds), ns, controllerSA, "e2e-rbac-kustomize")
}

// The chart installed under another namespace and service account name:
// the controller, as that account, decides gangs through the chart's
// admission policies and RBAC.
func TestE2EHelmChartRunsAGang(t *testing.T) {
	const ns, sa = "e2e-rankgate-helm", "gatekeeper"
	objs := helmRender(t, ns, "--set", "namespace.create=true", "--set", "serviceAccount.name="+sa)
	gangThroughInstall(t, ofKinds(objs, controlPlaneKinds), ns, sa, "e2e-rbac-helm")
}

// The chart's render, CRDs included, is accepted by a real API server:
// the default values created for real, the optional parts (cert-manager,
// on-fail delete, operator pods) in a dry run; every flag its Deployment
// passes is one rankgate controller has (applyBuilt).
func TestE2EHelmChartInstall(t *testing.T) {
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	applyManifest(t, filepath.Join(root, "configs", "deploy", "namespace.yaml"))
	objs := helmRender(t, controllerNS, "--include-crds")
	applyBuilt(t, "chart", objs, true)
	withOptions := helmRender(t, controllerNS, "--set", "certificates.mode=cert-manager", "--set", "onFail=delete",
		"--set", "operatorPods.enabled=true", "--set", "webhooks.jobKinds={mpijobs}", "--set", "pendingGrace=2m")
	applyBuilt(t, "chart with options", withOptions, false)
}

// controllerFlagsKnown: every flag the Deployment passes to the
// controller container is one rankgate controller (the binary under test)
// has; what names the install.
func controllerFlagsKnown(t *testing.T, what string, dep *unstructured.Unstructured) {
	t.Helper()
	help, err := exec.Command(binary, "controller", "--help").CombinedOutput()
	require.NoError(t, err, "%s", help)
	cs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
	require.Equal(t, "controller", args[0], what)
	for _, a := range args[1:] {
		flag, _, _ := strings.Cut(a, "=")
		require.Regexp(t, `^--[a-z-]+$`, flag, what)
		require.Contains(t, string(help), "  "+flag+" ", "%s: rankgate controller has no flag %s", what, flag)
	}
}
