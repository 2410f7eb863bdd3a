package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
)

// The memory and connection bounds of the gate (issue 9, items 1, 4 and
// 5), measured on the real `rankgate controller` binary, a separate
// process against the envtest API server, run as configs/deploy ships it
// (GOMEMLIMIT=120MiB, memory limit 256Mi). The numbers are logged; the
// docs (security-gate.md, Measured worst cases) quote them.

// gateMemLimitMiB is the controller's memory limit in configs/deploy.
const gateMemLimitMiB = 256

// gateProc is a `rankgate controller` process.
type gateProc struct {
	cmd     *exec.Cmd
	URL     string // the gate (HTTPS)
	metrics string // /metrics on loopback, in clear
	health  string // the probes
	stderr  *lockedBuffer
}

// kubeconfigFile writes a kubeconfig for the envtest API server.
func kubeconfigFile(t testing.TB) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: restCfg.Host, CertificateAuthorityData: restCfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: restCfg.CertData, ClientKeyData: restCfg.KeyData, Token: restCfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	require.NoError(t, clientcmd.WriteToFile(*kc, f))
	return f
}

// startGateProcess runs the controller binary (leader, no election) with
// the shipped GOMEMLIMIT, and extra flags, and waits until it is Ready and
// serves its metrics. Its ports are picked free and handed to it, so
// another process may take one in between (an outgoing connection's local
// port): a process that exits because a port is taken is started again on
// new ones.
func startGateProcess(t *testing.T, extra ...string) *gateProc {
	t.Helper()
	ensureNamespace(t, controllerNamespace)
	for try := 1; ; try++ {
		p, exited := runGateProcess(t, extra...)
		err := p.waitUp(exited, 60*time.Second)
		if err == nil {
			return p
		}
		if try < 3 && strings.Contains(p.stderr.String(), "address already in use") {
			t.Logf("controller process lost a port to another process; starting it again on new ports")
			continue
		}
		t.Fatalf("%v: %s", err, p.stderr.String())
	}
}

// waitUp waits until p is Ready and serves its metrics; an error when it
// exits first or is not up within most.
func (p *gateProc) waitUp(exited <-chan struct{}, most time.Duration) error {
	up := func() bool {
		for _, u := range []string{"http://" + p.health + "/readyz", "http://" + p.metrics + "/metrics"} {
			r, err := http.Get(u)
			if err != nil {
				return false
			}
			r.Body.Close()
			if r.StatusCode != http.StatusOK {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(most)
	for !up() {
		select {
		case <-exited:
			return errors.New("controller exited before it was ready")
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("controller never ready")
		}
	}
	return nil
}

// runGateProcess starts the controller process on free ports; exited is
// closed when it exits.
func runGateProcess(t *testing.T, extra ...string) (p *gateProc, exited chan struct{}) {
	t.Helper()
	gateAddr, metrics, health := freePort(t), freePort(t), freePort(t)
	cmd := exec.Command(binary, "controller", "--kubeconfig", kubeconfigFile(t), "--leader-elect=false",
		"--namespace", controllerNamespace, "--gate-addr", gateAddr, "--cert-dir", certs.Dir, "--manage-certs=false",
		"--metrics-addr", metrics, "--health-addr", health, "--gang-timeout", "10m", "--log-level", "warn",
		"--profiling") // pprof's heap?gc=1 collects before the live heap is read
	cmd.Args = append(cmd.Args, extra...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "GOMEMLIMIT=120MiB"}
	p = &gateProc{cmd: cmd, URL: "https://" + gateAddr, metrics: metrics, health: health, stderr: &lockedBuffer{}}
	cmd.Stderr = p.stderr
	require.NoError(t, cmd.Start())
	exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() || verbose {
			t.Logf("controller log:\n%s", p.stderr.String())
		}
	})
	return p, exited
}

// mem is the process's resident memory now and at its peak since the last
// resetPeak, in MiB.
func (p *gateProc) mem(t *testing.T) (rss, peak float64) { return procMemMiB(t, p.cmd.Process.Pid) }

// resetPeak starts a new peak (VmHWM) measurement: writing 5 to clear_refs
// resets it (Linux 4.0 or later).
func (p *gateProc) resetPeak(t *testing.T) {
	t.Helper()
	require.NoError(t, os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.cmd.Process.Pid), []byte("5"), 0))
}

func (p *gateProc) metric(t *testing.T, name string) float64 { return metricValue(t, p.metrics, name) }

// requests sums the gate's request counter for endpoint and answer code.
func (p *gateProc) requests(t *testing.T, endpoint, code string) int {
	t.Helper()
	r, err := http.Get("http://" + p.metrics + "/metrics")
	require.NoError(t, err)
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	want := fmt.Sprintf(`rankgate_gate_request_seconds_count{code=%q,endpoint=%q} `, code, endpoint)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, want); ok {
			var n float64
			_, err := fmt.Sscan(v, &n)
			require.NoError(t, err)
			return int(n)
		}
	}
	return 0
}

// snapshot is what the controller holds at a moment: RSS, peak RSS, the
// live heap (after a collection) and its goroutines.
type snapshot struct{ rss, peak, liveMiB, goroutines float64 }

func (p *gateProc) snapshot(t *testing.T) snapshot {
	t.Helper()
	rss, peak := p.mem(t)
	r, err := http.Get("http://" + p.metrics + "/debug/pprof/heap?gc=1")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return snapshot{rss: rss, peak: peak, liveMiB: p.metric(t, "go_memstats_heap_alloc_bytes") / (1 << 20), goroutines: p.metric(t, "go_goroutines")}
}

func (s snapshot) String() string {
	return fmt.Sprintf("RSS %.1f MiB (peak %.1f), live heap %.1f MiB, %.0f goroutines", s.rss, s.peak, s.liveMiB, s.goroutines)
}

// sendReport posts body to the gate with token tok. stream sends it
// without a Content-Length (the server cannot refuse it by size up front).
// It returns the status and the error code of the answer.
func sendReport(hc *http.Client, url, tok string, body []byte, stream bool) (int, string, error) {
	var rd io.Reader = bytes.NewReader(body)
	if stream {
		rd = io.MultiReader(rd)
	}
	req, err := http.NewRequest(http.MethodPost, url+gate.PathReport, rd)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, "", err
	}
	if res.StatusCode == http.StatusOK {
		return res.StatusCode, "", nil
	}
	var e gate.ErrorBody
	if err := json.Unmarshal(data, &e); err != nil {
		return res.StatusCode, "", fmt.Errorf("HTTP %d: %s", res.StatusCode, data)
	}
	return res.StatusCode, e.Code, nil
}

// concurrently runs n calls of f at once and returns the answer codes
// counted.
func concurrently(t *testing.T, n int, f func(i int) (int, string, error)) map[string]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, code, err := f(i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				codes["error: "+err.Error()]++
				return
			}
			if code == "" {
				code = fmt.Sprint(status)
			}
			codes[code]++
		}()
	}
	wg.Wait()
	return codes
}

// hostileReport is the report that decodes largest and is still accepted:
// findings whose lists hold as many empty strings as the bounds allow, up
// to MaxReportBody bytes.
func hostileReport(ns, pod string) []byte {
	item := `{"rule":"X","severity":"warn","message":"","pods":[""` + strings.Repeat(`,""`, gate.MaxFindingItems-1) + `]}`
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"apiVersion":%q,"namespace":%q,"pod":%q,"report":{"verdict":"warn","findings":[%s`, gate.APIVersion, ns, pod, item)
	for n := 1; b.Len()+len(item)+8 < gate.MaxReportBody && n < gate.MaxReportFindings; n++ {
		b.WriteString("," + item)
	}
	b.WriteString("]}}")
	return b.Bytes()
}

// forged is a token that passes every local check (a JWT of the right
// audience, not expired, bound to a pod: real's header and claims) with a
// signature of its own: only a TokenReview can refuse it.
func forged(real string) string {
	parts := strings.Split(real, ".")
	sig := make([]byte, 32)
	_, _ = rand.Read(sig)
	return parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func readToken(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

// TestE2EGateMemoryBounded (issue 9, items 1, 4, 5): hostile load on the
// gate of a controller process. Its peak RSS stays under the shipped
// 256Mi limit and each kind of load adds at most 96 MiB (before the fix,
// eight 1 MiB bodies took it from 65 to 520 MiB), 2,000 held connections
// are all cut and their goroutines go, and bogus tokens cause (nearly) no
// TokenReviews.
func TestE2EGateMemoryBounded(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "e2e-gate-memory", true)
	job := pytorchJob(t, ns, "mem", false, 9, nil) // 8 ranks report, the 9th never: the gang stays open
	var rankToks []string
	var ranks []*corev1.Pod
	for i := 0; i < 8; i++ {
		p := rankPod(t, job, "worker", i, fmt.Sprintf("node-%d", i), "")
		ranks = append(ranks, p)
		rankToks = append(rankToks, readToken(t, token(t, p, gate.Audience)))
	}
	var intruderToks []string
	for i := 0; i < 16; i++ {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("intruder-%d", i), Namespace: ns},
			Spec: corev1.PodSpec{ServiceAccountName: serviceAccount, Containers: []corev1.Container{{Name: "x", Image: "busybox"}}}}
		require.NoError(t, k8s.Create(ctx, p))
		intruderToks = append(intruderToks, readToken(t, token(t, p, gate.Audience)))
	}

	g := startGateProcess(t)
	hc := gateHTTP(t)
	// Warm up: every token reviewed once (cached), caches synced.
	require.Eventually(t, func() bool {
		_, code, err := sendReport(hc, g.URL, intruderToks[0], []byte("{}"), false)
		return err == nil && code == gate.CodeNotARank
	}, 30*time.Second, 100*time.Millisecond)
	for _, tok := range append(append([]string{}, intruderToks...), rankToks...) {
		_, code, err := sendReport(hc, g.URL, tok, []byte("{}"), false)
		require.NoError(t, err)
		require.Contains(t, []string{gate.CodeNotARank, gate.CodeBadRequest}, code)
	}
	time.Sleep(2 * time.Second)
	base := g.snapshot(t)
	t.Logf("idle: %s", base)
	// Each phase's peak RSS stays within phaseMiB of the RSS it started
	// at, and 32 MiB under the memory limit.
	const limitMiB = gateMemLimitMiB - 32
	phase := func(name string, phaseMiB float64, f func()) snapshot {
		t.Helper()
		g.resetPeak(t)
		from, _ := g.mem(t)
		start := time.Now()
		f()
		s := g.snapshot(t)
		t.Logf("%s (%s): %s; peak %+.1f MiB over the phase's start, %+.1f over idle", name, time.Since(start).Round(time.Millisecond), s, s.peak-from, s.peak-base.rss)
		require.LessOrEqual(t, s.peak, from+phaseMiB, "%s: peak RSS over the phase's start (%.1f MiB)", name, from)
		require.LessOrEqual(t, s.peak, float64(limitMiB), "%s: peak RSS", name)
		return s
	}

	// (a) 1 MiB bodies of empty findings, streamed, from pods that are not
	// ranks: refused at admission (NotARank, or TooManyRequests past a
	// pod's 4 requests in progress), never read.
	var mib [][]byte // each names its sender
	for i := range intruderToks {
		mib = append(mib, emptyFindingsBody(ns, fmt.Sprintf("intruder-%d", i), 1<<20))
	}
	read := g.requests(t, "report", gate.CodeBadRequest) + g.requests(t, "report", "OK")
	for _, n := range []int{8, 64} {
		phase(fmt.Sprintf("%d concurrent 1 MiB bodies from pods that are not ranks", n), 96, func() {
			codes := concurrently(t, n, func(i int) (int, string, error) {
				return sendReport(hc, g.URL, intruderToks[i%len(intruderToks)], mib[i%len(mib)], true)
			})
			t.Logf("answers: %v", codes)
			require.Equal(t, n, codes[gate.CodeNotARank]+codes[gate.CodeTooManyRequests], "answers: %v", codes)
		})
	}
	require.Equal(t, read, g.requests(t, "report", gate.CodeBadRequest)+g.requests(t, "report", "OK"), "report bodies read for pods that are not ranks")

	// (b) Ranks send the largest reports the bounds accept, eight at once
	// (each decodes to about 4.7 MB), three rounds; and eight 256 KiB
	// bodies of empty findings, refused by the shape scan.
	phase("8 concurrent largest accepted reports from ranks, 3 rounds", 96, func() {
		for round := 0; round < 3; round++ {
			codes := concurrently(t, len(ranks), func(i int) (int, string, error) {
				return sendReport(hc, g.URL, rankToks[i], hostileReport(ns, ranks[i].Name), false)
			})
			require.Equal(t, len(ranks), codes["200"], "answers: %v", codes)
		}
	})
	phase("8 concurrent 256 KiB bodies of empty findings from ranks", 96, func() {
		codes := concurrently(t, len(ranks), func(i int) (int, string, error) {
			return sendReport(hc, g.URL, rankToks[i], emptyFindingsBody(ns, ranks[i].Name, gate.MaxReportBody), false)
		})
		require.Equal(t, len(ranks), codes[gate.CodeBadRequest], "answers: %v", codes)
	})

	// (c) Connections that send headers and a Content-Length, then trickle
	// the body (a byte a second) or never send it: without a token, with
	// a non-rank's, with a rank's. The server closes every one.
	hc.CloseIdleConnections()
	time.Sleep(time.Second)
	pre := g.snapshot(t)
	const conns = 2000
	var held snapshot
	var lastClose time.Duration
	// A held connection costs about 45 KiB of RSS (TLS and HTTP buffers,
	// its goroutine): at most 64 KiB each.
	after := phase(fmt.Sprintf("%d held connections", conns), conns*64.0/1024, func() {
		held, lastClose = holdConnections(t, g, conns, [][]string{nil, intruderToks, rankToks})
	})
	t.Logf("while %d connections were held: %s; the last was closed %s after its headers", conns, held, lastClose.Round(10*time.Millisecond))
	require.Less(t, lastClose, 15*time.Second, "connections held past the body timeout")
	// Their goroutines and heap are gone, RSS is back near what it was.
	closedAt := time.Now()
	require.Eventually(t, func() bool {
		after = g.snapshot(t)
		return after.goroutines <= pre.goroutines+20 && after.liveMiB <= pre.liveMiB+8
	}, 20*time.Second, 500*time.Millisecond, "after the connections closed: %s (before: %s)", after, pre)
	t.Logf("before the connections: %s; after they closed: %s", pre, after)
	// The runtime returns the freed pages to the system within seconds.
	for time.Since(closedAt) < 30*time.Second && after.rss > pre.rss+16 {
		time.Sleep(time.Second)
		after.rss, _ = g.mem(t)
	}
	t.Logf("RSS %.1f MiB %s after they closed", after.rss, time.Since(closedAt).Round(time.Second))
	require.LessOrEqual(t, after.rss, pre.rss+32, "RSS after the held connections closed")

	// (d) 36,000 requests with bogus tokens: 27,000 malformed (not a JWT,
	// another audience, expired) cause no TokenReview; 9,000 forged ones
	// (well-formed, bad signature, each new) cause at most the
	// per-address burst plus 10 a second.
	bogus := func(i int) string {
		switch i % 3 {
		case 0:
			return fmt.Sprintf("garbage.%d.token", i)
		case 1:
			return jwtFor("another-audience", time.Now().Add(time.Hour), i)
		default:
			return jwtFor(gate.Audience, time.Now().Add(-time.Minute), i)
		}
	}
	before := tokenReviews(t)
	start := time.Now()
	codes := hammer(t, g.URL, 27000, bogus)
	malformedTook := time.Since(start)
	malformedReviews := tokenReviews(t) - before
	t.Logf("27,000 malformed tokens in %s: %d TokenReviews; answers %v", malformedTook.Round(time.Millisecond), malformedReviews, codes)
	require.Equal(t, 27000, codes[gate.CodeUnauthenticated], "answers: %v", codes)
	require.Zero(t, malformedReviews, "TokenReviews for malformed tokens")

	before = tokenReviews(t)
	start = time.Now()
	codes = hammer(t, g.URL, 9000, func(i int) string { return forged(intruderToks[i%len(intruderToks)]) })
	forgedTook := time.Since(start)
	forgedReviews := tokenReviews(t) - before
	t.Logf("9,000 forged tokens in %s: %d TokenReviews; answers %v", forgedTook.Round(time.Millisecond), forgedReviews, codes)
	require.Equal(t, 9000, codes[gate.CodeUnauthenticated]+codes[gate.CodeTooManyRequests], "answers: %v", codes)
	require.LessOrEqual(t, forgedReviews, 50+10*int(forgedTook.Seconds()+2), "TokenReviews for forged tokens")
	final := g.snapshot(t)
	t.Logf("after the bogus tokens: %s", final)
	require.LessOrEqual(t, final.peak, float64(limitMiB))
}

// jwtFor is a well-formed projected token for audience expiring at exp,
// bound to a pod of its own (i).
func jwtFor(audience string, exp time.Time, i int) string {
	enc := func(v any) string { b, _ := json.Marshal(v); return base64.RawURLEncoding.EncodeToString(b) }
	claims := map[string]any{"aud": []string{audience}, "exp": exp.Unix(), "sub": "system:serviceaccount:ml:trainer",
		"kubernetes.io": map[string]any{"namespace": "ml", "pod": map[string]string{"name": fmt.Sprintf("p%d", i), "uid": fmt.Sprintf("uid-%d", i)}}}
	return enc(map[string]string{"alg": "RS256", "kid": "k"}) + "." + enc(claims) + "." + base64.RawURLEncoding.EncodeToString([]byte("signature"))
}

// hammer sends n verdict polls (one token each, from tok) on 16
// keep-alive connections and counts the answers' codes.
func hammer(t *testing.T, url string, n int, tok func(i int) string) map[string]int {
	t.Helper()
	hc := gateHTTP(t)
	hc.Transport.(*http.Transport).ForceAttemptHTTP2 = false
	hc.Transport.(*http.Transport).TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	defer hc.CloseIdleConnections()
	var mu sync.Mutex
	codes := map[string]int{}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := map[string]int{}
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				code := "error"
				req, _ := http.NewRequest(http.MethodGet, url+gate.PathVerdict+"?namespace=ml&pod=p", nil)
				req.Header.Set("Authorization", "Bearer "+tok(i))
				if res, err := hc.Do(req); err == nil {
					var e gate.ErrorBody
					if json.NewDecoder(res.Body).Decode(&e) == nil {
						code = e.Code
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
				local[code]++
			}
			mu.Lock()
			defer mu.Unlock()
			for k, v := range local {
				codes[k] += v
			}
		}()
	}
	wg.Wait()
	return codes
}

// holdConnections opens n TLS connections to the gate, each sending a
// report's headers with a Content-Length of 200,000 and one byte of body;
// the odd ones then trickle a byte a second, the even ones send nothing
// more. Each uses the tokens of kinds[i%len(kinds)] in turn (nil: no
// token). It returns the controller's state once all are open and how long
// after its headers the last one was closed by the server.
func holdConnections(t *testing.T, g *gateProc, n int, kinds [][]string) (snapshot, time.Duration) {
	t.Helper()
	pool := caPool(t, certs.CAFile)
	cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
	addr := strings.TrimPrefix(g.URL, "https://")

	type held struct {
		conn   *tls.Conn
		sentAt time.Time
	}
	cs := make([]held, n)
	require.NoError(t, parallel(n, 16, func(i int) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		auth := ""
		if toks := kinds[i%len(kinds)]; toks != nil {
			auth = "Authorization: Bearer " + toks[(i/len(kinds))%len(toks)] + "\r\n"
		}
		_, err = fmt.Fprintf(c, "POST %s?wait=30s HTTP/1.1\r\nHost: gate\r\n%sContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n{", gate.PathReport, auth)
		cs[i] = held{c, time.Now()}
		return err
	}))
	defer func() {
		for _, h := range cs {
			h.conn.Close()
		}
	}()
	closed := make(chan time.Duration, n)
	stop := make(chan struct{})
	defer close(stop)
	for i, h := range cs {
		go func() {
			_, _ = io.Copy(io.Discard, h.conn) // the answer, then EOF when the server closes
			closed <- time.Since(h.sentAt)
		}()
		if i%2 == 1 {
			go func() {
				tick := time.NewTicker(time.Second)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if _, err := h.conn.Write([]byte(" ")); err != nil {
							return
						}
					}
				}
			}()
		}
	}
	s := g.snapshot(t)
	var last time.Duration
	for i := 0; i < n; i++ {
		select {
		case d := <-closed:
			last = max(last, d)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d connections still open: none closed in 30 s", n-i, n)
		}
	}
	return s, last
}
