package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// TestBenchGateHeldConnections: one gang of more ranks than the gate's
// default connection bound (RANKGATE_BENCH_HELD_RANKS, default 2,100),
// every rank with its own TLS connection from its own loopback address,
// as one pod per node has, against the real `rankgate controller` binary
// (the shipped GOMEMLIMIT) run with --gate-max-connections above the
// ranks. Measured: what each waiting rank costs the controller (RSS, live
// heap and goroutines while all but the last rank wait in their long
// polls, against before any rank connected), and the time from the last
// report to every rank holding the verdict. With the default bound of
// 2,048 the ranks beyond it could not all wait: this is the configuration
// a large gang needs.
func TestBenchGateHeldConnections(t *testing.T) {
	benchOnly(t)
	n := envInt("RANKGATE_BENCH_HELD_RANKS", 2100)
	ctx := context.Background()
	ns := newNamespace(t, "bench-held", true)
	job, err := benchGangJob(ctx, ns, "held", n)
	require.NoError(t, err)
	begin := time.Now()
	ranks := benchGangRanks(t, ctx, job, n)
	t.Logf("setup: 1 job, %d pods, %d tokens in %s", n, n, time.Since(begin).Round(time.Millisecond))

	g := startGateProcess(t, "--gate-max-connections", strconv.Itoa(n+64))
	time.Sleep(2 * time.Second) // the pods in its cache, the start-up garbage gone
	before := g.snapshot(t)

	pool := caPool(t, certs.CAFile)
	clients := make([]*gate.Client, n)
	transports := make([]*http.Transport, n)
	for i := range clients {
		transports[i] = sourceTransport(pool, sourceIP(4, i))
		clients[i], err = gate.NewClient(gate.ClientOptions{URL: g.URL, Token: ranks[i].Token, Transport: transports[i]})
		require.NoError(t, err)
	}
	defer func() {
		for _, tr := range transports {
			tr.CloseIdleConnections()
		}
	}()
	sent, held := make([]time.Time, n), make([]time.Time, n)
	var fails atomic.Int32
	var wg sync.WaitGroup
	rank := func(i int) {
		defer wg.Done()
		req := &gate.ReportRequest{Namespace: ns, Pod: ranks[i].Pod, Node: ranks[i].Node, DriverVersion: "570.172.08", CUDADriverVersion: "12.8",
			Report: benchRankReport(ranks[i].Node)}
		actx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		sent[i] = time.Now()
		r, err := clients[i].Await(actx, req, gate.AwaitOptions{Poll: 30 * time.Second})
		held[i] = time.Now()
		if err != nil || r.Verdict.Verdict != verdict.VerdictPass {
			fails.Add(1)
			t.Logf("rank %d: %v", i, err)
		}
	}
	// All but the last rank report, a few at a time (TLS handshakes and
	// TokenReviews), and wait.
	sem := make(chan struct{}, 32)
	for i := 0; i < n-1; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			// Connected and authenticated first, as rankgate init does.
			if _, err := clients[i].Verdict(ctx, ns, ranks[i].Pod, 0); err != nil {
				t.Logf("rank %d warm-up: %v", i, err)
			}
			<-sem
			rank(i)
		}()
	}
	require.Eventually(t, func() bool { return g.metric(t, "rankgate_ranks_waiting") == float64(n-1) },
		2*time.Minute, 200*time.Millisecond, "not every rank waits")
	time.Sleep(2 * time.Second)
	waiting := g.snapshot(t)
	t.Logf("before: %s; %d ranks waiting: %s", before, n-1, waiting)
	if _, err := clients[n-1].Verdict(ctx, ns, ranks[n-1].Pod, 0); err != nil {
		t.Logf("last rank warm-up: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	load := loadAverage()
	wg.Add(1)
	rank(n - 1)
	wg.Wait()
	require.Zero(t, fails.Load())
	last := sent[n-1]
	lat := make([]time.Duration, n)
	for i := range held {
		lat[i] = held[i].Sub(last)
	}
	per := func(a, b float64) string { return fmt.Sprintf("%.1f KiB", (b-a)*1024/float64(n-1)) }
	summary := map[string]any{
		"ranks": n, "connections": n, "cpus": runtime.NumCPU(), "loadAvg": load,
		"rssPerWaitingRank": per(before.rss, waiting.rss), "liveHeapPerWaitingRank": per(before.liveMiB, waiting.liveMiB),
		"goroutinesPerWaitingRank": fmt.Sprintf("%.2f", (waiting.goroutines-before.goroutines)/float64(n-1)),
		"rssWaitingMiB":            fmt.Sprintf("%.1f", waiting.rss), "peakRSSMiB": fmt.Sprintf("%.1f", waiting.peak),
		"firstRankHeld": percentile(lat, 0).String(), "p50": percentile(lat, .5).String(), "p99": percentile(lat, .99).String(),
		"allRanksHeld":              percentile(lat, 1).String(),
		"serverLastReportToVerdict": bucketOf(t, g.metrics, "rankgate_gang_last_report_to_verdict_seconds"),
	}
	b, _ := json.Marshal(summary)
	t.Logf("one gang of %d ranks, one connection each: %s", n, b)
	writeBenchResult(t, "held-connections", b)
}

// bucketOf is the upper bound of the lowest bucket of histogram name (on
// the metrics endpoint addr) that holds every observation.
func bucketOf(t *testing.T, addr, name string) string {
	t.Helper()
	r, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	var total float64
	type bucket struct {
		le string
		n  float64
	}
	var bs []bucket
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+"_count "); ok {
			total, _ = strconv.ParseFloat(v, 64)
		}
		if rest, ok := strings.CutPrefix(l, name+`_bucket{le="`); ok {
			le, v, _ := strings.Cut(rest, `"} `)
			n, _ := strconv.ParseFloat(v, 64)
			bs = append(bs, bucket{le, n})
		}
	}
	for _, x := range bs {
		if total > 0 && x.n >= total {
			return "le " + x.le + "s"
		}
	}
	return "none"
}
