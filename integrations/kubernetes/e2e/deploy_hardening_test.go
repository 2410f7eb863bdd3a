package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
)

// The identity configs/deploy gives the controller.
const (
	controllerNS   = "rankgate-system"
	controllerSA   = "rankgate-controller"
	controllerUser = "system:serviceaccount:" + controllerNS + ":" + controllerSA
	jobWritePolicy = "rankgate-controller-job-writes"
)

func deployDir(t testing.TB) string {
	t.Helper()
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	return filepath.Join(root, "configs", "deploy")
}

// asServiceAccount returns cfg impersonating a service account, with the
// groups the API server gives one.
func asServiceAccount(ns, name string) *rest.Config {
	cfg := rest.CopyConfig(restCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	return cfg
}

// waitJobWritePolicy waits until the API server enforces the shipped
// ValidatingAdmissionPolicy (it loads new policies asynchronously): the
// controller's change to a probe job's pod template is refused by it.
func waitJobWritePolicy(t *testing.T) {
	t.Helper()
	waitJobWritePolicyAs(t, controllerNS, controllerSA)
}

// waitJobWritePolicyAs: waitJobWritePolicy for a controller installed as
// service account sa in namespace ns.
func waitJobWritePolicyAs(t *testing.T, ns, sa string) {
	t.Helper()
	ctx := context.Background()
	ctl, err := client.New(asServiceAccount(ns, sa), client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)
	probe := pytorchJob(t, ns, fmt.Sprintf("policy-probe-%d", time.Now().UnixNano()), false, 1, nil)
	i := 0
	require.Eventually(t, func() bool {
		i++
		patch := fmt.Sprintf(`{"spec":{"pytorchReplicaSpecs":{"Worker":{"template":{"spec":{"containers":[{"name":"pytorch","image":"probe:%d"}]}}}}}}`, i)
		err := ctl.Patch(ctx, probe, client.RawPatch(types.MergePatchType, []byte(patch)))
		return err != nil && strings.Contains(err.Error(), jobWritePolicy)
	}, 30*time.Second, 200*time.Millisecond, "the API server never enforced ValidatingAdmissionPolicy %s", jobWritePolicy)
	require.NoError(t, k8s.Delete(ctx, probe))
}

// The shipped ValidatingAdmissionPolicy lets the controller's service
// account write only what the controller writes on a PyTorchJob or MPIJob
// (rankgate.io/ annotations, spec.runPolicy.suspend) and refuses every
// other change it tries; other users are not affected.
func TestE2EJobWritePolicy(t *testing.T) {
	dir := deployDir(t)
	for _, f := range []string{"namespace.yaml", "rbac.yaml", "admission-policy.yaml"} {
		applyManifest(t, filepath.Join(dir, f))
	}
	waitJobWritePolicy(t)
	ctx := context.Background()
	ctl, err := client.New(asServiceAccount(controllerNS, controllerSA), client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)
	ns := newNamespace(t, "e2e-job-policy", true)

	type kind struct {
		name     string
		make     func(name string) client.Object
		template string // a merge patch that changes a pod template
		replicas string // a merge patch that changes a replica count
	}
	kinds := []kind{
		{"PyTorchJob", func(name string) client.Object {
			return pytorchJob(t, ns, name, true, 1, map[string]string{"team": "vision"})
		},
			`{"spec":{"pytorchReplicaSpecs":{"Worker":{"template":{"spec":{"containers":[{"name":"pytorch","image":"attacker/image"}]}}}}}}`,
			`{"spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":7}}}}`},
		{"MPIJob", func(name string) client.Object {
			j := mpiJob(t, ns, name, 2)
			require.NoError(t, k8s.Patch(ctx, j, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"team":"vision"}}}`))))
			return j
		},
			`{"spec":{"mpiReplicaSpecs":{"Worker":{"template":{"spec":{"containers":[{"name":"mpi","image":"attacker/image"}]}}}}}}`,
			`{"spec":{"mpiReplicaSpecs":{"Worker":{"replicas":7}}}}`},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			job := k.make(strings.ToLower(k.name))
			key := client.ObjectKeyFromObject(job)
			allowed := []struct{ what, patch string }{
				{"verdict annotations and suspend in one patch (what the controller writes)",
					`{"metadata":{"annotations":{"rankgate.io/verdict":"fail","rankgate.io/action":"suspend"}},"spec":{"runPolicy":{"suspend":true}}}`},
				{"resume and clear a rankgate.io/ annotation",
					`{"metadata":{"annotations":{"rankgate.io/action":null,"rankgate.io/previous-verdict":"fail"}},"spec":{"runPolicy":{"suspend":false}}}`},
			}
			for _, a := range allowed {
				require.NoError(t, ctl.Patch(ctx, job, client.RawPatch(types.MergePatchType, []byte(a.patch))), a.what)
			}
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(gvkOf(t, job))
			require.NoError(t, k8s.Get(ctx, key, got))
			require.Equal(t, "fail", got.GetAnnotations()["rankgate.io/verdict"])
			require.Equal(t, "fail", got.GetAnnotations()["rankgate.io/previous-verdict"])
			require.NotContains(t, got.GetAnnotations(), "rankgate.io/action")
			suspend, _, _ := unstructured.NestedBool(got.Object, "spec", "runPolicy", "suspend")
			require.False(t, suspend)

			refused := []struct{ what, patch string }{
				{"pod template image", k.template},
				{"replica count", k.replicas},
				{"another runPolicy field", `{"spec":{"runPolicy":{"backoffLimit":9}}}`},
				{"suspend together with a template", strings.Replace(k.template, `{"spec":{`, `{"spec":{"runPolicy":{"suspend":true},`, 1)},
				{"a new annotation outside rankgate.io/", `{"metadata":{"annotations":{"rankgate.io/verdict":"pass","team-budget":"unlimited"}}}`},
				{"another annotation's value", `{"metadata":{"annotations":{"team":"other"}}}`},
				{"removing another annotation", `{"metadata":{"annotations":{"team":null}}}`},
				{"a label", `{"metadata":{"labels":{"kueue.x-k8s.io/queue-name":"free"}}}`},
				{"a finalizer", `{"metadata":{"finalizers":["example.com/hold"]}}`},
			}
			before := &unstructured.Unstructured{}
			before.SetGroupVersionKind(gvkOf(t, job))
			require.NoError(t, k8s.Get(ctx, key, before))
			for _, r := range refused {
				err := ctl.Patch(ctx, job, client.RawPatch(types.MergePatchType, []byte(r.patch)))
				require.Error(t, err, "%s: allowed", r.what)
				require.True(t, apierrors.IsForbidden(err), "%s: %v", r.what, err)
				require.Contains(t, err.Error(), jobWritePolicy, "%s: refused by something else", r.what)
			}
			after := &unstructured.Unstructured{}
			after.SetGroupVersionKind(gvkOf(t, job))
			require.NoError(t, k8s.Get(ctx, key, after))
			require.Equal(t, before.GetResourceVersion(), after.GetResourceVersion(), "a refused patch changed the job")

			// Anyone else (here the cluster admin) is not matched.
			require.NoError(t, k8s.Patch(ctx, job, client.RawPatch(types.MergePatchType, []byte(k.template))))
			require.NoError(t, k8s.Patch(ctx, job, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"team":"other"}}}`))))
		})
	}
}

func gvkOf(t testing.TB, o client.Object) schema.GroupVersionKind {
	t.Helper()
	gvks, _, err := controller.Scheme().ObjectKinds(o)
	require.NoError(t, err)
	return gvks[0]
}

// kustomization is the part of a kustomization.yaml the tests read.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Components []string `json:"components"`
	// Replacements: not read here; named so that strict decoding accepts them.
	Replacements []any `json:"replacements"`
	Patches      []struct {
		Target map[string]string `json:"target"`
		Patch  string            `json:"patch"`
	} `json:"patches"`
	Images []struct {
		Name   string `json:"name"`
		NewTag string `json:"newTag"`
	} `json:"images"`
}

func readKustomization(t testing.TB, dir string) kustomization {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	require.NoError(t, err)
	var k kustomization
	require.NoError(t, yaml.UnmarshalStrict(b, &k, yaml.DisallowUnknownFields), "kustomization in %s has fields the test does not know", dir)
	return k
}

// kustomizeObjects returns the objects a kustomization's resources and
// components hold (following directories), without its patches.
func kustomizeObjects(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	k := readKustomization(t, dir)
	for _, r := range append(k.Resources, k.Components...) {
		p := filepath.Join(dir, r)
		st, err := os.Stat(p)
		require.NoError(t, err, "%s: resource %s", dir, r)
		if st.IsDir() {
			out = append(out, kustomizeObjects(t, p)...)
			continue
		}
		out = append(out, decodeManifest(t, p)...)
	}
	return out
}

// jobDeleteGrants names the ClusterRoles among objs, bound to the
// controller's service account, that allow deleting PyTorchJobs or MPIJobs.
func jobDeleteGrants(t testing.TB, objs []*unstructured.Unstructured) []string {
	t.Helper()
	bound := map[string]bool{}
	for _, u := range objs {
		if u.GetKind() != "ClusterRoleBinding" {
			continue
		}
		b := &rbacv1.ClusterRoleBinding{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, b))
		for _, s := range b.Subjects {
			if s.Kind == "ServiceAccount" && s.Namespace == controllerNS && s.Name == controllerSA {
				bound[b.RoleRef.Name] = true
			}
		}
	}
	var out []string
	for _, u := range objs {
		if u.GetKind() != "ClusterRole" || !bound[u.GetName()] {
			continue
		}
		cr := &rbacv1.ClusterRole{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cr))
		for _, r := range cr.Rules {
			group := slices.Contains(r.APIGroups, "kubeflow.org") || slices.Contains(r.APIGroups, "*")
			jobs := slices.Contains(r.Resources, "pytorchjobs") || slices.Contains(r.Resources, "mpijobs") || slices.Contains(r.Resources, "*")
			del := slices.Contains(r.Verbs, "delete") || slices.Contains(r.Verbs, "deletecollection") || slices.Contains(r.Verbs, "*")
			if group && jobs && del {
				out = append(out, cr.Name)
			}
		}
	}
	return out
}

// The base install cannot delete Kubeflow jobs; the on-fail-delete
// component (and its overlay) adds exactly that and switches --on-fail, on
// the manifests and on a real API server's RBAC.
func TestE2EJobDeleteOnlyInOverlay(t *testing.T) {
	dir := deployDir(t)
	overlay := filepath.Join(filepath.Dir(dir), "overlays", "on-fail-delete")
	component := filepath.Join(filepath.Dir(dir), "components", "on-fail-delete")

	// Every manifest in configs/deploy is part of the install.
	base := readKustomization(t, dir)
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	for _, f := range files {
		if name := filepath.Base(f); name != "kustomization.yaml" {
			require.Contains(t, base.Resources, name, "configs/deploy/%s is not in kustomization.yaml", name)
		}
	}
	baseObjs := kustomizeObjects(t, dir)
	require.Empty(t, jobDeleteGrants(t, baseObjs), "the base install lets the controller delete jobs")
	overlayObjs := kustomizeObjects(t, overlay)
	require.Equal(t, []string{"rankgate-controller-delete-jobs"}, jobDeleteGrants(t, overlayObjs))
	require.Len(t, overlayObjs, len(baseObjs)+2, "the overlay adds only the delete role and its binding")

	// The component's patch turns the base's --on-fail=suspend into delete.
	k := readKustomization(t, component)
	require.Len(t, k.Patches, 1)
	var ops []struct{ Op, Path, Value string }
	require.NoError(t, yaml.Unmarshal([]byte(k.Patches[0].Patch), &ops))
	require.Len(t, ops, 2)
	require.Equal(t, "test", ops[0].Op)
	require.Equal(t, "replace", ops[1].Op)
	require.Equal(t, ops[0].Path, ops[1].Path)
	require.Equal(t, "--on-fail=delete", ops[1].Value)
	var dep *appsv1.Deployment
	for _, u := range baseObjs {
		if u.GetKind() == "Deployment" && u.GetName() == k.Patches[0].Target["name"] {
			dep = &appsv1.Deployment{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, dep))
		}
	}
	require.NotNil(t, dep, "patch target %v not in the base", k.Patches[0].Target)
	var arg int
	_, err = fmt.Sscanf(ops[0].Path, "/spec/template/spec/containers/0/args/%d", &arg)
	require.NoError(t, err, ops[0].Path)
	require.Equal(t, ops[0].Value, dep.Spec.Template.Spec.Containers[0].Args[arg], "the overlay's patch no longer matches deployment.yaml")

	// On the API server: the controller may patch but not delete jobs until
	// the overlay's role is applied.
	applyManifest(t, filepath.Join(dir, "namespace.yaml"))
	applyManifest(t, filepath.Join(dir, "rbac.yaml"))
	can := func(verb, resource string) bool {
		sar, err := clientset.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: controllerUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + controllerNS, "system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{Namespace: "ml", Verb: verb, Group: "kubeflow.org", Resource: resource},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
		return sar.Status.Allowed
	}
	require.Eventually(t, func() bool { return can("patch", "pytorchjobs") && can("patch", "mpijobs") }, 10*time.Second, 100*time.Millisecond)
	require.False(t, can("delete", "pytorchjobs"))
	require.False(t, can("delete", "mpijobs"))
	applyManifest(t, filepath.Join(component, "delete-jobs.yaml"))
	require.Eventually(t, func() bool { return can("delete", "pytorchjobs") && can("delete", "mpijobs") }, 10*time.Second, 100*time.Millisecond)
}

// The shipped NetworkPolicy selects the controller's pods, opens the gate
// to every namespace and /metrics only to labelled namespaces, by port
// names the Deployment declares; the API server accepts it.
func TestE2ENetworkPolicySelectsController(t *testing.T) {
	dir := deployDir(t)
	var dep *appsv1.Deployment
	for _, u := range decodeManifest(t, filepath.Join(dir, "deployment.yaml")) {
		if u.GetKind() == "Deployment" {
			dep = &appsv1.Deployment{}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, dep))
		}
	}
	require.NotNil(t, dep)
	ports := map[string]int32{}
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		ports[p.Name] = p.ContainerPort
	}
	objs := decodeManifest(t, filepath.Join(dir, "networkpolicy.yaml"))
	require.Len(t, objs, 1)
	np := &networkingv1.NetworkPolicy{}
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, np))
	require.Equal(t, dep.Namespace, np.Namespace)
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	require.NoError(t, err)
	require.False(t, sel.Empty(), "the policy selects every pod of the namespace")
	require.True(t, sel.Matches(labels.Set(dep.Spec.Template.Labels)), "the policy does not select the controller's pods")
	require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)

	// Which namespaces (by their labels) may reach which port.
	reach := func(port string, nsLabels labels.Set) bool {
		for _, rule := range np.Spec.Ingress {
			named := false
			for _, p := range rule.Ports {
				require.NotNil(t, p.Port)
				require.Contains(t, ports, p.Port.StrVal, "the policy names a port the Deployment does not declare")
				named = named || p.Port.StrVal == port
			}
			if !named {
				continue
			}
			for _, peer := range rule.From {
				require.Nil(t, peer.PodSelector, "rules select namespaces, not pods")
				require.Nil(t, peer.IPBlock)
				s, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
				require.NoError(t, err)
				if s.Matches(nsLabels) {
					return true
				}
			}
		}
		return false
	}
	anyNS := labels.Set{"kubernetes.io/metadata.name": "team-a"}
	monitoring := labels.Set{"kubernetes.io/metadata.name": "monitoring", "rankgate.io/metrics-scraper": "true"}
	require.True(t, reach("gate", anyNS), "ranks in any namespace must reach the gate")
	require.False(t, reach("metrics", anyNS), "/metrics open to every namespace")
	require.True(t, reach("metrics", monitoring))
	require.False(t, reach("health", anyNS), "the health port is for the kubelet only")

	applyManifest(t, filepath.Join(dir, "namespace.yaml"))
	applyManifest(t, filepath.Join(dir, "networkpolicy.yaml"))
}

// /metrics on a non-loopback address is HTTPS for callers the API server
// authenticates and authorizes: no token 401, a token without
// rankgate-metrics-reader 403, with it 200. The controller runs as its
// shipped service account, so the shipped RBAC covers the reviews.
func TestE2EMetricsNeedAuthorization(t *testing.T) {
	dir := deployDir(t)
	applyManifest(t, filepath.Join(dir, "namespace.yaml"))
	applyManifest(t, filepath.Join(dir, "rbac.yaml"))
	ctx := context.Background()
	ns := newNamespace(t, "e2e-metrics-auth", false)
	for _, sa := range []string{"scraper", "nosy"} {
		require.NoError(t, k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}))
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-metrics-scraper"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "rankgate-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "scraper", Namespace: ns}}}
	require.NoError(t, k8s.Create(ctx, crb))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), crb) })

	_, port, err := net.SplitHostPort(freePort(t))
	require.NoError(t, err)
	c := startController(t, controller.Options{Config: asServiceAccount(controllerNS, controllerSA), MetricsAddr: ":" + port})
	url := "https://127.0.0.1:" + port + "/metrics"
	ca, err := os.ReadFile(certs.CAFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(ca))
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	get := func(token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		r, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	saToken := func(name string) string {
		tr, err := clientset.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}, metav1.CreateOptions{})
		require.NoError(t, err)
		return tr.Status.Token
	}
	require.Eventually(t, func() bool { code, _ := get(""); return code != 0 }, 30*time.Second, 100*time.Millisecond, "metrics server never answered")

	code, body := get("")
	require.Equal(t, http.StatusUnauthorized, code, body)
	// A token the API server rejects: controller-runtime's filter answers
	// 500 ("Authentication failed") rather than 401; refused either way.
	code, body = get("not-a-token")
	require.Contains(t, []int{http.StatusUnauthorized, http.StatusInternalServerError}, code, body)
	require.NotContains(t, body, "rankgate_")
	code, body = get(saToken("nosy"))
	require.Equal(t, http.StatusForbidden, code, body)
	code, body = get(saToken("scraper"))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "rankgate_")

	// Not in clear.
	r, err := http.Get("http://127.0.0.1:" + port + "/metrics")
	if err == nil {
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		require.NotEqual(t, http.StatusOK, r.StatusCode, "served in clear: %s", b)
		require.NotContains(t, string(b), "rankgate_")
	}
	require.NotContains(t, c.logs.String(), "forbidden", "the controller hit a permission it lacks")
}
