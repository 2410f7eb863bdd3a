package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate/gatetest"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate/server"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// jwt builds an unsigned-looking but well-formed projected token.
func jwt(t testing.TB, aud string, exp time.Time, pod string) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	claims := map[string]any{"aud": []string{aud}, "exp": exp.Unix(), "sub": "system:serviceaccount:ml:trainer"}
	if pod != "" {
		claims["kubernetes.io"] = map[string]any{"namespace": "ml", "pod": map[string]string{"name": pod, "uid": "uid-" + pod}}
	}
	return enc(map[string]string{"alg": "RS256", "kid": "k"}) + "." + enc(claims) + "." + base64.RawURLEncoding.EncodeToString([]byte("signature"))
}

// admitBackend admits the pods in ranks; its Report answers at once.
type admitBackend struct {
	ranks   map[string]bool
	reports atomic.Int32
}

func (b *admitBackend) Admit(ctx context.Context, id server.Identity) (context.Context, error) {
	if !b.ranks[id.Pod] {
		return nil, gate.Errorf(gate.CodeNotARank, "pod %s is not a rank", id.Pod)
	}
	return ctx, nil
}

func (b *admitBackend) Report(ctx context.Context, id server.Identity, _ *gate.ReportRequest, wait time.Duration) (*gate.Response, error) {
	b.reports.Add(1)
	return b.Verdict(ctx, id, wait)
}

func (b *admitBackend) Verdict(ctx context.Context, _ server.Identity, wait time.Duration) (*gate.Response, error) {
	select {
	case <-time.After(wait):
	case <-ctx.Done():
	}
	return &gate.Response{State: gate.StateWaiting, Job: "ml/PyTorchJob/j", Expected: 2}, nil
}

func post(h http.Handler, token string, body io.Reader) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, gate.PathReport, body)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func errorCode(t *testing.T, rec *httptest.ResponseRecorder) gate.ErrorBody {
	t.Helper()
	var e gate.ErrorBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e), rec.Body.String())
	return e
}

// emptyFindings is a report body of n bytes, nearly all of it empty
// findings: the body that made the old decoder allocate 290 MB per MiB.
func emptyFindings(n int) []byte {
	head := `{"apiVersion":"gate.rankgate.io/v1","namespace":"ml","pod":"p0","report":{"verdict":"pass","findings":[{}`
	var b bytes.Buffer
	b.WriteString(head)
	for b.Len() < n-4 {
		b.WriteString(",{}")
	}
	b.WriteString("]}}")
	return b.Bytes()
}

// A pod that is not a rank is refused before its body is read, however
// large it is; a rank's body is read.
func TestReportBodyReadOnlyForAdmittedRanks(t *testing.T) {
	be := &admitBackend{ranks: map[string]bool{"p0": true}}
	s := server.New(server.Options{Auth: fakeAuth{"tok-p0": {Namespace: "ml", Pod: "p0"}, "tok-x": {Namespace: "ml", Pod: "x"}}, Backend: be, Log: logr.Discard()})
	h := s.Handler()

	// 1 MiB from a pod that is not a rank: refused, nothing read.
	body := &countingReader{r: bytes.NewReader(emptyFindings(1 << 20))}
	rec := post(h, "tok-x", body)
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code, rec.Body.String())
	require.Equal(t, gate.CodeNotARank, errorCode(t, rec).Code)
	require.Zero(t, body.n.Load(), "bytes of the body read")
	require.Zero(t, s.ReportsRead())

	// The same body from a rank, without a Content-Length, is read up to
	// the bound and refused.
	body = &countingReader{r: bytes.NewReader(emptyFindings(1 << 20))}
	rec = post(h, "tok-p0", body)
	require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
	require.Contains(t, errorCode(t, rec).Message, "exceeds the limit of 262144 bytes")
	require.LessOrEqual(t, body.n.Load(), int64(gate.MaxReportBody+1))
	require.EqualValues(t, 0, be.reports.Load())

	// A well-formed report of a rank passes.
	ok, err := json.Marshal(&gate.ReportRequest{APIVersion: gate.APIVersion, Namespace: "ml", Pod: "p0", Report: verdict.NewReport("n", nil)})
	require.NoError(t, err)
	rec = post(h, "tok-p0", bytes.NewReader(ok))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.EqualValues(t, 1, be.reports.Load())
	require.EqualValues(t, 2, s.ReportsRead())
}

type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// Reports beyond what a rank sends are refused with a BadRequest that
// names the bound.
func TestReportBounds(t *testing.T) {
	s := server.New(server.Options{Auth: fakeAuth{"tok-p0": {Namespace: "ml", Pod: "p0"}}, Backend: &admitBackend{ranks: map[string]bool{"p0": true}}, Log: logr.Discard()})
	h := s.Handler()
	base := func() *gate.ReportRequest {
		return &gate.ReportRequest{APIVersion: gate.APIVersion, Namespace: "ml", Pod: "p0", Report: verdict.NewReport("n", nil)}
	}
	many := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("MIG-%d", i)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		mutate func(*gate.ReportRequest)
		raw    string
		want   string
	}{
		{name: "findings", mutate: func(r *gate.ReportRequest) {
			r.Report.Findings = make([]verdict.Finding, gate.MaxReportFindings+1)
		}, want: "a list has more than 512 entries"},
		{name: "devices", mutate: func(r *gate.ReportRequest) {
			r.Report.Devices = make([]verdict.DeviceSummary, gate.MaxReportDevices+1)
		}, want: "report.devices: 257 entries exceed the limit of 256"},
		{name: "finding devices", mutate: func(r *gate.ReportRequest) {
			r.Report.Findings = []verdict.Finding{{Rule: "X", Severity: verdict.SeverityWarn, Devices: many(gate.MaxFindingItems + 1)}}
		}, want: "a list has more than 128 entries"},
		{name: "message", mutate: func(r *gate.ReportRequest) {
			r.Report.Findings = []verdict.Finding{{Rule: "X", Severity: verdict.SeverityWarn, Message: strings.Repeat("m", gate.MaxTextLen+1)}}
		}, want: "a string of 8193 bytes exceeds the limit of 8192"},
		{name: "rule ID", mutate: func(r *gate.ReportRequest) {
			r.Report.Findings = []verdict.Finding{{Rule: "X\x1b]0;owned\x07", Severity: verdict.SeverityFail}}
		}, want: `report.findings[0].rule "X\x1b]0;owned\a" is not a rule ID`},
		{name: "lower-case rule ID", mutate: func(r *gate.ReportRequest) {
			r.Report.Findings = []verdict.Finding{{Rule: "mig_mixed", Severity: verdict.SeverityWarn}}
		}, want: "is not a rule ID"},
		{name: "node name", mutate: func(r *gate.ReportRequest) { r.Node = strings.Repeat("n", gate.MaxNameLen+1) }, want: "node: 513 bytes exceed the limit of 512"},
		{name: "nesting", raw: `{"apiVersion":"gate.rankgate.io/v1","x":[[[[[[[[]]]]]]]]}`, want: "nested deeper than 6"},
		{name: "keys", raw: `{"apiVersion":"gate.rankgate.io/v1"` + strings.Repeat(`,"a":0`, 40) + `}`, want: "more than 32 keys"},
		{name: "two values", raw: `{}{}`, want: "after top-level value"},
		{name: "list in a finding", raw: `{"report":{"findings":[{"ranks":[0` + strings.Repeat(",0", gate.MaxFindingItems) + `]}]}}`, want: "a list has more than 128 entries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.raw)
			if tc.mutate != nil {
				r := base()
				tc.mutate(r)
				var err error
				body, err = json.Marshal(r)
				require.NoError(t, err)
			}
			rec := post(h, "tok-p0", bytes.NewReader(body))
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			e := errorCode(t, rec)
			require.Equal(t, gate.CodeBadRequest, e.Code)
			require.Contains(t, e.Message, tc.want)
		})
	}
	// A Content-Length beyond the bound is refused before authentication.
	req := httptest.NewRequest(http.MethodPost, gate.PathReport, strings.NewReader("{}"))
	req.ContentLength = gate.MaxReportBody + 1
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	require.Contains(t, errorCode(t, rec).Message, "exceeds the limit")
}

// Every string a rank supplies reaches the backend (and so the Gang, the
// job's annotations and Events) without control or bidi characters.
func TestReportStringsCleaned(t *testing.T) {
	in := gate.ReportRequest{APIVersion: gate.APIVersion, Namespace: "ml", Pod: "p0", Node: "node\x1b[2J", DriverVersion: "580\u202e",
		CUDADriverVersion: "13.0\n", Report: verdict.NewReport("node\x1b]0;t\x07", []verdict.Finding{{Rule: "MIG_MIXED_PROFILES", Severity: verdict.SeverityFail,
			Message: "ranks differ\x1b[H\x1b[2J", Remediation: "use one profile\u2066\u2069\r\n", Devices: []string{"MIG-1\x07"}, Nodes: []string{"n\u0085"}, Pods: []string{"p\x7f"}}}),
	}
	in.Report.Devices = []verdict.DeviceSummary{{ID: "MIG-1\x1b", Kind: "mig", GPUUUID: "GPU-\u200f", Profile: "1g.10gb\t", FabricCluster: "c\x00"}}
	body, err := json.Marshal(in)
	require.NoError(t, err)
	got, err := server.DecodeReport(body)
	require.NoError(t, err)
	require.Equal(t, "node[2J", got.Node)
	require.Equal(t, "580", got.DriverVersion)
	require.Equal(t, "13.0 ", got.CUDADriverVersion)
	require.Equal(t, "node]0;t", got.Report.Subject)
	f := got.Report.Findings[0]
	require.Equal(t, verdict.Finding{Rule: "MIG_MIXED_PROFILES", Severity: verdict.SeverityFail, Message: "ranks differ[H[2J",
		Remediation: "use one profile  ", Devices: []string{"MIG-1"}, Nodes: []string{"n"}, Pods: []string{"p"}}, f)
	require.Equal(t, verdict.DeviceSummary{ID: "MIG-1", Kind: "mig", GPUUUID: "GPU-", Profile: "1g.10gb ", FabricCluster: "c"}, got.Report.Devices[0])
}

// At most MaxDecodes bodies are read at once; the next waits DecodeWait
// and is told to retry.
func TestDecodesBounded(t *testing.T) {
	s := server.New(server.Options{Auth: fakeAuth{"tok-p0": {Namespace: "ml", Pod: "p0"}, "tok-p1": {Namespace: "ml", Pod: "p1"}},
		Backend: &admitBackend{ranks: map[string]bool{"p0": true, "p1": true}}, MaxDecodes: 1, DecodeWait: 200 * time.Millisecond, Log: logr.Discard()})
	h := s.Handler()
	pr, pw := io.Pipe()
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- post(h, "tok-p0", pr) }()
	_, err := pw.Write([]byte(`{"apiVersion":`))
	require.NoError(t, err)
	// p0's body is being read: p1 finds no slot.
	start := time.Now()
	rec := post(h, "tok-p1", strings.NewReader(`{}`))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	require.Equal(t, gate.CodeUnavailable, errorCode(t, rec).Code)
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
	require.NoError(t, pw.CloseWithError(io.ErrUnexpectedEOF))
	<-done
	// The slot is free again.
	rec = post(h, "tok-p1", strings.NewReader(`{}`))
	require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
}

// tlsServer starts a TLS server with opts (Listener, Auth and certificate
// filled in) and returns its address and the client TLS configuration.
func tlsServer(t *testing.T, opts server.Options) (string, *tls.Config, *server.Server) {
	t.Helper()
	e := startServerWith(t, opts)
	return e.addr, e.tls, e.srv
}

type tlsEnv struct {
	addr string
	tls  *tls.Config
	srv  *server.Server
}

// A client that sends headers and a Content-Length and then trickles the
// body, or sends none, is cut within BodyTimeout, over HTTP/1.1 and
// HTTP/2; a long poll longer than BodyTimeout still answers.
func TestSlowBodyIsCut(t *testing.T) {
	be := &admitBackend{ranks: map[string]bool{"p0": true}}
	addr, tc, _ := tlsServer(t, server.Options{Backend: be, BodyTimeout: time.Second, MaxWait: 5 * time.Second})

	for _, trickle := range []bool{false, true} {
		t.Run(fmt.Sprintf("http1 trickle=%v", trickle), func(t *testing.T) {
			c, err := tls.Dial("tcp", addr, tc)
			require.NoError(t, err)
			defer c.Close()
			_, err = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-p0\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", gate.PathReport)
			require.NoError(t, err)
			start := time.Now()
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				_, _ = io.Copy(io.Discard, c)
			}()
			for trickle {
				select {
				case <-closed:
					trickle = false
					continue
				case <-time.After(100 * time.Millisecond):
				}
				if _, err := c.Write([]byte(" ")); err != nil {
					break
				}
			}
			select {
			case <-closed:
			case <-time.After(5 * time.Second):
				t.Fatal("connection still open after 5s")
			}
			require.Less(t, time.Since(start), 3*time.Second)
		})
	}

	t.Run("http2 trickle", func(t *testing.T) {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
		pr, pw := io.Pipe()
		go func() {
			_, _ = pw.Write([]byte("{"))
			for i := 0; i < 100; i++ {
				time.Sleep(100 * time.Millisecond)
				if _, err := pw.Write([]byte(" ")); err != nil {
					return
				}
			}
			_ = pw.Close()
		}()
		req, err := http.NewRequest(http.MethodPost, "https://"+addr+gate.PathReport, pr)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer tok-p0")
		start := time.Now()
		res, err := hc.Do(req)
		if err == nil {
			require.Equal(t, 2, res.ProtoMajor)
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			require.Equal(t, http.StatusBadRequest, res.StatusCode)
		}
		_ = pr.CloseWithError(io.EOF)
		require.Less(t, time.Since(start), 3*time.Second)
	})

	t.Run("long poll outlives the body timeout", func(t *testing.T) {
		c, err := gate.NewClient(gate.ClientOptions{URL: "https://" + addr, Token: "tok-p0",
			Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}})
		require.NoError(t, err)
		start := time.Now()
		r, err := c.Report(context.Background(), &gate.ReportRequest{Namespace: "ml", Pod: "p0", Report: verdict.NewReport("n", nil)}, 3*time.Second)
		require.NoError(t, err)
		require.Equal(t, gate.StateWaiting, r.State)
		require.GreaterOrEqual(t, time.Since(start), 3*time.Second)
	})
}

// A pod may have MaxPollsPerPod requests in progress; one more is refused
// with TooManyRequests; other pods are not affected.
func TestPollsPerPod(t *testing.T) {
	be := &admitBackend{ranks: map[string]bool{"p0": true, "p1": true}}
	s := server.New(server.Options{Auth: fakeAuth{"tok-p0": {Namespace: "ml", Pod: "p0", PodUID: "u0"}, "tok-p1": {Namespace: "ml", Pod: "p1", PodUID: "u1"}},
		Backend: be, MaxPollsPerPod: 2, MaxWait: 10 * time.Second, Log: logr.Discard()})
	h := s.Handler()
	poll := func(pod string, wait string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, gate.PathVerdict+"?namespace=ml&pod="+pod+"&wait="+wait, nil)
		req.Header.Set("Authorization", "Bearer tok-"+pod)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.Equal(t, http.StatusOK, poll("p0", "2s").Code)
		}()
	}
	time.Sleep(300 * time.Millisecond) // both polls are held
	rec := poll("p0", "0s")
	require.Equal(t, http.StatusTooManyRequests, rec.Code, rec.Body.String())
	require.Equal(t, gate.CodeTooManyRequests, errorCode(t, rec).Code)
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
	// A report of the same pod counts too.
	rec = post(h, "tok-p0", strings.NewReader(`{}`))
	require.Equal(t, http.StatusTooManyRequests, rec.Code, rec.Body.String())
	require.Equal(t, http.StatusOK, poll("p1", "0s").Code)
	wg.Wait()
	require.Equal(t, http.StatusOK, poll("p0", "0s").Code)
	var ge gate.Error
	ge.HTTPStatus = http.StatusTooManyRequests
	require.True(t, ge.Retryable(), "a client retries TooManyRequests")
}

// The listener holds at most MaxConns connections: the next client is not
// served until one closes.
func TestConnectionsBounded(t *testing.T) {
	addr, tc, _ := tlsServer(t, server.Options{Backend: &admitBackend{}, MaxConns: 3})
	var held []net.Conn
	for i := 0; i < 3; i++ {
		c, err := tls.Dial("tcp", addr, tc)
		require.NoError(t, err)
		held = append(held, c)
	}
	d := &net.Dialer{Timeout: time.Second}
	raw, err := d.Dial("tcp", addr) // the kernel's backlog takes it...
	require.NoError(t, err)
	defer raw.Close()
	c := tls.Client(raw, tc)
	require.NoError(t, c.SetDeadline(time.Now().Add(500*time.Millisecond)))
	require.Error(t, c.Handshake(), "...but the server does not serve a fourth connection")
	raw.Close()
	held[0].Close()
	c2, err := tls.DialWithDialer(d, "tcp", addr, tc)
	require.NoError(t, err, "served once a connection closed")
	c2.Close()
	for _, c := range held[1:] {
		c.Close()
	}
}

// TLS 1.2 offers only forward-secret AEAD suites.
func TestTLSOnlyAEAD(t *testing.T) {
	addr, tc, _ := tlsServer(t, server.Options{Backend: &admitBackend{}})
	cbc := tc.Clone()
	cbc.MaxVersion = tls.VersionTLS12
	cbc.CipherSuites = []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA,
		tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
		tls.TLS_RSA_WITH_AES_128_CBC_SHA, tls.TLS_RSA_WITH_AES_256_CBC_SHA, tls.TLS_RSA_WITH_AES_128_CBC_SHA256}
	_, err := tls.Dial("tcp", addr, cbc)
	require.Error(t, err)
	require.Contains(t, err.Error(), "handshake failure")

	gcm := tc.Clone()
	gcm.MaxVersion = tls.VersionTLS12
	gcm.CipherSuites = []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}
	c, err := tls.Dial("tcp", addr, gcm)
	require.NoError(t, err)
	c.Close()

	// What the server would accept of all suites Go knows.
	for _, cs := range append(tls.CipherSuites(), tls.InsecureCipherSuites()...) {
		if cs.ID == tls.TLS_AES_128_GCM_SHA256 || cs.ID == tls.TLS_AES_256_GCM_SHA384 || cs.ID == tls.TLS_CHACHA20_POLY1305_SHA256 {
			continue // TLS 1.3
		}
		one := tc.Clone()
		one.MaxVersion = tls.VersionTLS12
		one.CipherSuites = []uint16{cs.ID}
		c, err := tls.Dial("tcp", addr, one)
		aead := strings.Contains(cs.Name, "_GCM_") || strings.Contains(cs.Name, "CHACHA20")
		if err == nil {
			c.Close()
			require.True(t, aead && strings.HasPrefix(cs.Name, "TLS_ECDHE_"), "suite %s accepted", cs.Name)
		}
	}
}

// Tokens that cannot be valid never reach the API server; a refused token
// is reviewed once; each client address causes at most ReviewBurst
// reviews at once.
func TestTokenReviewAmplification(t *testing.T) {
	now := time.Now()
	garbage := []string{
		"forged", "a.b.c", strings.Repeat("x", 20000),
		jwt(t, "some-other-service", now.Add(time.Hour), "p0"),
		jwt(t, "rankgate", now.Add(-time.Minute), "p0"),
		jwt(t, "rankgate", now.Add(time.Hour), ""),
		"eyJhbGciOiJSUzI1NiJ9.bm90IGpzb24.c2ln",
	}
	fr := &fakeReviewer{status: authnv1.TokenReviewStatus{Error: "token revoked"}}
	a := server.NewTokenReviewAuthenticator(fr, "rankgate", time.Minute)
	for i := 0; i < 1000; i++ {
		tok := garbage[i%len(garbage)]
		if i%3 == 0 {
			tok = fmt.Sprintf("garbage-%d", i)
		}
		_, err := a.Authenticate(context.Background(), tok, "10.0.0.9:5000")
		var ge *gate.Error
		require.ErrorAs(t, err, &ge)
		require.Equal(t, gate.CodeUnauthenticated, ge.Code)
	}
	require.EqualValues(t, 0, fr.calls.Load(), "TokenReviews for malformed tokens")

	revoked := jwt(t, "rankgate", now.Add(time.Hour), "p0")
	for i := 0; i < 1000; i++ {
		_, err := a.Authenticate(context.Background(), revoked, "10.0.0.9:5000")
		var ge *gate.Error
		require.ErrorAs(t, err, &ge)
		require.Equal(t, gate.CodeUnauthenticated, ge.Code)
		require.Contains(t, ge.Message, "token revoked")
	}
	require.EqualValues(t, 1, fr.calls.Load(), "TokenReviews for one refused token")

	// Distinct well-formed tokens from one address: ReviewBurst reviews,
	// then TooManyRequests; another address is not affected.
	fr.calls.Store(0)
	limited := 0
	for i := 0; i < 200; i++ {
		_, err := a.Authenticate(context.Background(), jwt(t, "rankgate", now.Add(time.Hour+time.Duration(i)*time.Second), "p0"), "10.0.0.7:1")
		var ge *gate.Error
		require.ErrorAs(t, err, &ge)
		if ge.Code == gate.CodeTooManyRequests {
			limited++
			require.Equal(t, http.StatusTooManyRequests, ge.HTTPStatus)
		}
	}
	require.LessOrEqual(t, fr.calls.Load(), int32(server.ReviewBurst+5))
	require.GreaterOrEqual(t, limited, 200-server.ReviewBurst-5)
	_, err := a.Authenticate(context.Background(), jwt(t, "rankgate", now.Add(2*time.Hour), "p0"), "10.0.0.8:1")
	var ge *gate.Error
	require.ErrorAs(t, err, &ge)
	require.Equal(t, gate.CodeUnauthenticated, ge.Code)
}

// startServerWith serves opts over TLS on a local port, with the tokens
// tok-p0..tok-p2 unless opts.Auth is set.
func startServerWith(t testing.TB, opts server.Options) tlsEnv {
	t.Helper()
	dir := t.TempDir()
	certs, err := gatetest.WriteCerts(dir, "127.0.0.1")
	require.NoError(t, err)
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	require.NoError(t, err)
	if opts.Auth == nil {
		auth := fakeAuth{}
		for _, p := range []string{"p0", "p1", "p2"} {
			auth["tok-"+p] = server.Identity{Namespace: "ml", Pod: p, PodUID: "uid-" + p}
		}
		opts.Auth = auth
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	opts.Listener = ln
	opts.Log = logr.Discard()
	opts.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &pair, nil }
	s := server.New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Start(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-errc) })
	<-s.Serving()
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(certs.CAFile)
	require.NoError(t, err)
	require.True(t, pool.AppendCertsFromPEM(ca))
	return tlsEnv{addr: ln.Addr().String(), tls: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}, srv: s}
}

// bigVerdict answers every poll with the verdict of a gang of 5000 ranks
// that all failed: thousands of findings.
type bigVerdict struct{ admitBackend }

func (*bigVerdict) Verdict(context.Context, server.Identity, time.Duration) (*gate.Response, error) {
	var ranks []preflight.RankReport
	for i := 0; i < 5000; i++ {
		r := verdict.NewReport("n", []verdict.Finding{{Rule: verdict.RuleRankEnvironment, Severity: verdict.SeverityFail, Message: strings.Repeat("x", 200)}})
		ranks = append(ranks, preflight.RankReport{Rank: i, Pod: fmt.Sprintf("big-worker-%d", i), Node: fmt.Sprintf("gpu-node-%04d", i), Report: r})
	}
	v := preflight.GangRules(preflight.GangInput{Job: "ml/PyTorchJob/big", Expected: 5000, Ranks: ranks})
	return &gate.Response{State: gate.StateDecided, Job: "ml/PyTorchJob/big", Expected: 5000, Reported: 5000, Verdict: &v}, nil
}

// However large a verdict, the answer stays under MaxAnswer and the client
// decodes it.
func TestAnswerFitsTheClient(t *testing.T) {
	be := &bigVerdict{}
	full, err := be.Verdict(context.Background(), server.Identity{}, 0)
	require.NoError(t, err)
	b, err := json.Marshal(full)
	require.NoError(t, err)
	require.Greater(t, len(b), gate.MaxBody, "the verdict alone is over the client's limit")

	addr, tc, _ := tlsServer(t, server.Options{Backend: be})
	c, err := gate.NewClient(gate.ClientOptions{URL: "https://" + addr, Token: "tok-p0", Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}})
	require.NoError(t, err)
	r, err := c.Verdict(context.Background(), "ml", "p0", 0)
	require.NoError(t, err)
	require.Equal(t, verdict.VerdictFail, r.Verdict.Verdict)
	require.Positive(t, r.OmittedFindings)
	require.Equal(t, len(full.Verdict.Findings), len(r.Verdict.Findings)+r.OmittedFindings)
	require.Equal(t, full.Verdict.Findings[0].Rule, r.Verdict.Findings[0].Rule)
	a, err := json.Marshal(r)
	require.NoError(t, err)
	require.Less(t, len(a), gate.MaxAnswer)
}
