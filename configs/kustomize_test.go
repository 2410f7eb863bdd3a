package configs_test

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
)

// components are the optional parts of the install (configs/components).
var components = []string{"cert-manager", "on-fail-delete", "operator-pods", "servicemonitor"}

// buildInstall writes a kustomization into a temporary directory that has
// configs/deploy as its resource, the named components, and namespace ns
// ("" keeps the shipped one), and builds it with the pinned kustomize.
func buildInstall(t *testing.T, ns string, comps []string) []*unstructured.Unstructured {
	t.Helper()
	return buildInstallOf(t, "deploy", ns, comps)
}

// buildInstallOf: buildInstall over the install in directory deploy.
func buildInstallOf(t *testing.T, deploy, ns string, comps []string) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	rel := func(p string) string {
		abs, err := filepath.Abs(p)
		require.NoError(t, err)
		r, err := filepath.Rel(dir, abs)
		require.NoError(t, err)
		return r
	}
	var b strings.Builder
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n")
	if ns != "" {
		fmt.Fprintf(&b, "namespace: %s\n", ns)
	}
	fmt.Fprintf(&b, "resources:\n  - %s\n", rel(deploy))
	if len(comps) > 0 {
		b.WriteString("components:\n")
		for _, c := range comps {
			fmt.Fprintf(&b, "  - %s\n", rel(filepath.Join("components", c)))
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(b.String()), 0o600))
	return kustomizeBuild(t, dir)
}

func kustomizeBuild(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, err := exec.Command(kustomize(t), "build", dir).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, ee.Stderr)
	}
	require.NoError(t, err)
	return decodeYAML(t, out)
}

// controllerIdentityIn asserts that every place of a built install that
// names the controller's service account names ns/sa, and that no object
// names the shipped namespace any more (unless ns is that namespace).
func controllerIdentityIn(t *testing.T, objs []*unstructured.Unstructured, ns, sa string) {
	t.Helper()
	require.NotNil(t, find(objs, "ServiceAccount", sa))
	require.Equal(t, ns, find(objs, "ServiceAccount", sa).GetNamespace())
	nsObj := find(objs, "Namespace", ns)
	require.NotNil(t, nsObj, "no Namespace %s in the build", ns)

	// The admission policies' user name: 'system:serviceaccount:' + 'NS' + ':' + 'SA'.
	for policy, cond := range map[string]string{"rankgate-controller-job-writes": "rankgate-controller", "rankgate-controller-jobset-writes": "rankgate-controller", "rankgate-gang-writes": "not-rankgate-controller"} {
		vap := find(objs, "ValidatingAdmissionPolicy", policy)
		require.NotNil(t, vap, policy)
		conds, _, _ := unstructured.NestedSlice(vap.Object, "spec", "matchConditions")
		var expr string
		for _, c := range conds {
			if c.(map[string]any)["name"] == cond {
				expr = c.(map[string]any)["expression"].(string)
			}
		}
		parts := strings.Split(expr, "'")
		require.Len(t, parts, 9, "%s: %q", policy, expr)
		require.Equal(t, "system:serviceaccount:"+ns+":"+sa, parts[1]+parts[3]+parts[5]+parts[7], "%s: %q", policy, expr)
		require.Equal(t, []string{" + ", " + ", " + "}, []string{parts[2], parts[4], parts[6]}, "%s: %q is not one concatenation", policy, expr)
	}

	fs := find(objs, "FlowSchema", "rankgate-verdicts")
	require.NotNil(t, fs)
	rules, _, _ := unstructured.NestedSlice(fs.Object, "spec", "rules")
	require.NotEmpty(t, rules)
	for _, r := range rules {
		subjects, _, _ := unstructured.NestedSlice(r.(map[string]any), "subjects")
		require.NotEmpty(t, subjects)
		for _, s := range subjects {
			got, _, _ := unstructured.NestedStringMap(s.(map[string]any), "serviceAccount")
			require.Equal(t, map[string]string{"namespace": ns, "name": sa}, got, "FlowSchema subject")
		}
	}

	// Every binding to the controller's roles names its account (the
	// metrics reader's binds the scraper).
	bound := 0
	for _, u := range objs {
		if u.GetKind() != "RoleBinding" && u.GetKind() != "ClusterRoleBinding" {
			continue
		}
		if u.GetKind() == "RoleBinding" {
			require.Equal(t, ns, u.GetNamespace(), "RoleBinding %s", u.GetName())
		}
		if role, _, _ := unstructured.NestedString(u.Object, "roleRef", "name"); role == "rankgate-metrics-reader" {
			continue
		}
		subjects, _, _ := unstructured.NestedSlice(u.Object, "subjects")
		require.Len(t, subjects, 1, "%s %s", u.GetKind(), u.GetName())
		m := subjects[0].(map[string]any)
		require.Equal(t, map[string]any{"kind": "ServiceAccount", "namespace": ns, "name": sa}, m, "%s %s", u.GetKind(), u.GetName())
		bound++
	}
	require.GreaterOrEqual(t, bound, 4, "bindings of the controller's account")
	dep := find(objs, "Deployment", "rankgate-controller")
	require.NotNil(t, dep)
	require.Equal(t, ns, dep.GetNamespace())
	acct, _, _ := unstructured.NestedString(dep.Object, "spec", "template", "spec", "serviceAccountName")
	require.Equal(t, sa, acct)

	// The webhooks call Service rankgate-webhook in ns, which the build holds.
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		wh := find(objs, kind, "rankgate")
		require.NotNil(t, wh, kind)
		hooks, _, _ := unstructured.NestedSlice(wh.Object, "webhooks")
		require.NotEmpty(t, hooks)
		for _, h := range hooks {
			svcNS, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "service", "namespace")
			svcName, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "service", "name")
			require.Equal(t, ns, svcNS, "%s", kind)
			s := find(objs, "Service", svcName)
			require.NotNil(t, s, "%s calls Service %q, which the install lacks", kind, svcName)
			require.Equal(t, ns, s.GetNamespace())
		}
		if a := wh.GetAnnotations()["cert-manager.io/inject-ca-from"]; a != "" {
			require.Equal(t, ns+"/rankgate-gate", a, kind)
		}
	}
	if cert := find(objs, "Certificate", "rankgate-gate"); cert != nil {
		names, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		for _, svc := range []string{"rankgate-gate", "rankgate-webhook", "rankgate-metrics"} {
			require.Contains(t, names, svc+"."+ns+".svc", "certificate DNS names")
			require.Contains(t, names, svc+"."+ns+".svc.cluster.local", "certificate DNS names")
		}
		require.Len(t, names, 6)
	}
	if sm := find(objs, "ServiceMonitor", "rankgate-controller"); sm != nil {
		nss, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
		require.Equal(t, []string{ns}, nss)
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		server, _, _ := unstructured.NestedString(eps[0].(map[string]any), "tlsConfig", "serverName")
		require.Equal(t, "rankgate-metrics."+ns+".svc", server)
	}

	// Nothing else names the shipped namespace: every namespaced object is
	// in ns (the Prometheus's binding subject is the scraper's own).
	for _, u := range objs {
		if u.GetNamespace() != "" {
			require.Equal(t, ns, u.GetNamespace(), "%s %s", u.GetKind(), u.GetName())
		}
	}
	if ns != "rankgate-system" {
		for _, u := range objs {
			b, err := u.MarshalJSON()
			require.NoError(t, err)
			require.NotContains(t, string(b), "rankgate-system", "%s %s still names the shipped namespace", u.GetKind(), u.GetName())
		}
	}
}

// An install under another namespace (namespace: in the user's own
// kustomization): the admission policies, the FlowSchema, the bindings,
// the webhooks' Service, the certificate's DNS names and the scrape all
// name it, with every component.
func TestKustomizeInstallInAnotherNamespace(t *testing.T) {
	controllerIdentityIn(t, buildInstall(t, "", components), "rankgate-system", "rankgate-controller")
	controllerIdentityIn(t, buildInstall(t, "ml-platform", components), "ml-platform", "rankgate-controller")
	controllerIdentityIn(t, buildInstall(t, "ml-platform", nil), "ml-platform", "rankgate-controller")

	// A copy of configs/deploy whose ServiceAccount is renamed in rbac.yaml,
	// with every component, in another namespace.
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, os.DirFS("deploy")))
	rbac, err := os.ReadFile(filepath.Join(dir, "rbac.yaml"))
	require.NoError(t, err)
	sa := "kind: ServiceAccount\nmetadata:\n  name: rankgate-controller\n"
	require.Contains(t, string(rbac), sa)
	renamed := strings.Replace(string(rbac), sa, "kind: ServiceAccount\nmetadata:\n  name: gatekeeper\n", 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rbac.yaml"), []byte(renamed), 0o600))
	controllerIdentityIn(t, kustomizeBuild(t, dir), "rankgate-system", "gatekeeper")
	controllerIdentityIn(t, buildInstallOf(t, dir, "ml-platform", components), "ml-platform", "gatekeeper")
}

// Every combination of the components builds on configs/deploy with the
// pinned kustomize (each adds its objects once), and each overlay of
// configs/overlays is the install with its one component.
func TestKustomizeComponentsCompose(t *testing.T) {
	base := buildInstall(t, "", nil)
	alone := map[string][]*unstructured.Unstructured{}
	for _, c := range components {
		objs := buildInstall(t, "", []string{c})
		alone[c] = added(base, objs)
		require.NotEmpty(t, alone[c], "component %s adds nothing", c)
		require.Equal(t, ids(objs), ids(kustomizeBuild(t, filepath.Join("overlays", c))), "overlays/%s is not the install with components/%s", c, c)
	}
	for mask := 1; mask < 1<<len(components); mask++ {
		var comps []string
		want := ids(base)
		for i, c := range components {
			if mask&(1<<i) != 0 {
				comps = append(comps, c)
				want = append(want, ids(alone[c])...)
			}
		}
		t.Run(strings.Join(comps, "+"), func(t *testing.T) {
			objs := buildInstall(t, "", comps)
			slices.Sort(want)
			require.Equal(t, want, ids(objs))
			dep := find(objs, "Deployment", "rankgate-controller")
			cs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
			args, _, _ := unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
			require.Equal(t, slices.Contains(comps, "cert-manager"), slices.Contains(args, "--manage-certs=false"), "%v", args)
			require.Equal(t, slices.Contains(comps, "on-fail-delete"), slices.Contains(args, "--on-fail=delete"), "%v", args)
		})
	}
}

func ids(objs []*unstructured.Unstructured) []string {
	out := make([]string, 0, len(objs))
	for _, u := range objs {
		out = append(out, u.GetKind()+" "+u.GetNamespace()+"/"+u.GetName())
	}
	slices.Sort(out)
	return out
}

// added are the objects of objs that base lacks.
func added(base, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	have := ids(base)
	var out []*unstructured.Unstructured
	for _, u := range objs {
		if !slices.Contains(have, ids([]*unstructured.Unstructured{u})[0]) {
			out = append(out, u)
		}
	}
	return out
}
