// Package launchertest holds measurement helpers shared by the launcher's
// benchmarks and the CLI's: one way to measure start-up latency, so the
// numbers in docs/performance.md compare.
package launchertest

import (
	"bufio"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartLatency starts argv (with env when not nil), reads the first line
// of its stdout, which must be CMD's clock in nanoseconds printed at its
// first instruction, and returns how long after the start that clock was.
func StartLatency(tb testing.TB, env []string, argv []string) time.Duration {
	tb.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		tb.Fatal(err)
	}
	_ = cmd.Wait()
	ns, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil {
		tb.Fatalf("stamp %q: %v", line, err)
	}
	return time.Unix(0, ns).Sub(start)
}

// ReportAddedLatency runs direct and via alternately (so drift in machine
// load hits both alike) for b's iterations and reports the medians and
// their difference: direct-ms, rankgate-ms and added-ms.
func ReportAddedLatency(b *testing.B, env []string, direct, via []string) {
	var d, v []time.Duration
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			d, v = append(d, StartLatency(b, env, direct)), append(v, StartLatency(b, env, via))
		} else {
			v, d = append(v, StartLatency(b, env, via)), append(d, StartLatency(b, env, direct))
		}
	}
	md, mv := median(d), median(v)
	b.ReportMetric(float64(md.Microseconds())/1000, "direct-ms")
	b.ReportMetric(float64(mv.Microseconds())/1000, "rankgate-ms")
	b.ReportMetric(float64((mv-md).Microseconds())/1000, "added-ms")
}

func median(xs []time.Duration) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
