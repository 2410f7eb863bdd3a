package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate/server"
	"github.com/rankgate/rankgate/verdict"
)

// The memory and connection bounds of the gate as benchmarks (numbers in
// docs/performance.md, The gate under hostile load):
//
//	go test -run '^$' -bench 'GateRequest|HeldConnections|DecodeHostile' -benchmem ./integrations/kubernetes/gate/server/

// legitimateReport is what rankgate init sends for an 8-GPU node with a
// few findings: the yardstick the hostile requests are compared to.
func legitimateReport(pod string) []byte {
	var devs []verdict.DeviceSummary
	for i := 0; i < 8; i++ {
		id := fmt.Sprintf("GPU-6f1c2a7e-59d1-4b0a-8c3e-00000000000%d", i)
		devs = append(devs, verdict.DeviceSummary{ID: id, Kind: "gpu", GPU: i, GPUUUID: id, Profile: "full", SMs: 132, MemoryMiB: 81559})
	}
	r := verdict.NewReport("node gpu-node-0042", []verdict.Finding{
		{Rule: verdict.RuleProfileMismatch, Severity: verdict.SeverityWarn, Message: "GPU 3 runs profile full, the job asks for 3g.40gb",
			Remediation: "reconfigure MIG on the node or change the job's resource", Devices: []string{devs[3].ID}},
		{Rule: verdict.RuleMIGParentAllocated, Severity: verdict.SeverityInfo, Message: "GPU 5 is allocated whole", Devices: []string{devs[5].ID}},
	})
	r.Devices = devs
	b, _ := json.Marshal(&gate.ReportRequest{APIVersion: gate.APIVersion, Namespace: "ml", Pod: pod, Node: "gpu-node-0042",
		DriverVersion: "580.65.06", CUDADriverVersion: "13.0", Report: r})
	return b
}

// allocated returns the bytes f allocates per call, over n calls.
func allocated(n int, f func()) float64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < n; i++ {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
}

// BenchmarkGateRequest: what one request costs the gate's handler (in
// memory, no network), by kind of sender, with its allocation as a
// multiple of a legitimate report's (legit-x). The authenticator is the
// real one (local token checks, caches) over a fake TokenReview API.
func BenchmarkGateRequest(b *testing.B) {
	start := time.Now()
	exp := start.Add(time.Hour)
	rankTok, outsiderTok, refusedTok := jwt(b, gate.Audience, exp, "p0"), jwt(b, gate.Audience, exp, "x"), jwt(b, gate.Audience, exp, "gone")
	// TokenReview knows p0 (a rank) and x (a pod that is not one), and
	// refuses the token of gone.
	rev := &reviewByToken{pods: map[string]string{rankTok: "p0", outsiderTok: "x"}}
	auth := server.NewTokenReviewAuthenticator(rev, gate.Audience, time.Minute)
	s := server.New(server.Options{Auth: auth, Backend: &admitBackend{ranks: map[string]bool{"p0": true}}, Log: logr.Discard()})
	h := s.Handler()
	do := func(token string, body []byte, stream bool, want int) func() {
		return func() {
			var rd io.Reader = bytes.NewReader(body)
			if stream {
				rd = io.MultiReader(rd) // no Content-Length
			}
			req := httptest.NewRequest(http.MethodPost, gate.PathReport, rd)
			req.Header.Set("Authorization", "Bearer "+token)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != want {
				panic(fmt.Sprintf("HTTP %d, want %d: %s", rec.Code, want, rec.Body.String()))
			}
		}
	}
	legit := do(rankTok, legitimateReport("p0"), false, http.StatusOK)
	legit() // tokens reviewed and cached before measuring
	do(outsiderTok, []byte("{}"), false, http.StatusUnprocessableEntity)()
	do(refusedTok, []byte("{}"), false, http.StatusUnauthorized)()
	legitBytes := allocated(200, legit)
	mib := emptyFindings(1 << 20)
	for _, bc := range []struct {
		name string
		run  func()
	}{
		{"legitimate/8-GPU-report", legit},
		{"not-a-rank/1MiB-empty-findings-streamed", do(outsiderTok, mib, true, http.StatusUnprocessableEntity)},
		{"anyone/1MiB-Content-Length", do("", mib, false, http.StatusBadRequest)},
		{"rank/1MiB-empty-findings-streamed", do(rankTok, mib, true, http.StatusBadRequest)},
		{"rank/256KiB-empty-findings", do(rankTok, emptyFindings(gate.MaxReportBody), false, http.StatusBadRequest)},
		{"rank/largest-accepted-256KiB", do(rankTok, maxStrings(), false, http.StatusOK)},
		{"malformed-token/1MiB-streamed", do("garbage.token.x", mib, true, http.StatusUnauthorized)},
		{"refused-token-cached/1MiB-streamed", do(refusedTok, mib, true, http.StatusUnauthorized)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for b.Loop() {
				bc.run()
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/legitBytes, "legit-x")
		})
	}
	// One review per token, the refused one again each NegativeTTL.
	if n, most := int(rev.calls.Load()), 3+int(time.Since(start)/server.NegativeTTL); n > most {
		b.Fatalf("%d TokenReviews for 3 tokens in %s", n, time.Since(start))
	}
}

// reviewByToken is a TokenReview API that authenticates the tokens of
// pods (token to pod name in namespace ml) and refuses the others.
type reviewByToken struct {
	pods  map[string]string
	calls atomic.Int32
}

func (r *reviewByToken) Create(_ context.Context, tr *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
	r.calls.Add(1)
	pod, ok := r.pods[tr.Spec.Token]
	if !ok {
		return &authnv1.TokenReview{Status: authnv1.TokenReviewStatus{Error: "invalid bearer token"}}, nil
	}
	return &authnv1.TokenReview{Status: authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{
		Username: "system:serviceaccount:ml:trainer",
		Extra:    map[string]authnv1.ExtraValue{"authentication.kubernetes.io/pod-name": {pod}, "authentication.kubernetes.io/pod-uid": {"uid-" + pod}},
	}}}, nil
}

// BenchmarkHeldConnections: 256 TLS clients that send a report's headers
// and a Content-Length, then trickle the body or send nothing (a third
// without a token, a third from pods that are not ranks, a third from
// ranks). Metrics: heap and stacks held per connection (client side
// included), goroutines per connection, and the time until the server has
// closed the last one (BodyTimeout 1 s here, 5 s by default; queued
// admitted reports wait up to 2 s for a decode slot first).
func BenchmarkHeldConnections(b *testing.B) {
	const conns = 256
	auth := fakeAuth{}
	ranks := map[string]bool{}
	for i := 0; i < 64; i++ {
		for _, kind := range []string{"rank", "outsider"} {
			p := fmt.Sprintf("%s-%d", kind, i)
			auth["tok-"+p] = server.Identity{Namespace: "ml", Pod: p, PodUID: "uid-" + p}
			ranks[p] = kind == "rank"
		}
	}
	e := startServerWith(b, server.Options{Auth: auth, Backend: &admitBackend{ranks: ranks}, BodyTimeout: time.Second})
	tc := e.tls.Clone()
	tc.NextProtos = []string{"http/1.1"}
	var perConn, goroutines, cut float64
	for b.Loop() {
		before := heapAndStacks()
		g0 := runtime.NumGoroutine()
		closed := make(chan time.Duration, conns)
		stop := make(chan struct{})
		var cs []net.Conn
		for i := 0; i < conns; i++ {
			c, err := tls.Dial("tcp", e.addr, tc)
			if err != nil {
				b.Fatal(err)
			}
			cs = append(cs, c)
			auth := ""
			switch i % 3 {
			case 1:
				auth = fmt.Sprintf("Authorization: Bearer tok-outsider-%d\r\n", i%64)
			case 2:
				auth = fmt.Sprintf("Authorization: Bearer tok-rank-%d\r\n", i%64)
			}
			if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: gate\r\n%sContent-Length: 200000\r\n\r\n{", gate.PathReport, auth); err != nil {
				b.Fatal(err)
			}
			sent := time.Now()
			go func() {
				_, _ = io.Copy(io.Discard, c)
				closed <- time.Since(sent)
			}()
			if i%2 == 1 {
				go func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(200 * time.Millisecond):
							if _, err := c.Write([]byte(" ")); err != nil {
								return
							}
						}
					}
				}()
			}
		}
		held := heapAndStacks() - before
		perConn = float64(held) / conns
		goroutines = float64(runtime.NumGoroutine()-g0) / conns
		var last time.Duration
		for i := 0; i < conns; i++ {
			select {
			case d := <-closed:
				last = max(last, d)
			case <-time.After(10 * time.Second):
				b.Fatalf("%d of %d connections still open after 10s", conns-i, conns)
			}
		}
		close(stop)
		for _, c := range cs {
			c.Close()
		}
		cut = last.Seconds()
	}
	b.ReportMetric(perConn, "B/held-conn")
	b.ReportMetric(goroutines, "goroutines/conn")
	b.ReportMetric(cut, "s-to-cut-all")
	b.ReportMetric(0, "ns/op") // the time is s-to-cut-all's
}
