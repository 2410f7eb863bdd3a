package e2e

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// gangWritePolicy names the ValidatingAdmissionPolicy that keeps Gang
// writes to the controller (admission-policy.yaml).
const gangWritePolicy = "rankgate-gang-writes"

// newGangObject is a Gang for job name in ns, as unstructured (the test
// reads and writes it as any client would, without rankgate's types).
func newGangObject(ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rankgate.io/v1alpha1", "kind": "Gang",
		"metadata": map[string]any{"name": "pytorchjob-" + name + "-1", "namespace": ns},
		"spec": map[string]any{
			"job":     map[string]any{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": name, "uid": "00000000-0000-0000-0000-000000000001"},
			"attempt": int64(1), "expectedRanks": int64(2),
		},
	}}
	return u
}

// aggregateBuiltinRoles does what kube-controller-manager's
// clusterrole-aggregation controller does in a real cluster (envtest runs
// no controller manager): it fills the built-in view, edit and admin
// ClusterRoles with the rules of the ClusterRoles their aggregation rules
// select, rankgate-gang-reader among them.
func aggregateBuiltinRoles(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, name := range []string{"view", "edit", "admin"} {
		role := &rbacv1.ClusterRole{}
		require.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: name}, role))
		require.NotNil(t, role.AggregationRule, "built-in ClusterRole %s has no aggregation rule", name)
		var rules []rbacv1.PolicyRule
		for _, sel := range role.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			require.NoError(t, err)
			list := &rbacv1.ClusterRoleList{}
			require.NoError(t, k8s.List(ctx, list, client.MatchingLabelsSelector{Selector: s}))
			for _, cr := range list.Items {
				if cr.Name != name {
					rules = append(rules, cr.Rules...)
				}
			}
		}
		role.Rules = rules
		require.NoError(t, k8s.Update(ctx, role))
	}
}

// The shipped RBAC and admission policy, applied as shipped: only the
// controller's service account writes Gangs; the aggregated admin, edit
// and view roles read them and cannot write them; a user whose role grants
// everything in a namespace is refused by the admission policy.
func TestE2EShippedRBACGangWrites(t *testing.T) {
	dir := deployDir(t)
	for _, f := range []string{"namespace.yaml", "rbac.yaml", "admission-policy.yaml"} {
		applyManifest(t, filepath.Join(dir, f))
	}
	aggregateBuiltinRoles(t)
	ctx := context.Background()
	ns := newNamespace(t, "e2e-gang-rbac", true)

	ctl, err := client.New(asServiceAccount(controllerNS, controllerSA), client.Options{Scheme: runtime.NewScheme()})
	require.NoError(t, err)
	g := newGangObject(ns, "train")
	require.NoError(t, ctl.Create(ctx, g), "the controller creates a Gang")
	require.NoError(t, unstructured.SetNestedField(g.Object, "WaitingForRanks", "status", "phase"))
	require.NoError(t, unstructured.SetNestedField(g.Object, "1/2", "status", "progress"))
	require.NoError(t, ctl.Status().Update(ctx, g), "the controller writes a Gang's status")

	// People bound to the built-in roles in the namespace: read, never write.
	for _, role := range []string{"admin", "edit", "view"} {
		user := "e2e-gang-" + role
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}
		require.NoError(t, k8s.Create(ctx, rb))
		u := asUser(t, user)
		t.Run(role, func(t *testing.T) {
			require.Eventually(t, func() bool {
				got := newGangObject(ns, "train")
				return u.Get(ctx, client.ObjectKeyFromObject(got), got) == nil
			}, 10*time.Second, 100*time.Millisecond, "%s cannot read a Gang", role)
			list := &unstructured.UnstructuredList{}
			list.SetAPIVersion("rankgate.io/v1alpha1")
			list.SetKind("GangList")
			require.NoError(t, u.List(ctx, list, client.InNamespace(ns)))
			require.Len(t, list.Items, 1)

			err := u.Create(ctx, newGangObject(ns, "forged-by-"+role))
			require.True(t, apierrors.IsForbidden(err), "%s created a Gang: %v", role, err)
			mine := list.Items[0].DeepCopy()
			require.NoError(t, unstructured.SetNestedField(mine.Object, "Passed", "status", "phase"))
			require.NoError(t, unstructured.SetNestedField(mine.Object, "pass", "status", "verdict"))
			err = u.Status().Update(ctx, mine)
			require.True(t, apierrors.IsForbidden(err), "%s wrote a Gang's verdict: %v", role, err)
			err = u.Update(ctx, mine)
			require.True(t, apierrors.IsForbidden(err), "%s updated a Gang: %v", role, err)
			err = u.Delete(ctx, mine)
			require.True(t, apierrors.IsForbidden(err), "%s deleted a Gang: %v", role, err)
		})
	}

	// A user whose Role grants every verb on everything in the namespace:
	// RBAC lets it through, the admission policy does not.
	grant(t, ns, "e2e-gang-wildcard", "*", []string{"*"}, "*")
	wild := asUser(t, "e2e-gang-wildcard")
	var last error
	require.Eventually(t, func() bool {
		last = wild.Create(ctx, newGangObject(ns, "forged-wild"))
		return last != nil && strings.Contains(last.Error(), gangWritePolicy)
	}, 30*time.Second, 200*time.Millisecond, "the API server never enforced %s: %v", gangWritePolicy, last)
	require.True(t, apierrors.IsForbidden(last), "%v", last)
	require.Contains(t, last.Error(), "only the rankgate controller writes Gangs")
	cur := newGangObject(ns, "train")
	require.NoError(t, wild.Get(ctx, client.ObjectKeyFromObject(cur), cur))
	require.NoError(t, unstructured.SetNestedField(cur.Object, "fail", "status", "verdict"))
	err = wild.Status().Update(ctx, cur)
	require.True(t, apierrors.IsForbidden(err) && strings.Contains(err.Error(), gangWritePolicy), "a wildcard user wrote a Gang's verdict: %v", err)
	cur.SetLabels(map[string]string{"forged": "true"})
	err = wild.Update(ctx, cur)
	require.True(t, apierrors.IsForbidden(err) && strings.Contains(err.Error(), gangWritePolicy), "a wildcard user updated a Gang: %v", err)
	// The controller is not affected by the policy.
	fresh := newGangObject(ns, "train")
	require.NoError(t, ctl.Get(ctx, client.ObjectKeyFromObject(fresh), fresh))
	require.NoError(t, unstructured.SetNestedField(fresh.Object, "2/2", "status", "progress"))
	require.NoError(t, ctl.Status().Update(ctx, fresh))
	require.NoError(t, ctl.Delete(ctx, fresh))
}

// configs/deploy/rbac.yaml holds no Lease permission but the leader
// election's, in the controller's own namespace, narrowed to the
// election's Lease by name where RBAC can name it.
func TestE2EShippedRBACLeasesOnlyForElection(t *testing.T) {
	dir := deployDir(t)
	for _, u := range decodeManifest(t, filepath.Join(dir, "rbac.yaml")) {
		if u.GetKind() != "ClusterRole" && u.GetKind() != "Role" {
			continue
		}
		cr := &rbacv1.ClusterRole{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cr))
		for _, r := range cr.Rules {
			if slices.Contains(r.Resources, "leases") || slices.Contains(r.Resources, "*") {
				require.Equal(t, "Role", u.GetKind(), "%s %s grants leases cluster-wide", u.GetKind(), u.GetName())
				require.Equal(t, controllerNamespace, u.GetNamespace())
				require.Equal(t, "rankgate-leader-election", u.GetName(), "a Lease permission outside leader election")
			}
		}
	}
	for _, f := range []string{"namespace.yaml", "rbac.yaml"} {
		applyManifest(t, filepath.Join(dir, f))
	}
	ns := newNamespace(t, "e2e-rbac-leases", true)
	sa := "system:serviceaccount:" + controllerNS + ":" + controllerSA
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + controllerNS, "system:authenticated"}
	allowed := func(ns, verb, name string) bool {
		t.Helper()
		r := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{User: sa, Groups: groups,
			ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Name: name}}}
		require.NoError(t, k8s.Create(context.Background(), r))
		return r.Status.Allowed
	}
	require.Eventually(t, func() bool { return allowed(controllerNS, "update", "rankgate-controller") },
		10*time.Second, 100*time.Millisecond, "the shipped RBAC does not let the controller renew its election Lease")
	want := sets.New("create "+controllerNS+" ", "get "+controllerNS+" rankgate-controller",
		"update "+controllerNS+" rankgate-controller", "patch "+controllerNS+" rankgate-controller")
	for _, where := range []string{controllerNS, ns, "kube-node-lease", "default", ""} {
		for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"} {
			for _, name := range []string{"", "rankgate-controller", "rankgate-verdict-x", "node-1"} {
				if name != "" && (verb == "list" || verb == "watch" || verb == "deletecollection" || verb == "create") {
					continue
				}
				key := verb + " " + where + " " + name
				require.Equal(t, want.Has(key), allowed(where, verb, name), "lease %s", key)
			}
		}
	}
}
