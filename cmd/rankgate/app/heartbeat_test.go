//go:build linux

package app

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate/gatetest"
	"github.com/rankgate/rankgate/verdict"
)

// stampedLines records each line written and when.
type stampedLines struct {
	mu    sync.Mutex
	lines []string
	at    []time.Time
	part  string
}

func (s *stampedLines) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.part += string(p)
	for {
		i := strings.IndexByte(s.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		s.lines = append(s.lines, s.part[:i])
		s.at = append(s.at, time.Now())
		s.part = s.part[i+1:]
	}
}

// matching returns the lines that match re, their submatches and times.
func (s *stampedLines) matching(re *regexp.Regexp) (subs [][]string, at []time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, l := range s.lines {
		if m := re.FindStringSubmatch(l); m != nil {
			subs, at = append(subs, m), append(at, s.at[i])
		}
	}
	return subs, at
}

// runStamped runs a command line as run does, with stderr stamped.
func runStamped(t *testing.T, env map[string]string, args ...string) (int, string, *stampedLines) {
	t.Helper()
	for _, k := range []string{"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "POD_NAME", "POD_NAMESPACE", "RANKGATE_CONFIG", "RANKGATE_OUTPUT", "RANKGATE_QUIET"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	var out strings.Builder
	errs := &stampedLines{}
	code := Run(context.Background(), Streams{In: strings.NewReader(""), Out: &out, Err: errs}, args)
	return code, out.String(), errs
}

// gangGate is a gate for job whose reported ranks grow over time
// (reported(since start)), decided pass after decideAfter; deadline, when
// set, is the gang's.
func gangGate(t *testing.T, job string, expected int, reported func(time.Duration) int, decideAfter time.Duration, deadline *time.Time) (args []string) {
	t.Helper()
	dir := t.TempDir()
	certs, err := gatetest.WriteCerts(dir, "127.0.0.1")
	require.NoError(t, err)
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte("tok"), 0o600))
	start := time.Now()
	pass := verdict.NewReport(job, nil)
	g, err := gatetest.StartGate(certs, "tok", func(r gatetest.Request, now time.Time) (*gate.Response, *gate.ErrorBody) {
		since := now.Sub(start)
		resp := &gate.Response{State: gate.StateWaiting, Job: job, Rank: 0, Expected: expected, Reported: reported(since), Deadline: deadline}
		if r.Method == "GET" && r.Wait > 0 {
			resp.Rank = -1 // the launcher
		}
		if since >= decideAfter {
			resp.State, resp.Verdict, resp.Reported = gate.StateDecided, &pass, expected
		}
		return resp, nil
	})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	return []string{"--gate-url", g.URL, "--ca-file", certs.CAFile, "--token-file", tok}
}

// requireSpaced checks that no two lines came closer than the interval
// (with a little slack for the clock reads around the write).
func requireSpaced(t *testing.T, at []time.Time, interval time.Duration) {
	t.Helper()
	for i := 1; i < len(at); i++ {
		require.GreaterOrEqual(t, at[i].Sub(at[i-1]), interval-interval/10, "lines %d and %d", i-1, i)
	}
}

// rankgate init, while the gate holds its long poll: a line each
// --heartbeat with the ranks reported (asked afresh) and the time left
// until the gang's deadline; --quiet prints none, and the verdict still.
func TestInitHeartbeat(t *testing.T) {
	deadline := time.Now().Add(10 * time.Minute)
	reported := func(d time.Duration) int {
		if d < 700*time.Millisecond {
			return 3
		}
		return 5
	}
	pod := map[string]string{"POD_NAME": "train-worker-2", "POD_NAMESPACE": "ml"}
	rank := []string{"--sample", "a100-full", "--devices", "0", "--poll", "5s", "--heartbeat", "300ms", "--timeout", "30m"}
	line := regexp.MustCompile(`^rankgate init: waiting for the gang verdict of ml/PyTorchJob/train: (\d) of 8 ranks reported; (9m5\ds|10m0s) left until the gang deadline$`)

	code, out, errs := runStamped(t, pod, append(append([]string{"init"}, gangGate(t, "ml/PyTorchJob/train", 8, reported, 1500*time.Millisecond, &deadline)...), rank...)...)
	require.Equal(t, 0, code, strings.Join(errs.lines, "\n"))
	require.Contains(t, out, "gang verdict for ml/PyTorchJob/train")
	subs, at := errs.matching(line)
	require.GreaterOrEqual(t, len(subs), 3, strings.Join(errs.lines, "\n"))
	counts := map[string]bool{}
	for _, m := range subs {
		counts[m[1]] = true
	}
	require.Equal(t, map[string]bool{"3": true, "5": true}, counts, "the counts are asked afresh while the report's poll is held")
	requireSpaced(t, at, 300*time.Millisecond)

	code, out, errs = runStamped(t, pod, append(append([]string{"init", "--quiet"}, gangGate(t, "ml/PyTorchJob/train", 8, reported, 1500*time.Millisecond, &deadline)...), rank...)...)
	require.Equal(t, 0, code)
	require.Contains(t, out, "gang verdict for ml/PyTorchJob/train")
	for _, l := range errs.lines {
		require.NotContains(t, l, "waiting for the gang")
	}
}

// rankgate launch --gang: the same heartbeat while it waits before CMD;
// without a gang deadline from the gate, the time left is --gang-timeout's.
func TestLaunchGangHeartbeat(t *testing.T) {
	pod := map[string]string{"POD_NAME": "mpi-launcher", "POD_NAMESPACE": "ml"}
	one := func(time.Duration) int { return 1 }
	line := regexp.MustCompile(`^rankgate: waiting for the gang verdict of ml/MPIJob/mpi: 1 of 2 ranks reported; (29|30)s left until --gang-timeout$`)
	for _, quiet := range []bool{false, true} {
		t.Run("quiet="+strconv.FormatBool(quiet), func(t *testing.T) {
			args := append([]string{"launch", "--gang", "--gang-poll", "5s", "--gang-timeout", "30s", "--heartbeat", "250ms", "--no-preflight", "--init-timeout", "0"},
				gangGate(t, "ml/MPIJob/mpi", 2, one, 1200*time.Millisecond, nil)...)
			if quiet {
				args = append(args, "-q")
			}
			code, out, errs := runStamped(t, pod, append(args, "--", "echo", "cmd ran")...)
			require.Equal(t, 0, code, strings.Join(errs.lines, "\n"))
			require.Equal(t, "cmd ran\n", out)
			require.Contains(t, errs.lines, "rankgate: gang verdict for ml/MPIJob/mpi: pass; starting CMD", "the verdict is told under --quiet too")
			subs, at := errs.matching(line)
			if quiet {
				require.Empty(t, subs)
				return
			}
			require.GreaterOrEqual(t, len(subs), 2, strings.Join(errs.lines, "\n"))
			requireSpaced(t, at, 250*time.Millisecond)
		})
	}
}

// The line from what the gate said last, and before it said anything.
func TestHeartbeatLine(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var b strings.Builder
	h := newHeartbeat(&b, 10*time.Second, "rankgate init: ", "ml/train-worker-3", "--timeout", now.Add(15*time.Minute))
	h.now = func() time.Time { return now }

	h.retrying(errors.New("dial tcp 10.0.0.1:443: connection refused"))
	require.Equal(t, "waiting for the gang verdict of pod ml/train-worker-3: no answer from the gate yet (dial tcp 10.0.0.1:443: connection refused); 15m0s left until --timeout", h.line())

	soon, late, past := now.Add(4*time.Minute+30*time.Second), now.Add(time.Hour), now.Add(-time.Second)
	r := &gate.Response{State: gate.StateWaiting, Job: "ml/PyTorchJob/train", Rank: 3, Expected: 8, Reported: 3, Deadline: &soon}
	h.waiting(r)
	require.Equal(t, "waiting for the gang verdict of ml/PyTorchJob/train: 3 of 8 ranks reported; 4m30s left until the gang deadline", h.line())
	r.Deadline = &late // --timeout ends first
	require.Equal(t, "waiting for the gang verdict of ml/PyTorchJob/train: 3 of 8 ranks reported; 15m0s left until --timeout", h.line())
	r.Deadline = &past
	require.Equal(t, "waiting for the gang verdict of ml/PyTorchJob/train: 3 of 8 ranks reported; the gang deadline has passed, the verdict is due", h.line())

	now = now.Add(20 * time.Second)
	r.Deadline = &soon
	h.retrying(errors.New("gate: NotLeader: standby"))
	require.Equal(t, "waiting for the gang verdict of ml/PyTorchJob/train: 3 of 8 ranks reported (20s ago; the gate is not answering now: gate: NotLeader: standby); 4m10s left until the gang deadline", h.line())

	// No announce set: waiting printed nothing; a nil heartbeat (--quiet)
	// takes every call.
	require.Empty(t, b.String())
	var quiet *heartbeat
	quiet.waiting(r)
	quiet.retrying(nil)
	quiet.start(context.Background())()
}
