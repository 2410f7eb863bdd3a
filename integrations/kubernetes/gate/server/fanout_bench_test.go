package server_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate/server"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// fanoutGang is a backend holding one gang's long polls until release, then
// answering each rank as the controller does: the gang's verdict, shared by
// every rank, with the rank's own number.
type fanoutGang struct {
	ranks       map[string]int // pod -> rank
	waiting     atomic.Int64
	copyVerdict bool

	mu   sync.Mutex
	done chan struct{}
	resp gate.Response
}

func (g *fanoutGang) Admit(ctx context.Context, _ server.Identity) (context.Context, error) {
	return ctx, nil
}

func (g *fanoutGang) Report(ctx context.Context, id server.Identity, _ *gate.ReportRequest, wait time.Duration) (*gate.Response, error) {
	return g.Verdict(ctx, id, wait)
}

func (g *fanoutGang) Verdict(ctx context.Context, id server.Identity, wait time.Duration) (*gate.Response, error) {
	g.mu.Lock()
	done := g.done
	g.mu.Unlock()
	g.waiting.Add(1)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-ctx.Done():
	case <-t.C:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.resp
	r.Rank = g.ranks[id.Pod]
	if g.copyVerdict {
		// Each rank its own copy of the report, as the controller
		// answered before the gate encoded a verdict once.
		v := *r.Verdict
		r.Verdict = &v
	}
	return &r, nil
}

// passingGang is the verdict of a gang of n ranks of one GPU each that
// passed (what GangRules answers), as the gate sends it.
func passingGang(n int) gate.Response {
	ranks := make([]preflight.RankReport, n)
	for i := range ranks {
		node := fmt.Sprintf("node-%04d", i)
		r := verdict.NewReport("node "+node, nil)
		r.Devices = []verdict.DeviceSummary{{ID: "GPU-" + node + "-0", Kind: "gpu", GPU: 0, GPUUUID: "GPU-" + node + "-0", Profile: "full", SMs: 108, MemoryMiB: 81920}}
		ranks[i] = preflight.RankReport{Rank: i, Pod: fmt.Sprintf("big-worker-%d", i), Node: node, Report: r}
	}
	v := preflight.GangRules(preflight.GangInput{Job: "ml/PyTorchJob/big", Expected: n, Ranks: ranks})
	v.Subject = fmt.Sprintf("ml/PyTorchJob/big: %d of %d ranks reported", n, n)
	deadline, at := time.Now().Add(10*time.Minute), time.Now()
	return gate.Response{State: gate.StateDecided, Job: "ml/PyTorchJob/big", Expected: n, Reported: n, Deadline: &deadline, Verdict: &v, DecidedAt: &at}
}

// BenchmarkFanOut: a gang's verdict lands while every one of its ranks
// waits in a long poll; measured is the time from the verdict to the
// moment every rank's client holds it (ms-all, and the median rank's
// ms-p50) and the CPU time of the whole process (server and clients)
// meanwhile (cpu-ms). The ranks are gate clients sharing conns HTTP/2
// connections over TLS (32 ranks a connection at 4,096), each from its
// own loopback address, as TestBenchBigGang runs them.
// RANKGATE_BENCH_PROFILE=DIR writes a CPU profile of each fan-out there.
func BenchmarkFanOut(b *testing.B) {
	for _, n := range []int{1024, 4096} {
		for _, copyVerdict := range []bool{true, false} {
			name := fmt.Sprintf("ranks=%d/verdict=shared", n)
			if copyVerdict {
				name = fmt.Sprintf("ranks=%d/verdict=per-rank", n)
			}
			b.Run(name, func(b *testing.B) { benchFanOut(b, n, max(n/32, 1), copyVerdict) })
		}
	}
}

func benchFanOut(b *testing.B, n, conns int, copyVerdict bool) {
	auth := fakeAuth{}
	g := &fanoutGang{ranks: map[string]int{}, resp: passingGang(n), copyVerdict: copyVerdict}
	pods := make([]string, n)
	for i := range pods {
		pods[i] = fmt.Sprintf("big-worker-%d", i)
		auth["tok-"+pods[i]] = server.Identity{Namespace: "ml", Pod: pods[i], PodUID: "uid-" + pods[i]}
		g.ranks[pods[i]] = i
	}
	e := startServerWith(b, server.Options{Auth: auth, Backend: g, MaxPollsPerPod: 4})
	clients := make([]*gate.Client, n)
	for k := 0; k < conns; k++ {
		local := &net.TCPAddr{IP: net.IPv4(127, 1, byte(k/250), byte(k%250+1))}
		d := &net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}
		tr := &http.Transport{DialContext: d.DialContext, TLSClientConfig: e.tls.Clone(), ForceAttemptHTTP2: true, MaxConnsPerHost: 1}
		b.Cleanup(tr.CloseIdleConnections)
		for i := k; i < n; i += conns {
			c, err := gate.NewClient(gate.ClientOptions{URL: "https://" + e.addr, Token: "tok-" + pods[i], Transport: tr})
			require.NoError(b, err)
			clients[i] = c
		}
	}
	ctx := context.Background()
	profiles := os.Getenv("RANKGATE_BENCH_PROFILE")
	var all, p50, cpu time.Duration
	held := make([]time.Duration, n)
	round := 0
	for b.Loop() {
		round++
		g.mu.Lock()
		g.done = make(chan struct{})
		g.mu.Unlock()
		g.waiting.Store(0)
		var wg sync.WaitGroup
		var fails atomic.Int32
		var released time.Time
		for i, c := range clients {
			wg.Go(func() {
				r, err := c.Verdict(ctx, "ml", pods[i], 30*time.Second)
				held[i] = time.Since(released)
				if err != nil || r.Rank != i || r.Verdict == nil || r.Verdict.Verdict != verdict.VerdictPass {
					fails.Add(1)
				}
			})
		}
		for g.waiting.Load() < int64(n) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // every long poll parked
		var stop func()
		if profiles != "" {
			f, err := os.Create(filepath.Join(profiles, fmt.Sprintf("fanout-%d-%d.pprof", n, round)))
			require.NoError(b, err)
			require.NoError(b, pprof.StartCPUProfile(f))
			stop = func() { pprof.StopCPUProfile(); _ = f.Close() }
		}
		before := cpuTime()
		released = time.Now()
		g.mu.Lock()
		close(g.done)
		g.mu.Unlock()
		wg.Wait()
		cpu += cpuTime() - before
		if stop != nil {
			stop()
		}
		require.Zero(b, fails.Load(), "ranks without the verdict")
		slices.Sort(held)
		all += held[n-1]
		p50 += held[n/2]
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(b.N) / 1e6 }
	b.ReportMetric(ms(all), "ms-all")
	b.ReportMetric(ms(p50), "ms-p50")
	b.ReportMetric(ms(cpu), "cpu-ms")
	b.ReportMetric(0, "ns/op")
}

// cpuTime is the process's user and system time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
