package controller

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/reviewcache"
)

// The /metrics filter answers as controller-runtime's: 401 without a
// valid bearer token, 403 without the permission for the verb and path,
// 500 when the API server cannot be asked; answers are cached.
func TestMetricsAuth(t *testing.T) {
	now := time.Unix(1000, 0)
	reviews, accesses := 0, 0
	var down bool
	a := &reviewCache{
		review: func(_ context.Context, token string) (*authnv1.TokenReviewStatus, error) {
			reviews++
			if down {
				return nil, errors.New("API server unreachable")
			}
			switch token {
			case "reader":
				return &authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "system:serviceaccount:monitoring:prometheus",
					Groups: []string{"system:serviceaccounts"}, Extra: map[string]authnv1.ExtraValue{"k": {"v"}}}}, nil
			case "other":
				return &authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "alice"}}, nil
			}
			return &authnv1.TokenReviewStatus{}, nil
		},
		access: func(_ context.Context, s authzv1.SubjectAccessReviewSpec) (bool, error) {
			accesses++
			require.NotNil(t, s.NonResourceAttributes)
			require.Equal(t, "get", s.NonResourceAttributes.Verb)
			if s.User == "system:serviceaccount:monitoring:prometheus" {
				require.Equal(t, []string{"system:serviceaccounts"}, s.Groups)
				require.Equal(t, authzv1.ExtraValue{"v"}, s.Extra["k"])
			}
			return s.User == "system:serviceaccount:monitoring:prometheus" && s.NonResourceAttributes.Path == "/metrics", nil
		},
		now:     func() time.Time { return now },
		tokens:  reviewcache.New[*authnv1.TokenReviewStatus](metricsCacheMax),
		answers: reviewcache.New[bool](metricsCacheMax),
	}
	h := a.handler(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	get := func(path, auth string) int {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	require.Equal(t, http.StatusUnauthorized, get("/metrics", ""))
	require.Equal(t, http.StatusUnauthorized, get("/metrics", "Basic cmVhZGVy"))
	require.Equal(t, http.StatusUnauthorized, get("/metrics", "Bearer forged"))
	require.Equal(t, http.StatusForbidden, get("/metrics", "Bearer other"))
	require.Equal(t, http.StatusOK, get("/metrics", "Bearer reader"))
	require.Equal(t, http.StatusForbidden, get("/debug/pprof/heap", "Bearer reader"), "the permission is per path")
	r, acc := reviews, accesses
	require.Equal(t, http.StatusOK, get("/metrics", "bearer  reader"))
	require.Equal(t, r, reviews, "token answer cached")
	require.Equal(t, acc, accesses, "access answer cached")

	// After the token's minute, asked again; when the API server cannot
	// answer, refused with 500.
	now = now.Add(metricsTokenTTL + time.Second)
	down = true
	require.Equal(t, http.StatusInternalServerError, get("/metrics", "Bearer reader"))
	down = false
	require.Equal(t, http.StatusOK, get("/metrics", "Bearer reader"))
	require.Equal(t, acc, accesses, "an allowed answer lasts 5 minutes")
	now = now.Add(metricsAllowTTL)
	require.Equal(t, http.StatusOK, get("/metrics", "Bearer reader"))
	require.Equal(t, acc+1, accesses)
}
