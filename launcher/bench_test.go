//go:build linux

package launcher

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rankgate/rankgate/launcher/launchertest"
)

// Benchmarks of the performance targets (README, rankgate launch):
//
//	go test -run XXX -bench 'PassThrough|StartupLatency|InitDeadline' -benchtime 5x ./launcher/
//	go test -run XXX -bench Scanner ./launcher/    (default -benchtime: the CPU metric needs ~1 s)
//
// The pass-through and latency benchmarks run real processes side by side
// in one run, alternating, so that a busy machine slows both sides alike;
// their ns/op is meaningless, the reported metrics are what counts.

// benchBytes is the pass-through volume: 1 GiB, or RANKGATE_BENCH_BYTES.
func benchBytes(b *testing.B) int64 {
	if s := os.Getenv("RANKGATE_BENCH_BYTES"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			b.Fatalf("RANKGATE_BENCH_BYTES: %v", err)
		}
		return n
	}
	return 1 << 30
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkPassThrough: CMD writes 1 GiB of log lines to stdout or
// stderr; the same consumer reads it through a pipe:
//
//	plain:    CMD | cat >/dev/null
//	rankgate: rankgate launch -- CMD | cat >/dev/null
//	hop:      CMD | cat | cat >/dev/null   (control: one more plain pipe stage)
//
// Two kinds of output:
//
//	training: a real NCCL init (fixture 10, Init COMPLETE) then training
//	          step lines: after readiness only the NCCL anchor is searched.
//	stress:   step lines with an NCCL INFO channel line every 64 lines and
//	          no Init COMPLETE: the init-phase scan runs throughout and
//	          every 64th line is parsed.
//
// Reported: median seconds of each, the ratios rankgate/plain and
// hop/plain, and the CPU seconds rankgate itself used (its own rusage:
// unlike wall time, not inflated by other processes on a shared machine).
func BenchmarkPassThrough(b *testing.B) {
	bin := testbin(b)
	n := strconv.FormatInt(benchBytes(b), 10)
	for _, kind := range []string{"training", "stress"} {
		for _, stream := range []string{"stdout", "stderr"} {
			b.Run(kind+"/"+stream, func(b *testing.B) {
				cpuFile := b.TempDir() + "/cpu"
				suffix, redirect := "", ""
				if stream == "stderr" {
					suffix, redirect = "err", " 2>&1 >/dev/null"
				}
				gen := bin + " child replay" + suffix + ":" + fixture10 + " steps" + suffix + ":" + n
				if kind == "stress" {
					gen = bin + " child lines" + suffix + ":" + n
				}
				variants := []struct {
					name, line string
				}{
					{"plain", gen + redirect + " | cat >/dev/null"},
					{"rankgate", bin + " launch --init-timeout 10m --rusage " + cpuFile + " -- " + gen + redirect + " | cat >/dev/null"},
					{"hop", gen + redirect + " | cat | cat >/dev/null"},
				}
				times := make([][]time.Duration, len(variants))
				var cpu []time.Duration
				for i := 0; b.Loop(); i++ {
					for k := range variants {
						j := (i + k) % len(variants) // rotate the order
						start := time.Now()
						out, err := exec.Command("sh", "-c", "set -e; "+variants[j].line).CombinedOutput()
						if err != nil {
							b.Fatalf("%s: %v: %s", variants[j].name, err, out)
						}
						times[j] = append(times[j], time.Since(start))
						if variants[j].name == "rankgate" {
							data, err := os.ReadFile(cpuFile)
							if err != nil {
								b.Fatal(err)
							}
							sec, _ := strconv.ParseFloat(string(data), 64)
							cpu = append(cpu, time.Duration(sec*float64(time.Second)))
						}
					}
				}
				plain, rg, hop := median(times[0]), median(times[1]), median(times[2])
				b.ReportMetric(plain.Seconds(), "plain-s")
				b.ReportMetric(rg.Seconds(), "rankgate-s")
				b.ReportMetric(hop.Seconds(), "hop-s")
				b.ReportMetric(float64(rg)/float64(plain), "rankgate/plain")
				b.ReportMetric(float64(hop)/float64(plain), "hop/plain")
				b.ReportMetric(median(cpu).Seconds(), "rankgate-cpu-s")
			})
		}
	}
}

// BenchmarkStartupLatency: the time from starting the command to CMD's
// first instruction (CMD prints its clock), direct and through rankgate
// launch (no preflight: the launcher alone). Reported: the medians and
// their difference, the latency rankgate adds.
func BenchmarkStartupLatency(b *testing.B) {
	bin := testbin(b)
	direct := []string{bin, "child", "stamp"}
	via := []string{bin, "launch", "--init-timeout", "10m", "--", bin, "child", "stamp"}
	launchertest.ReportAddedLatency(b, cleanEnv(), direct, via)
}

// BenchmarkInitDeadlineTeardown: CMD never completes NCCL init, ignores
// SIGTERM and has two grandchildren that ignore it too. Reported: how long
// after deadline + grace the whole group was gone (target: under 1 s).
func BenchmarkInitDeadlineTeardown(b *testing.B) {
	const timeout, grace = 200 * time.Millisecond, 100 * time.Millisecond
	dir := b.TempDir()
	var over []time.Duration
	for i := 0; b.Loop(); i++ {
		cmd := []string{testbin(b), "child", "ignore:TERM", "spawn:2:" + dir + "/pids" + strconv.Itoa(i), "start:0:1", "hang"}
		res, err := Run(b.Context(), Options{Command: cmd, Env: cleanEnv(), InitTimeout: timeout, Grace: grace})
		if err != nil || res.ExitCode != 4 {
			b.Fatalf("exit %d, %v", res.ExitCode, err)
		}
		over = append(over, res.Elapsed-timeout-grace)
	}
	b.ReportMetric(float64(median(over).Microseconds())/1000, "after-grace-ms")
	b.ReportMetric(float64(slices.Max(over).Microseconds())/1000, "max-after-grace-ms")
}

// BenchmarkScanner: the scanner alone over 1 MiB of log lines, per mode,
// in CPU time of the scanning thread per GiB (ns/op on a shared machine
// counts other processes' time too).
func BenchmarkScanner(b *testing.B) {
	block := logBlock()
	plain := []byte(strings.ReplaceAll(string(block), "NCCL", "nccl"))
	for _, tc := range []struct {
		name  string
		data  []byte
		ready bool
		seen  int64 // bytes of the stream before: past the fatal-anchor budget?
		re    *regexp.Regexp
	}{
		{"ready/no-NCCL-lines", plain, true, 0, nil},
		{"ready/NCCL-line-every-64", block, true, 0, nil},
		{"init/first-64MiB/NCCL-line-every-64", block, false, 0, nil},
		{"init/after-64MiB/NCCL-line-every-64", block, false, fatalScanBudget, nil},
		{"init/ready-pattern-literal", block, false, fatalScanBudget, regexp.MustCompile(`Epoch \d+`)},
		{"init/ready-pattern-no-literal", block, false, fatalScanBudget, regexp.MustCompile(`(?i)epoch \d+`)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m := newMonitor(tc.re, 1<<20, TransportUnknown, false, false)
			if tc.ready {
				m.ready.Store(true)
			}
			s := newLineScanner(m.line)
			b.SetBytes(int64(len(tc.data)))
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c0 := threadCPU()
			for b.Loop() {
				for off := 0; off < len(tc.data); off += pumpBuf {
					s.scan(tc.data[off:min(off+pumpBuf, len(tc.data))], m.mode(tc.seen))
				}
			}
			b.ReportMetric(float64(threadCPU()-c0)/1e6/float64(b.N)*1024, "cpu-ms/GiB")
		})
	}
}

// logBlock is 1 MiB of training-log lines with a NCCL INFO channel line
// every 64 lines (testbin's lines:N writes the same).
func logBlock() []byte {
	var sb strings.Builder
	for i := 0; sb.Len() < 1<<20; i++ {
		if i%64 == 63 {
			fmt.Fprintf(&sb, "node-0:%d:%d [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n", 100, 200)
			continue
		}
		fmt.Fprintf(&sb, "step %8d | loss %.5f | lr 3.00e-04 | tokens/s %9d | grad-norm %.3f\n", i, 2.0/float64(i+1), 1000+i, 0.5)
	}
	return []byte(sb.String()[:1<<20])
}

// threadCPU is the calling thread's user+system CPU time in nanoseconds.
func threadCPU() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
