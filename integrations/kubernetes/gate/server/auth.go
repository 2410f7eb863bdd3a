package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/integrations/kubernetes/reviewcache"
)

// Identity is who a token belongs to: a pod, through its service account.
type Identity struct {
	Username       string // system:serviceaccount:<ns>:<sa>
	Namespace      string
	ServiceAccount string
	Pod            string
	PodUID         string
}

// Authenticator turns a bearer token into an Identity. remoteAddr is the
// client's address (host:port), for limits per client. Errors are *Error.
type Authenticator interface {
	Authenticate(ctx context.Context, token, remoteAddr string) (Identity, error)
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
// scoped projected token of a pod carries its name and UID. Accepted
// tokens are cached for ttl (ranks poll with the same token).
//
// The API server is asked only about tokens that could pass: a token that
// is not a JWT for the audience, expired, or without a pod claim is refused
// here (its signature is left to the API server). Refused tokens are
// remembered for NegativeTTL, and each client address may cause at most
// ReviewsPerSecond reviews (burst ReviewBurst).
func NewTokenReviewAuthenticator(tr TokenReviewer, audience string, ttl time.Duration) Authenticator {
	return &tokenReviewAuth{tr: tr, audience: audience, ttl: ttl, now: time.Now,
		accepted: reviewcache.New[Identity](maxCachedTokens), refused: reviewcache.New[*gate.Error](maxRefused), limiters: map[string]*addrLimiter{},
		inflight: make(chan struct{}, maxConcurrentReviews)}
}

// Bounds of the TokenReview authenticator.
const (
	// NegativeTTL: how long a token the API server refused is refused
	// without asking again.
	NegativeTTL = 10 * time.Second
	// ReviewsPerSecond and ReviewBurst: TokenReviews one client address
	// may cause.
	ReviewsPerSecond = 10
	ReviewBurst      = 50
	// maxTokenLen: a projected token is about 1 KiB.
	maxTokenLen = 16 << 10
	// maxRefused and maxLimiters bound the refusal cache and the limiters.
	maxRefused  = 10000
	maxLimiters = 10000
)

type tokenReviewAuth struct {
	tr       TokenReviewer
	audience string
	ttl      time.Duration
	now      func() time.Time

	accepted *reviewcache.Cache[Identity]
	refused  *reviewcache.Cache[*gate.Error]

	mu       sync.Mutex // guards limiters
	limiters map[string]*addrLimiter
	inflight chan struct{}
}

type addrLimiter struct {
	lim  *rate.Limiter
	used time.Time
}

// maxConcurrentReviews bounds the TokenReviews in flight (a burst of ranks
// must not turn into an unbounded burst on the API server).
const maxConcurrentReviews = 64

// maxCachedTokens bounds the cache of accepted tokens; expired entries go
// first.
const maxCachedTokens = 50000

func (a *tokenReviewAuth) Authenticate(ctx context.Context, token, remoteAddr string) (Identity, error) {
	if token == "" {
		return Identity{}, gate.Errorf(gate.CodeUnauthenticated, "no bearer token; mount a projected service-account token with audience %q and pass it with --token-file", a.audience)
	}
	now := a.now()
	if err := checkToken(token, a.audience, now); err != nil {
		return Identity{}, gate.Errorf(gate.CodeUnauthenticated, "%v (the token must be a projected service-account token with audience %q)", err, a.audience)
	}
	if id, ok := a.accepted.Get(token, now); ok {
		return id, nil
	}
	if err, ok := a.refused.Get(token, now); ok {
		return Identity{}, err
	}
	a.mu.Lock()
	lim := a.limiter(remoteAddr, now)
	a.mu.Unlock()
	if !lim.AllowN(now, 1) {
		return Identity{}, &gate.Error{HTTPStatus: http.StatusTooManyRequests, Code: gate.CodeTooManyRequests, RetryAfter: time.Second,
			Message: fmt.Sprintf("too many new tokens from %s (at most %d reviews a second); retry", hostOf(remoteAddr), ReviewsPerSecond)}
	}

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
		return Identity{}, a.refuse(token, now, gate.Errorf(gate.CodeUnauthenticated, "%s (the token must be a projected service-account token with audience %q)", msg, a.audience))
	}
	if len(st.Audiences) > 0 && !contains(st.Audiences, a.audience) {
		return Identity{}, a.refuse(token, now, gate.Errorf(gate.CodeUnauthenticated, "token audiences %v do not include %q", st.Audiences, a.audience))
	}
	id, err := identityOf(st.User)
	if err != nil {
		var ge *gate.Error
		if errors.As(err, &ge) {
			a.refuse(token, now, ge)
		}
		return Identity{}, err
	}
	a.accepted.Put(token, id, now, a.ttl)
	return id, nil
}

// refuse remembers a refused token for NegativeTTL.
func (a *tokenReviewAuth) refuse(token string, now time.Time, err *gate.Error) *gate.Error {
	a.refused.Put(token, err, now, NegativeTTL)
	return err
}

// limiter returns the client address's TokenReview limiter; a.mu is held.
func (a *tokenReviewAuth) limiter(remoteAddr string, now time.Time) *rate.Limiter {
	host := hostOf(remoteAddr)
	l, ok := a.limiters[host]
	if !ok {
		if len(a.limiters) >= maxLimiters {
			// A limiter unused for a while is full again: dropping it
			// changes nothing.
			for k, x := range a.limiters {
				if now.Sub(x.used) > ReviewBurst*time.Second/ReviewsPerSecond {
					delete(a.limiters, k)
				}
			}
			if len(a.limiters) >= maxLimiters {
				clear(a.limiters)
			}
		}
		l = &addrLimiter{lim: rate.NewLimiter(ReviewsPerSecond, ReviewBurst)}
		a.limiters[host] = l
	}
	l.used = now
	return l.lim
}

func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// checkToken refuses, without asking the API server, what cannot be a
// valid projected service-account token for audience: it must be a JWT
// (three base64url parts, JSON header and claims) whose claims name the
// audience, expire in the future and bind the token to a pod. The
// signature is not checked here; TokenReview does that.
func checkToken(token, audience string, now time.Time) error {
	if len(token) > maxTokenLen {
		return fmt.Errorf("the token is %d bytes, more than %d", len(token), maxTokenLen)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return errors.New("the token is not a JWT")
	}
	var header struct {
		Alg string `json:"alg"`
	}
	if err := decodeSegment(parts[0], &header); err != nil || header.Alg == "" {
		return errors.New("the token is not a JWT: bad header")
	}
	if _, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[2], "=")); err != nil {
		return errors.New("the token is not a JWT: bad signature encoding")
	}
	var claims struct {
		Aud        audiences `json:"aud"`
		Exp        *float64  `json:"exp"`
		Kubernetes *struct {
			Pod *struct {
				Name string `json:"name"`
				UID  string `json:"uid"`
			} `json:"pod"`
		} `json:"kubernetes.io"`
	}
	if err := decodeSegment(parts[1], &claims); err != nil {
		return errors.New("the token is not a JWT: bad claims")
	}
	switch {
	case !contains(claims.Aud, audience):
		return fmt.Errorf("the token's audiences %q do not include %q", []string(claims.Aud), audience)
	case claims.Exp == nil:
		return errors.New("the token does not expire")
	case !now.Before(time.Unix(int64(*claims.Exp), 0)):
		return fmt.Errorf("the token expired at %s", time.Unix(int64(*claims.Exp), 0).UTC().Format(time.RFC3339))
	case claims.Kubernetes == nil || claims.Kubernetes.Pod == nil || claims.Kubernetes.Pod.Name == "" || claims.Kubernetes.Pod.UID == "":
		return errors.New("the token is not bound to a pod")
	}
	return nil
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(seg, "="))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// audiences is a JWT aud claim: one string or a list.
type audiences []string

func (a *audiences) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = audiences{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*a = many
	return nil
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
