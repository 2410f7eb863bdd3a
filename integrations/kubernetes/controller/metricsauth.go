package controller

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/rankgate/rankgate/integrations/kubernetes/reviewcache"
)

// metricsAuth is the filter in front of /metrics and the profiles when
// they are served beyond this host: the caller's bearer token is checked
// with a TokenReview, then the request (verb and path) with a
// SubjectAccessReview, as controller-runtime's
// filters.WithAuthenticationAndAuthorization does (same answers: 401
// without a valid token, 403 without the permission, 500 when the API
// server cannot be asked), with the same cache lifetimes. It is written
// here because that filter brings in the API server libraries (CEL,
// OpenTelemetry, ...): about 9 MB of the binary, most of it resident.
func metricsAuth(cfg *rest.Config, hc *http.Client, now func() time.Time) (metricsserver.Filter, error) {
	authn, err := authenticationv1.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	authz, err := authorizationv1.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	a := &reviewCache{
		review: func(ctx context.Context, token string) (*authnv1.TokenReviewStatus, error) {
			r, err := authn.TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
			if err != nil {
				return nil, err
			}
			return &r.Status, nil
		},
		access: func(ctx context.Context, spec authzv1.SubjectAccessReviewSpec) (bool, error) {
			r, err := authz.SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			return r.Status.Allowed, nil
		},
		now:     now,
		tokens:  reviewcache.New[*authnv1.TokenReviewStatus](metricsCacheMax),
		answers: reviewcache.New[bool](metricsCacheMax),
	}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return a.handler(log, next), nil
	}, nil
}

// Cache lifetimes, as controller-runtime's filter: an authenticated token
// for a minute, an allowed request for 5 minutes, a denied one for 30 s.
const (
	metricsTokenTTL = time.Minute
	metricsAllowTTL = 5 * time.Minute
	metricsDenyTTL  = 30 * time.Second
	metricsCacheMax = 1024
)

type reviewCache struct {
	review func(ctx context.Context, token string) (*authnv1.TokenReviewStatus, error)
	access func(ctx context.Context, spec authzv1.SubjectAccessReviewSpec) (bool, error)
	now    func() time.Time

	tokens  *reviewcache.Cache[*authnv1.TokenReviewStatus]
	answers *reviewcache.Cache[bool]
}

func (a *reviewCache) handler(log logr.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), 10*time.Second)
		defer cancel()
		user, err := a.authenticate(ctx, req)
		if err != nil {
			log.Error(err, "Authentication failed")
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		if user == nil {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		allowed, err := a.authorize(ctx, user, strings.ToLower(req.Method), req.URL.Path)
		if err != nil {
			msg := fmt.Sprintf("Authorization for user %s failed", user.Username)
			log.Error(err, msg)
			http.Error(w, msg, http.StatusInternalServerError)
			return
		}
		if !allowed {
			http.Error(w, fmt.Sprintf("Authorization denied for user %s", user.Username), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// authenticate returns the caller's user, nil without a valid bearer token.
func (a *reviewCache) authenticate(ctx context.Context, req *http.Request) (*authnv1.UserInfo, error) {
	h := req.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
		return nil, nil
	}
	now := a.now()
	st, hit := a.tokens.Get(token, now)
	if !hit {
		var err error
		if st, err = a.review(ctx, token); err != nil {
			return nil, err
		}
		a.tokens.Put(token, st, now, metricsTokenTTL)
	}
	if !st.Authenticated {
		return nil, nil
	}
	return &st.User, nil
}

func (a *reviewCache) authorize(ctx context.Context, u *authnv1.UserInfo, verb, path string) (bool, error) {
	spec := authzv1.SubjectAccessReviewSpec{User: u.Username, UID: u.UID, Groups: u.Groups,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb}}
	if len(u.Extra) > 0 {
		spec.Extra = map[string]authzv1.ExtraValue{}
		for k, v := range u.Extra {
			spec.Extra[k] = authzv1.ExtraValue(v)
		}
	}
	key := fmt.Sprintf("%q %q %q %q %q %v", u.Username, u.UID, u.Groups, verb, path, u.Extra)
	now := a.now()
	if allowed, hit := a.answers.Get(key, now); hit {
		return allowed, nil
	}
	allowed, err := a.access(ctx, spec)
	if err != nil {
		return false, err
	}
	ttl := metricsDenyTTL
	if allowed {
		ttl = metricsAllowTTL
	}
	a.answers.Put(key, allowed, now, ttl)
	return allowed, nil
}
