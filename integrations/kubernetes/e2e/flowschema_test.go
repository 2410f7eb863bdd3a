package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// classifiedBy sends one request as cfg's user and returns the FlowSchema
// UID the API server's priority and fairness classified it under (its
// X-Kubernetes-PF-FlowSchema-UID answer header).
func classifiedBy(t *testing.T, cfg *rest.Config, method, path, body string) string {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	require.NoError(t, err)
	req, err := http.NewRequest(method, strings.TrimSuffix(cfg.Host, "/")+path, bytes.NewBufferString(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	res, err := hc.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	return res.Header.Get("X-Kubernetes-PF-FlowSchema-UID")
}

// The shipped FlowSchema (configs/deploy/flowschema.yaml) puts the
// controller's TokenReviews and Gang writes, the requests between a rank's
// last report and its verdict, at the workload-high priority level, and
// nothing else: its other requests, and the same requests by any other
// service account, keep the API server's default classification.
func TestE2EShippedFlowSchema(t *testing.T) {
	dir := deployDir(t)
	for _, f := range []string{"namespace.yaml", "rbac.yaml", "flowschema.yaml"} {
		applyManifest(t, filepath.Join(dir, f))
	}
	ctx := context.Background()
	fs := &flowcontrolv1.FlowSchema{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: "rankgate-verdicts"}, fs))
	pl := &flowcontrolv1.PriorityLevelConfiguration{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: fs.Spec.PriorityLevelConfiguration.Name}, pl),
		"the FlowSchema's priority level is not one of the API server's defaults")
	ns := newNamespace(t, "e2e-flowschema", true)

	ctl := asServiceAccount(controllerNS, controllerSA)
	other := asServiceAccount(controllerNS, "someone-else")
	tokenReview := `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"not-a-token","audiences":["rankgate"]}}`
	gangStatus := fmt.Sprintf("/apis/rankgate.io/v1alpha1/namespaces/%s/gangs/pytorchjob-missing-1/status", ns)
	ours := string(fs.UID)
	// The API server loads new FlowSchemas asynchronously.
	require.Eventually(t, func() bool {
		return classifiedBy(t, ctl, http.MethodPost, "/apis/authentication.k8s.io/v1/tokenreviews", tokenReview) == ours
	}, 30*time.Second, 200*time.Millisecond, "the controller's TokenReviews never reached FlowSchema rankgate-verdicts")

	require.Equal(t, ours, classifiedBy(t, ctl, http.MethodPut, gangStatus,
		`{"apiVersion":"rankgate.io/v1alpha1","kind":"Gang","metadata":{"name":"pytorchjob-missing-1"}}`), "a verdict write")
	require.Equal(t, ours, classifiedBy(t, ctl, http.MethodGet, gangStatus, ""), "a Gang read after a conflict")

	for _, c := range []struct {
		what         string
		cfg          *rest.Config
		method, path string
		body         string
	}{
		{"the controller's pod list", ctl, http.MethodGet, "/api/v1/pods?limit=1", ""},
		{"the controller's Gang list", ctl, http.MethodGet, "/apis/rankgate.io/v1alpha1/gangs?limit=1", ""},
		{"the controller's job read", ctl, http.MethodGet, "/apis/kubeflow.org/v1/namespaces/" + ns + "/pytorchjobs", ""},
		{"the controller's Event", ctl, http.MethodPost, "/api/v1/namespaces/" + ns + "/events", `{"apiVersion":"v1","kind":"Event","metadata":{"name":"x"}}`},
		{"another service account's TokenReview", other, http.MethodPost, "/apis/authentication.k8s.io/v1/tokenreviews", tokenReview},
		{"another service account's Gang write", other, http.MethodPut, gangStatus, `{}`},
	} {
		got := classifiedBy(t, c.cfg, c.method, c.path, c.body)
		require.NotEmpty(t, got, "%s: no priority and fairness classification", c.what)
		require.NotEqual(t, ours, got, "%s is classified under rankgate-verdicts", c.what)
	}
}
