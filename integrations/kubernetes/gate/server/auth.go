package server

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
)

// Identity is who a token belongs to: a pod, through its service account.
type Identity struct {
	Username       string // system:serviceaccount:<ns>:<sa>
	Namespace      string
	ServiceAccount string
	Pod            string
	PodUID         string
}

// Authenticator turns a bearer token into an Identity. Errors are *Error.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Identity, error)
}

// TokenReviewer is the slice of client-go the TokenReview authenticator
// needs (kubernetes.Interface.AuthenticationV1().TokenReviews()).
type TokenReviewer interface {
	Create(ctx context.Context, tr *authnv1.TokenReview, opts metav1.CreateOptions) (*authnv1.TokenReview, error)
}

// Extra keys the API server puts on a pod-bound service-account token.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// NewTokenReviewAuthenticator checks tokens with the TokenReview API for the
// given audience. Only tokens bound to a pod are accepted: an audience-
// scoped projected token of a pod carries its name and UID. Results are
// cached for ttl (ranks poll with the same token); failures are not.
func NewTokenReviewAuthenticator(tr TokenReviewer, audience string, ttl time.Duration) Authenticator {
	return &tokenReviewAuth{tr: tr, audience: audience, ttl: ttl, cache: map[[32]byte]cachedIdentity{}, inflight: make(chan struct{}, maxConcurrentReviews)}
}

type tokenReviewAuth struct {
	tr       TokenReviewer
	audience string
	ttl      time.Duration

	mu       sync.Mutex
	cache    map[[32]byte]cachedIdentity
	inflight chan struct{}
}

// maxConcurrentReviews bounds the TokenReviews in flight (a burst of ranks
// must not turn into an unbounded burst on the API server).
const maxConcurrentReviews = 64

type cachedIdentity struct {
	id      Identity
	expires time.Time
}

// maxCachedTokens bounds the cache; expired entries go first.
const maxCachedTokens = 50000

func (a *tokenReviewAuth) Authenticate(ctx context.Context, token string) (Identity, error) {
	if token == "" {
		return Identity{}, gate.Errorf(gate.CodeUnauthenticated, "no bearer token; mount a projected service-account token with audience %q and pass it with --token-file", a.audience)
	}
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	a.mu.Lock()
	if c, ok := a.cache[key]; ok && now.Before(c.expires) {
		a.mu.Unlock()
		return c.id, nil
	}
	a.mu.Unlock()

	select {
	case a.inflight <- struct{}{}:
	case <-ctx.Done():
		return Identity{}, gate.Errorf(gate.CodeUnavailable, "waiting to review the token: %v", ctx.Err())
	}
	res, err := a.tr.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{a.audience}}}, metav1.CreateOptions{})
	<-a.inflight
	if err != nil {
		return Identity{}, gate.Errorf(gate.CodeUnavailable, "TokenReview failed: %v", err)
	}
	st := res.Status
	if !st.Authenticated {
		msg := st.Error
		if msg == "" {
			msg = "token not authenticated"
		}
		return Identity{}, gate.Errorf(gate.CodeUnauthenticated, "%s (the token must be a projected service-account token with audience %q)", msg, a.audience)
	}
	if len(st.Audiences) > 0 && !contains(st.Audiences, a.audience) {
		return Identity{}, gate.Errorf(gate.CodeUnauthenticated, "token audiences %v do not include %q", st.Audiences, a.audience)
	}
	id, err := identityOf(st.User)
	if err != nil {
		return Identity{}, err
	}
	a.mu.Lock()
	if len(a.cache) >= maxCachedTokens {
		for k, c := range a.cache {
			if now.After(c.expires) {
				delete(a.cache, k)
			}
		}
		if len(a.cache) >= maxCachedTokens {
			a.cache = map[[32]byte]cachedIdentity{}
		}
	}
	a.cache[key] = cachedIdentity{id: id, expires: now.Add(a.ttl)}
	a.mu.Unlock()
	return id, nil
}

// identityOf reads a pod-bound service-account user.
func identityOf(u authnv1.UserInfo) (Identity, error) {
	parts := strings.Split(u.Username, ":")
	if len(parts) != 4 || parts[0] != "system" || parts[1] != "serviceaccount" {
		return Identity{}, gate.Errorf(gate.CodeForbidden, "%s is not a service account; only rank pods may report", u.Username)
	}
	id := Identity{Username: u.Username, Namespace: parts[2], ServiceAccount: parts[3]}
	if v := u.Extra[extraPodName]; len(v) == 1 {
		id.Pod = v[0]
	}
	if v := u.Extra[extraPodUID]; len(v) == 1 {
		id.PodUID = v[0]
	}
	if id.Pod == "" || id.PodUID == "" {
		return Identity{}, gate.Errorf(gate.CodeForbidden, "the token of %s is not bound to a pod; use a projected service-account token (serviceAccountToken volume) in the rank pod", u.Username)
	}
	return id, nil
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// CheckPod refuses an identity that does not speak for namespace/pod.
func CheckPod(id Identity, namespace, pod string) error {
	if id.Namespace != namespace || id.Pod != pod {
		return gate.Errorf(gate.CodeForbidden, "the token belongs to pod %s/%s, not %s/%s: a pod may only report for itself", id.Namespace, id.Pod, namespace, pod)
	}
	return nil
}

// String is for logs.
func (id Identity) String() string { return fmt.Sprintf("%s/%s (%s)", id.Namespace, id.Pod, id.PodUID) }
