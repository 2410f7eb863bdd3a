package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate/server"
)

// maxStrings is the accepted report that decodes largest: findings whose
// lists hold as many empty strings as the bounds allow, up to
// MaxReportBody bytes.
func maxStrings() []byte {
	item := `{"rule":"X","severity":"warn","message":"","pods":[""` + strings.Repeat(`,""`, gate.MaxFindingItems-1) + `]}`
	var b bytes.Buffer
	b.WriteString(`{"apiVersion":"gate.rankgate.io/v1","namespace":"ml","pod":"p0","report":{"verdict":"warn","findings":[` + item)
	for n := 1; b.Len()+len(item)+8 < gate.MaxReportBody && n < gate.MaxReportFindings; n++ {
		b.WriteString("," + item)
	}
	b.WriteString("]}}")
	return b.Bytes()
}

// BenchmarkDecodeHostile measures what decoding a hostile body allocates:
// "unbounded" is the decoder the gate used before reports were bounded
// (any body up to 1 MiB, decoded whole), the others are DecodeReport on
// what reaches it now (at most MaxReportBody bytes), side by side with a
// legitimate report (legit-x: bytes allocated as a multiple of its).
func BenchmarkDecodeHostile(b *testing.B) {
	mib := emptyFindings(1 << 20)
	legit := legitimateReport("p0")
	legitBytes := allocated(200, func() {
		if _, err := server.DecodeReport(legit); err != nil {
			b.Fatal(err)
		}
	})
	for _, bc := range []struct {
		name string
		body []byte
		run  func([]byte) error
	}{
		{"bounded/legitimate-8-GPU-report", legit, func(data []byte) error {
			_, err := server.DecodeReport(data)
			return err
		}},
		{"unbounded/1MiB-empty-findings", mib, func(data []byte) error {
			var req gate.ReportRequest
			return json.NewDecoder(io.LimitReader(bytes.NewReader(data), gate.MaxBody)).Decode(&req)
		}},
		{"bounded/256KiB-empty-findings", emptyFindings(gate.MaxReportBody), func(data []byte) error {
			_, err := server.DecodeReport(data)
			if err == nil {
				return fmt.Errorf("accepted")
			}
			return nil
		}},
		{"bounded/largest-accepted", maxStrings(), func(data []byte) error {
			_, err := server.DecodeReport(data)
			return err
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.body)))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for b.Loop() {
				if err := bc.run(bc.body); err != nil {
					b.Fatal(err)
				}
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/legitBytes, "legit-x")
		})
	}
}

// Trickling clients (headers, a Content-Length, then a byte now and then)
// from many pods: every connection is cut within BodyTimeout plus
// DecodeWait, and what they hold meanwhile is logged (RANKGATE_VERBOSE
// numbers for the docs: go test -run HeldConnections -v).
func TestHeldConnectionsAreCut(t *testing.T) {
	const conns = 400
	auth := fakeAuth{}
	ranks := map[string]bool{}
	for i := 0; i < conns; i++ {
		p := fmt.Sprintf("p%d", i)
		auth["tok-"+p] = server.Identity{Namespace: "ml", Pod: p, PodUID: "uid-" + p}
		ranks[p] = true
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := server.New(server.Options{Listener: ln, Auth: auth, Backend: &admitBackend{ranks: ranks}, BodyTimeout: time.Second, Log: logr.Discard()})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Start(ctx) }()
	defer func() { cancel(); require.NoError(t, <-errc) }()
	<-s.Serving()

	before := heapAndStacks()
	goroutines := runtime.NumGoroutine()
	closed := make(chan time.Duration, conns)
	start := time.Now()
	var cs []net.Conn
	for i := 0; i < conns; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		cs = append(cs, c)
		_, err = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-p%d\r\nContent-Length: 200000\r\n\r\n{", gate.PathReport, i)
		require.NoError(t, err)
		go func() {
			buf := make([]byte, 512)
			for {
				_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				_, err := c.Read(buf)
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					if _, err := c.Write([]byte(" ")); err != nil {
						break
					}
					continue
				}
				if err != nil {
					break
				}
			}
			closed <- time.Since(start)
		}()
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	time.Sleep(500 * time.Millisecond)
	held := heapAndStacks() - before
	t.Logf("%d trickling connections: %d KiB held (%d bytes a connection, client side included), %d goroutines",
		conns, held>>10, held/conns, runtime.NumGoroutine()-goroutines)
	var last time.Duration
	for i := 0; i < conns; i++ {
		select {
		case d := <-closed:
			last = max(last, d)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d connections still open after 10s", conns-i, conns)
		}
	}
	t.Logf("all %d connections closed by the server within %s", conns, last.Round(100*time.Millisecond))
	require.Less(t, last, 5*time.Second)
	require.EqualValues(t, server.DefaultMaxDecodes*3, min(s.ReportsRead(), server.DefaultMaxDecodes*3), "some bodies were read")
}

func heapAndStacks() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}
