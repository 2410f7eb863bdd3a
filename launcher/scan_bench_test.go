package launcher

import (
	"fmt"
	"runtime"
	"syscall"
	"regexp"
	"strings"
	"testing"
)

func logBlock() []byte {
	var b strings.Builder
	for i := 0; b.Len() < 1<<20; i++ {
		if i%64 == 63 {
			fmt.Fprintf(&b, "node-0:%d:%d [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n", 100, 200)
			continue
		}
		fmt.Fprintf(&b, "step %8d | loss %.5f | lr 3.00e-04 | tokens/s %9d | grad-norm %.3f\n", i, 2.0/float64(i+1), 1000+i, 0.5)
	}
	return []byte(b.String()[:1<<20])
}

func BenchmarkScanModes(b *testing.B) {
	block := logBlock()
	for _, tc := range []struct {
		name  string
		ready bool
		re    *regexp.Regexp
	}{
		{"running", true, nil},
		{"init", false, nil},
		{"init-pattern-literal", false, regexp.MustCompile(`^Epoch 1`)},
		{"init-pattern-all", false, regexp.MustCompile(`(?i)epoch`)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m := newMonitor(tc.re, 1000, TransportUnknown, false, false)
			if tc.ready {
				m.ready.Store(true)
			}
			go func() {
				for range m.events {
				}
			}()
			s := newLineScanner(m.line)
			b.SetBytes(int64(len(block)))
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c0 := threadCPU()
			for b.Loop() {
				for off := 0; off < len(block); off += pumpBuf {
					s.scan(block[off:off+pumpBuf], m.mode(0))
				}
			}
			// CPU time of this thread per GiB: unlike ns/op, not inflated by
			// other processes on a shared machine.
			b.ReportMetric(float64(threadCPU()-c0)/1e6/float64(b.N)*1024, "cpu-ms/GiB")
		})
	}
}

// threadCPU is the calling thread's user+system CPU time in nanoseconds.
func threadCPU() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
