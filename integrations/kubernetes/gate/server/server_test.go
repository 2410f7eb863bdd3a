package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate/gatetest"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate/server"
	"github.com/rankgate/rankgate/verdict"
)

// fakeAuth maps tokens to pods.
type fakeAuth map[string]server.Identity

func (f fakeAuth) Authenticate(_ context.Context, token, _ string) (server.Identity, error) {
	id, ok := f[token]
	if !ok {
		return server.Identity{}, gate.Errorf(gate.CodeUnauthenticated, "unknown token")
	}
	return id, nil
}

// fakeBackend decides once `need` ranks reported; it answers NotLeader
// while notLeader is set.
type fakeBackend struct {
	need      int
	notLeader atomic.Bool

	mu      sync.Mutex
	reports map[string]gate.ReportRequest
	done    chan struct{}
}

func newBackend(need int) *fakeBackend {
	return &fakeBackend{need: need, reports: map[string]gate.ReportRequest{}, done: make(chan struct{})}
}

func (b *fakeBackend) Admit(ctx context.Context, _ server.Identity) (context.Context, error) {
	if b.notLeader.Load() {
		return nil, &gate.Error{HTTPStatus: 503, Code: gate.CodeNotLeader, Message: "not the leader"}
	}
	return ctx, nil
}

func (b *fakeBackend) Report(ctx context.Context, id server.Identity, req *gate.ReportRequest, wait time.Duration) (*gate.Response, error) {
	if b.notLeader.Load() {
		return nil, &gate.Error{HTTPStatus: 503, Code: gate.CodeNotLeader, Message: "not the leader"}
	}
	b.mu.Lock()
	b.reports[id.Pod] = *req
	if len(b.reports) == b.need {
		select {
		case <-b.done:
		default:
			close(b.done)
		}
	}
	b.mu.Unlock()
	return b.Verdict(ctx, id, wait)
}

func (b *fakeBackend) Verdict(ctx context.Context, _ server.Identity, wait time.Duration) (*gate.Response, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-b.done:
		v := verdict.NewReport("ml/PyTorchJob/j", nil)
		return &gate.Response{State: gate.StateDecided, Job: "ml/PyTorchJob/j", Expected: b.need, Reported: b.need, Verdict: &v}, nil
	case <-t.C:
	case <-ctx.Done():
	}
	return &gate.Response{State: gate.StateWaiting, Job: "ml/PyTorchJob/j", Expected: b.need}, nil
}

type env struct {
	url    string
	certs  *gatetest.Certs
	tokens string // dir of token files
}

func startServer(t *testing.T, be server.Backend, ln net.Listener) env {
	t.Helper()
	dir := t.TempDir()
	certs, err := gatetest.WriteCerts(dir, "127.0.0.1")
	require.NoError(t, err)
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	require.NoError(t, err)
	auth := fakeAuth{}
	for _, p := range []string{"p0", "p1", "p2"} {
		auth["tok-"+p] = server.Identity{Namespace: "ml", Pod: p, PodUID: "uid-" + p}
		require.NoError(t, os.WriteFile(filepath.Join(dir, "tok-"+p), []byte("tok-"+p+"\n"), 0o600))
	}
	if ln == nil {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
	}
	s := server.New(server.Options{
		Listener: ln, Auth: auth, Backend: be, MaxWait: 5 * time.Second, Log: logr.Discard(),
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &pair, nil },
	})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Start(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-errc) })
	<-s.Serving()
	return env{url: "https://" + ln.Addr().String(), certs: certs, tokens: dir}
}

func (e env) client(t *testing.T, pod string) *gate.Client {
	t.Helper()
	c, err := gate.NewClient(gate.ClientOptions{URL: e.url, CAFile: e.certs.CAFile, TokenFile: filepath.Join(e.tokens, "tok-"+pod)})
	require.NoError(t, err)
	return c
}

func report(pod string) *gate.ReportRequest {
	return &gate.ReportRequest{Namespace: "ml", Pod: pod, Report: verdict.NewReport("n", nil)}
}

func TestLongPollDecidesEveryRank(t *testing.T) {
	be := newBackend(3)
	e := startServer(t, be, nil)
	var wg sync.WaitGroup
	got := make([]*gate.Response, 3)
	for i, p := range []string{"p0", "p1", "p2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.client(t, p).Await(context.Background(), report(p), gate.AwaitOptions{Poll: 2 * time.Second})
			require.NoError(t, err)
			got[i] = r
		}()
	}
	wg.Wait()
	for _, r := range got {
		require.Equal(t, gate.StateDecided, r.State)
		require.Equal(t, verdict.VerdictPass, r.Verdict.Verdict)
		require.Equal(t, gate.APIVersion, r.APIVersion)
	}
	// The verdict endpoint answers without a report.
	r, err := e.client(t, "p1").Verdict(context.Background(), "ml", "p1", time.Second)
	require.NoError(t, err)
	require.Equal(t, gate.StateDecided, r.State)
}

func TestRefusals(t *testing.T) {
	e := startServer(t, newBackend(3), nil)
	ctx := context.Background()
	// Another pod's token.
	_, err := e.client(t, "p0").Report(ctx, report("p1"), 0)
	var ge *gate.Error
	require.ErrorAs(t, err, &ge)
	require.Equal(t, gate.CodeForbidden, ge.Code)
	require.Equal(t, http.StatusForbidden, ge.HTTPStatus)
	require.True(t, gate.IsPermanent(err))
	require.Contains(t, ge.Message, "may only report for itself")

	// No valid token.
	c, err := gate.NewClient(gate.ClientOptions{URL: e.url, CAFile: e.certs.CAFile, Token: "forged"})
	require.NoError(t, err)
	_, err = c.Report(ctx, report("p0"), 0)
	require.ErrorAs(t, err, &ge)
	require.Equal(t, gate.CodeUnauthenticated, ge.Code)

	// Bad request: wrong version.
	bad := report("p0")
	bad.APIVersion = "gate.rankgate.io/v0"
	_, err = e.client(t, "p0").Report(ctx, bad, 0)
	require.ErrorAs(t, err, &ge)
	require.Equal(t, gate.CodeBadRequest, ge.Code)

	// Untrusted certificate: permanent, names --ca-file.
	c, err = gate.NewClient(gate.ClientOptions{URL: e.url, Token: "tok-p0"})
	require.NoError(t, err)
	_, err = c.Report(ctx, report("p0"), 0)
	require.True(t, gate.IsPermanent(err), "%v", err)
	require.Contains(t, err.Error(), "--ca-file")
}

// A rank started before the gate retries until the gate listens.
func TestAwaitRetriesUntilReachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	dir := t.TempDir()
	be := newBackend(1)
	// Certificates are written by startServer; make the client's files now
	// by starting a throwaway server on another port, then reuse them.
	certs, err := gatetest.WriteCerts(dir, "127.0.0.1")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tok-p0"), []byte("tok-p0"), 0o600))
	c, err := gate.NewClient(gate.ClientOptions{URL: "https://" + addr, CAFile: certs.CAFile, TokenFile: filepath.Join(dir, "tok-p0")})
	require.NoError(t, err)

	var retries atomic.Int32
	type result struct {
		r   *gate.Response
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		r, err := c.Await(ctx, report("p0"), gate.AwaitOptions{Poll: time.Second, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
			OnRetry: func(error, time.Duration) { retries.Add(1) }})
		done <- result{r, err}
	}()
	require.Eventually(t, func() bool { return retries.Load() >= 3 }, 10*time.Second, 20*time.Millisecond)

	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	require.NoError(t, err)
	ln, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	be.notLeader.Store(true) // first the gate says "not the leader": still retried
	s := server.New(server.Options{Listener: ln, Auth: fakeAuth{"tok-p0": {Namespace: "ml", Pod: "p0"}}, Backend: be, Log: logr.Discard(),
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &pair, nil }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.Start(ctx) }()
	n := retries.Load()
	require.Eventually(t, func() bool { return retries.Load() > n+1 }, 10*time.Second, 20*time.Millisecond)
	be.notLeader.Store(false)

	res := <-done
	require.NoError(t, res.err)
	require.Equal(t, gate.StateDecided, res.r.State)
}

func TestAwaitGivesUpAtDeadline(t *testing.T) {
	e := startServer(t, newBackend(3), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err := e.client(t, "p0").Await(ctx, report("p0"), gate.AwaitOptions{Poll: 5 * time.Second})
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// fakeReviewer stands in for the TokenReview API.
type fakeReviewer struct {
	calls  atomic.Int32
	status authnv1.TokenReviewStatus
	err    error
}

func (f *fakeReviewer) Create(_ context.Context, tr *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
	f.calls.Add(1)
	if f.err != nil {
		return nil, f.err
	}
	if len(tr.Spec.Audiences) != 1 || tr.Spec.Audiences[0] != "rankgate" {
		return &authnv1.TokenReview{Status: authnv1.TokenReviewStatus{Error: "wrong audience"}}, nil
	}
	return &authnv1.TokenReview{Status: f.status}, nil
}

func TestTokenReviewAuthenticator(t *testing.T) {
	podUser := authnv1.UserInfo{Username: "system:serviceaccount:ml:trainer", Extra: map[string]authnv1.ExtraValue{
		"authentication.kubernetes.io/pod-name": {"j-worker-0"}, "authentication.kubernetes.io/pod-uid": {"1234"}}}
	for _, tc := range []struct {
		name   string
		status authnv1.TokenReviewStatus
		err    error
		code   string
		want   server.Identity
	}{
		{"pod-bound token", authnv1.TokenReviewStatus{Authenticated: true, User: podUser, Audiences: []string{"rankgate"}}, nil, "",
			server.Identity{Username: podUser.Username, Namespace: "ml", ServiceAccount: "trainer", Pod: "j-worker-0", PodUID: "1234"}},
		{"not authenticated", authnv1.TokenReviewStatus{Error: "token expired"}, nil, gate.CodeUnauthenticated, server.Identity{}},
		{"other audience", authnv1.TokenReviewStatus{Authenticated: true, User: podUser, Audiences: []string{"api"}}, nil, gate.CodeUnauthenticated, server.Identity{}},
		{"not bound to a pod", authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "system:serviceaccount:ml:trainer"}}, nil, gate.CodeForbidden, server.Identity{}},
		{"a person", authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "alice"}}, nil, gate.CodeForbidden, server.Identity{}},
		{"API down", authnv1.TokenReviewStatus{}, errors.New("connection refused"), gate.CodeUnavailable, server.Identity{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := &fakeReviewer{status: tc.status, err: tc.err}
			a := server.NewTokenReviewAuthenticator(fr, "rankgate", time.Minute)
			tok := jwt(t, "rankgate", time.Now().Add(time.Hour), "j-worker-0")
			id, err := a.Authenticate(context.Background(), tok, "10.0.0.1:1234")
			if tc.code != "" {
				var ge *gate.Error
				require.ErrorAs(t, err, &ge)
				require.Equal(t, tc.code, ge.Code)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, id)
			// Cached: a second poll does not call TokenReview.
			_, err = a.Authenticate(context.Background(), tok, "10.0.0.1:1234")
			require.NoError(t, err)
			require.EqualValues(t, 1, fr.calls.Load())
		})
	}
}

// A standby's NotLeader answer closes the connection, so that the retry
// is dialled again (a Service balances connections, not requests).
func TestNotLeaderClosesConnection(t *testing.T) {
	be := newBackend(1)
	be.notLeader.Store(true)
	s := server.New(server.Options{Auth: fakeAuth{"tok-p0": {Namespace: "ml", Pod: "p0"}}, Backend: be, Log: logr.Discard()})
	rr := report("p0")
	rr.APIVersion = gate.APIVersion
	body, err := json.Marshal(rr)
	require.NoError(t, err)
	post := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, gate.PathReport, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok-p0")
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		return rec
	}
	rec := post()
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	require.Equal(t, "close", rec.Header().Get("Connection"))

	be.notLeader.Store(false)
	rec = post()
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Empty(t, rec.Header().Get("Connection"))
}
