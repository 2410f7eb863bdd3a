package configs_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// helmBin is the pinned helm that make builds (and passes as
// $RANKGATE_HELM); without it the test is skipped.
func helmBin(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("RANKGATE_HELM"); h != "" {
		return h
	}
	h, err := filepath.Abs(filepath.Join("..", "bin", "tools", "helm-v3.22.0"))
	require.NoError(t, err)
	if _, err := os.Stat(h); err != nil {
		t.Skipf("helm v3.22.0 not built (make lint and make test build it into bin/tools): %v", err)
	}
	return h
}

// chartKubeVersion: the Kubernetes version helm template assumes (the
// chart needs 1.30 or later; a helm built from its module assumes 1.20).
const chartKubeVersion = "1.30.0"

// helmTemplate renders charts/rankgate (CRDs included) as release
// "rankgate" in namespace ns with the given --set values.
func helmTemplate(t *testing.T, ns string, set ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", "rankgate", filepath.Join("..", "charts", "rankgate"), "--namespace", ns, "--include-crds", "--kube-version", chartKubeVersion}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := exec.Command(helmBin(t), args...).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("helm %v: %v\n%s", args, err, ee.Stderr)
	}
	require.NoError(t, err)
	return decodeYAML(t, out)
}

// helmLabels are the labels the chart puts on every object, which the
// kustomize install does not carry.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/part-of"}

// sameInstall requires that the chart's render and the kustomize build
// hold the same objects (kind, namespace, name), equal in every field but
// the chart's own labels and, on the Deployment, the chart-only controller
// arguments named in extraArgs; onlyKustomize are objects the chart
// intentionally leaves out.
func sameInstall(t *testing.T, chart, kz []*unstructured.Unstructured, extraArgs, onlyKustomize []string) {
	t.Helper()
	var kept []*unstructured.Unstructured
	for _, u := range kz {
		if slices.Contains(onlyKustomize, ids([]*unstructured.Unstructured{u})[0]) {
			continue
		}
		if slices.Contains(clusterScopedUnknownToKustomize, u.GetKind()) {
			u = u.DeepCopy()
			u.SetNamespace("")
		}
		kept = append(kept, u)
	}
	require.Equal(t, ids(kept), ids(chart), "the chart and the kustomize install hold different objects")
	for _, want := range kept {
		got := find(chart, want.GetKind(), want.GetName()).DeepCopy()
		labels := got.GetLabels()
		for _, l := range helmLabels {
			// The CRD comes from the chart's crds/, which Helm does not template.
			if got.GetKind() != "CustomResourceDefinition" {
				require.Contains(t, labels, l, "%s %s", got.GetKind(), got.GetName())
			}
			delete(labels, l)
		}
		if len(labels) == 0 {
			labels = nil
		}
		got.SetLabels(labels)
		if got.GetKind() == "Deployment" {
			cs, _, _ := unstructured.NestedSlice(got.Object, "spec", "template", "spec", "containers")
			c := cs[0].(map[string]any)
			args, _, _ := unstructured.NestedStringSlice(c, "args")
			var base []string
			for _, a := range args {
				if !slices.Contains(extraArgs, a) {
					base = append(base, a)
				}
			}
			require.Len(t, base, len(args)-len(extraArgs), "the chart lacks arguments %v: %v", extraArgs, args)
			c["args"] = toAny(base)
			require.NoError(t, unstructured.SetNestedSlice(got.Object, cs, "spec", "template", "spec", "containers"))
		}
		require.Equal(t, want.Object, got.Object, "%s %s differs", want.GetKind(), want.GetName())
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// clusterScopedUnknownToKustomize: kinds newer than the API schema
// kustomize v5.8 carries, which it takes for namespaced: under a
// kustomization's namespace: it writes that namespace into their metadata,
// and the API server drops it (they are cluster-scoped; the e2e tests
// create them so).
var clusterScopedUnknownToKustomize = []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "FlowSchema"}

// chartOnlyArgs: the chart states the log level and the init container's
// resources, which the kustomize install leaves to the controller's
// defaults (the same values).
var chartOnlyArgs = []string{"--log-level=info", "--init-requests=cpu=100m,memory=128Mi", "--init-limits=cpu=100m,memory=128Mi"}

// The chart's default render is the kustomize install (configs/deploy),
// object by object, with these intentional differences: the chart does not
// create the release's namespace (helm install --create-namespace, or
// namespace.create=true), labels its objects as Helm's, and states the log
// level and init container resources the controller defaults to.
func TestHelmChartMatchesKustomize(t *testing.T) {
	chart := helmTemplate(t, "rankgate-system")
	kz := buildInstall(t, "", nil)
	sameInstall(t, chart, kz, chartOnlyArgs, []string{"Namespace /rankgate-system"})

	// With namespace.create, the Namespace is the shipped one too.
	chart = helmTemplate(t, "rankgate-system", "namespace.create=true")
	sameInstall(t, chart, kz, chartOnlyArgs, nil)

	// In another namespace, the chart and kustomize's namespace: agree too.
	sameInstall(t, helmTemplate(t, "ml-platform", "namespace.create=true"), buildInstall(t, "ml-platform", nil), chartOnlyArgs, nil)
	sameInstall(t, helmTemplate(t, "ml-platform", "namespace.create=true", "certificates.mode=cert-manager", "onFail=delete",
		"operatorPods.enabled=true", "monitoring.serviceMonitor.enabled=true", "monitoring.prometheusRule.enabled=true",
		"monitoring.dashboard.enabled=true"), buildInstall(t, "ml-platform", components), chartOnlyArgs, nil)
}

// The chart's values that mirror the components render what kustomize
// builds with every component.
func TestHelmChartValuesMatchComponents(t *testing.T) {
	chart := helmTemplate(t, "rankgate-system", "namespace.create=true", "certificates.mode=cert-manager", "onFail=delete",
		"operatorPods.enabled=true", "monitoring.serviceMonitor.enabled=true", "monitoring.prometheusRule.enabled=true",
		"monitoring.dashboard.enabled=true")
	sameInstall(t, chart, buildInstall(t, "", components), chartOnlyArgs, nil)
}

// Installed under another namespace and service account name, the chart
// names them wherever the controller's identity appears.
func TestHelmChartInAnotherNamespace(t *testing.T) {
	chart := helmTemplate(t, "ml-platform", "namespace.create=true", "serviceAccount.name=gatekeeper", "certificates.mode=cert-manager",
		"monitoring.serviceMonitor.enabled=true", "onFail=delete")
	controllerIdentityIn(t, chart, "ml-platform", "gatekeeper")
}

// The values reach the controller: webhooks per job kind or off, the
// on-fail action, timeouts, log level, init container resources, and no
// NetworkPolicy when asked.
func TestHelmChartValues(t *testing.T) {
	objs := helmTemplate(t, "rankgate-system", "webhooks.jobKinds={mpijobs}", "gangTimeout=30m", "pendingGrace=2m", "logLevel=debug",
		"initContainer.requests.cpu=50m", "initContainer.limits.memory=256Mi", "networkPolicy.enabled=false", "replicas=3", "onFail=annotate")
	dep := find(objs, "Deployment", "rankgate-controller")
	require.NotNil(t, dep)
	require.EqualValues(t, 3, dep.Object["spec"].(map[string]any)["replicas"])
	cs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	args, _, _ := unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
	for _, a := range []string{"--gang-timeout=30m", "--pending-grace=2m", "--log-level=debug", "--on-fail=annotate", "--webhook-addr=:9443",
		"--init-requests=cpu=50m,memory=128Mi", "--init-limits=cpu=100m,memory=256Mi"} {
		require.Contains(t, args, a)
	}
	require.Nil(t, find(objs, "NetworkPolicy", "rankgate-controller"))
	require.Nil(t, find(objs, "ClusterRole", "rankgate-controller-delete-jobs"), "annotate needs no delete")
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		hooks, _, _ := unstructured.NestedSlice(find(objs, kind, "rankgate").Object, "webhooks")
		require.Len(t, hooks, 2)
		for _, h := range hooks {
			rules, _, _ := unstructured.NestedSlice(h.(map[string]any), "rules")
			require.Len(t, rules, 1, kind)
			res, _, _ := unstructured.NestedStringSlice(rules[0].(map[string]any), "resources")
			require.Equal(t, []string{"mpijobs"}, res)
		}
	}

	off := helmTemplate(t, "rankgate-system", "webhooks.enabled=false")
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		require.Nil(t, find(off, kind, "rankgate"))
	}
	require.Nil(t, find(off, "Service", "rankgate-webhook"))
	cs, _, _ = unstructured.NestedSlice(find(off, "Deployment", "rankgate-controller").Object, "spec", "template", "spec", "containers")
	args, _, _ = unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
	require.Contains(t, args, "--webhook-addr=0")
	np, _, _ := unstructured.NestedSlice(find(off, "NetworkPolicy", "rankgate-controller").Object, "spec", "ingress")
	for _, r := range np {
		require.NotContains(t, strings.Join(portNames(r), ","), "webhook", "the webhook port stays open without webhooks")
	}

	// values.schema.json refuses unknown values and misspelt keys.
	for _, bad := range []string{"onFail=explode", "certificates.mode=vault", "webhooks.jobKinds={tfjobs}", "replica=3", "logLevel=verbose"} {
		out, err := exec.Command(helmBin(t), "template", "rankgate", filepath.Join("..", "charts", "rankgate"), "--kube-version", chartKubeVersion, "--set", bad).CombinedOutput()
		require.Error(t, err, bad)
		require.Contains(t, string(out), strings.SplitN(strings.SplitN(bad, "=", 2)[0], ".", 2)[0], "%s: %s", bad, out)
	}
}

func portNames(rule any) []string {
	ports, _, _ := unstructured.NestedSlice(rule.(map[string]any), "ports")
	var out []string
	for _, p := range ports {
		if s, ok := p.(map[string]any)["port"].(string); ok {
			out = append(out, s)
		}
	}
	return out
}
