//go:build linux

package launcher

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/launcher/launchertest"
	"github.com/rankgate/rankgate/verdict"
)

// The children are real processes: the helper binary testbin (built once,
// on first use, so that fuzz workers and unit-only runs skip the build).

var (
	testbinOnce sync.Once
	testbinPath string
	testbinErr  error
)

func testbin(t testing.TB) string {
	t.Helper()
	testbinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rankgate-testbin-")
		if err != nil {
			testbinErr = err
			return
		}
		testbinPath = filepath.Join(dir, "testbin")
		goTool, err := exec.LookPath("go")
		if err != nil {
			testbinErr = err
			return
		}
		out, err := exec.Command(goTool, "build", "-o", testbinPath, "./internal/testbin").CombinedOutput()
		if err != nil {
			testbinErr = err
			t.Logf("%s", out)
		}
	})
	require.NoError(t, testbinErr, "building the test helper")
	return testbinPath
}

// child is testbin's "child ACTION..." command line.
func child(t testing.TB, actions ...string) []string {
	return append([]string{testbin(t), "child"}, actions...)
}

type run struct {
	res      Result
	err      error
	stdout   []byte
	stderr   string
	duration time.Duration
}

// launch runs Options with short defaults and captures the streams.
func launch(t *testing.T, opts Options) run {
	t.Helper()
	var out, errb bytes.Buffer
	if opts.Stdout == nil {
		opts.Stdout = &out
	}
	if opts.Stderr == nil {
		opts.Stderr = &errb
	}
	if opts.Env == nil {
		opts.Env = cleanEnv()
	}
	start := time.Now()
	res, err := Run(context.Background(), opts)
	return run{res: res, err: err, stdout: out.Bytes(), stderr: errb.String(), duration: time.Since(start)}
}

// cleanEnv is this environment without NCCL_* and PET_* (a developer's
// shell may set them).
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NCCL_") && !strings.HasPrefix(kv, "PET_") {
			env = append(env, kv)
		}
	}
	return env
}

// gone reports whether pid no longer runs (exited, or a zombie that its
// new parent has not reaped yet).
func gone(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(data, ')')
	return i > 0 && i+2 < len(data) && (data[i+2] == 'Z' || data[i+2] == 'X')
}

func readPids(t *testing.T, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	return pids
}

func TestPassThroughIsByteExact(t *testing.T) {
	const n = 4 << 20
	r := launch(t, Options{Command: child(t, "write:"+strconv.Itoa(n), "writeerr:"+strconv.Itoa(n)), InitTimeout: time.Minute})
	require.NoError(t, r.err)
	require.Equal(t, 0, r.res.ExitCode)
	want := randomBytes(n)
	require.True(t, bytes.Equal(want, r.stdout), "stdout differs (len %d)", len(r.stdout))
	require.True(t, bytes.Equal(want, []byte(r.stderr)), "stderr differs (len %d)", len(r.stderr))
}

// randomBytes is what testbin's write:N writes.
func randomBytes(n int) []byte {
	rng := rand.NewChaCha8([32]byte{1, 2, 3})
	out := make([]byte, 0, n)
	buf := make([]byte, 64<<10)
	for len(out) < n {
		_, _ = rng.Read(buf)
		out = append(out, buf[:min(len(buf), n-len(out))]...)
	}
	return out
}

// pipeSink is the read end of a pipe collected in the background: Stdout
// and Stderr that are pipes take the tee(2) path.
func pipeSink(t *testing.T) (*os.File, func() []byte) {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	var got bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = got.ReadFrom(r)
	}()
	return w, func() []byte {
		w.Close()
		<-done
		r.Close()
		return got.Bytes()
	}
}

func TestPassThroughIntoPipesIsByteExact(t *testing.T) {
	const n = 4 << 20
	out, stdout := pipeSink(t)
	errw, stderr := pipeSink(t)
	require.NotEqual(t, -1, fifoFD(out), "the tee path is under test")
	// No watchdog: rankgate then prints nothing (its "ready" line would go
	// between two of CMD's stderr chunks).
	r := launch(t, Options{Command: child(t, "write:"+strconv.Itoa(n), "writeerr:"+strconv.Itoa(n), "replay:"+fixture10),
		Stdout: out, Stderr: errw})
	require.NoError(t, r.err)
	require.Equal(t, 0, r.res.ExitCode)
	// rankgate raised the destination pipe's buffer (one tee moves up to 1 MiB).
	size, _, e := syscall.Syscall(syscall.SYS_FCNTL, out.Fd(), fGetPipeSz, 0)
	require.Zero(t, e)
	require.Equal(t, pipeSize, int(size))
	want := append(randomBytes(n), readFixture(t, fixture10)...)
	require.True(t, bytes.Equal(want, stdout()), "stdout differs")
	gotErr := stderr()
	require.True(t, bytes.Equal(randomBytes(n), gotErr), "stderr differs: len %d, %s", len(gotErr), firstDiff(randomBytes(n), gotErr))
	require.Equal(t, map[string]int{"NET/Libfabric/0/GDRDMA": 24}, r.res.Transports, "the tee path scans too")
}

func TestRankgateLinesStartOnALineOfTheirOwn(t *testing.T) {
	for _, tee := range []bool{false, true} {
		t.Run("tee="+strconv.FormatBool(tee), func(t *testing.T) {
			// CMD leaves a line unfinished on stderr, then a fatal NCCL line
			// makes rankgate speak.
			opts := Options{Command: []string{"sh", "-c", `printf 'partial' >&2; sleep 0.2; cat "$0"; exec sleep 30`, fixture40},
				InitTimeout: time.Minute, Grace: 100 * time.Millisecond}
			var get func() []byte
			if tee {
				opts.Stderr, get = pipeSink(t)
			}
			r := launch(t, opts)
			require.Equal(t, verdict.ExitFail, r.res.ExitCode)
			got := r.stderr
			if tee {
				got = string(get())
			}
			require.True(t, strings.HasPrefix(got, "partial\nrankgate: FAIL NCCL_FATAL"), "%q", got)
		})
	}
}

func TestClosedStdoutEndsCMDLikeAPipeline(t *testing.T) {
	for _, tee := range []bool{false, true} {
		t.Run("tee="+strconv.FormatBool(tee), func(t *testing.T) {
			var out *os.File
			if tee {
				r, w, err := os.Pipe()
				require.NoError(t, err)
				r.Close() // the consumer is gone, like `| head` after its lines
				out = w
			} else {
				f, err := os.Open(os.DevNull)
				require.NoError(t, err) // read-only: every write fails
				out = f
			}
			defer out.Close()
			res := launch(t, Options{Command: child(t, "lines:100000000"), Stdout: out, InitTimeout: time.Minute})
			require.Equal(t, 128+int(syscall.SIGPIPE), res.res.ExitCode, res.stderr)
		})
	}
}

func TestPassThroughLongLinesAndFixtures(t *testing.T) {
	r := launch(t, Options{Command: child(t, "longline:3000000", "replay:"+fixture10, "replayerr:"+fixture20), InitTimeout: time.Minute})
	require.NoError(t, r.err)
	// fixture 20 is fatal on stderr; the output is still passed through whole.
	want := append([]byte(strings.Repeat("x", 3000000)+" NCCL INFO long line end\n"), readFixture(t, fixture10)...)
	require.True(t, bytes.Equal(want, r.stdout))
	require.Contains(t, r.stderr, string(readFixture(t, fixture20)))
}

func TestExitCodes(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "not-executable")
	require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644))
	tests := []struct {
		name    string
		command []string
		code    int
		err     string
	}{
		{"exit 0", child(t, "exit:0"), 0, ""},
		{"exit 3", child(t, "out:hello", "exit:3"), 3, ""},
		{"killed by SIGSEGV", []string{"sh", "-c", "kill -SEGV $$"}, 128 + int(syscall.SIGSEGV), ""},
		{"killed by SIGKILL", child(t, "selfkill:KILL"), 128 + int(syscall.SIGKILL), ""},
		{"not found", []string{"rankgate-no-such-command"}, 127, "not found"},
		{"not executable", []string{notExec}, 126, "permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := launch(t, Options{Command: tt.command, InitTimeout: time.Minute})
			require.Equal(t, tt.code, r.res.ExitCode)
			if tt.err != "" {
				require.ErrorContains(t, r.err, tt.err)
				require.False(t, r.res.Started)
			} else {
				require.NoError(t, r.err)
			}
		})
	}
}

func TestNoCommand(t *testing.T) {
	r := launch(t, Options{})
	require.Error(t, r.err)
	require.Equal(t, verdict.ExitUsage, r.res.ExitCode)
}

func TestSignalsAreForwardedThenGraceThenKill(t *testing.T) {
	rec := filepath.Join(t.TempDir(), "signals")
	sigs := make(chan os.Signal, 4)
	ready := filepath.Join(t.TempDir(), "ready")
	go func() {
		waitFile(ready)
		sigs <- syscall.SIGHUP
		time.Sleep(50 * time.Millisecond)
		sigs <- syscall.SIGINT
		sigs <- syscall.SIGQUIT
	}()
	// The child records the signals and ignores them: after the grace
	// period rankgate kills the group.
	r := launch(t, Options{Command: child(t, "record:"+rec, "touch:"+ready, "hang"), Signals: sigs, Grace: time.Second, InitTimeout: time.Minute})
	require.NoError(t, r.err)
	require.Equal(t, 128+int(syscall.SIGKILL), r.res.ExitCode)
	require.Eventually(t, func() bool {
		data, _ := os.ReadFile(rec)
		return strings.Count(string(data), "\n") == 3
	}, 2*time.Second, 10*time.Millisecond)
	data, _ := os.ReadFile(rec)
	// Each is forwarded as it comes; two sent back to back may reach the
	// child in either order (the kernel delivers pending signals by
	// number, the child's runtime in turn), so only the first, sent 50 ms
	// ahead, has its place.
	got := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	require.Equal(t, "hangup", got[0], string(data))
	require.ElementsMatch(t, []string{"hangup", "interrupt", "quit"}, got)
}

func waitFile(path string) {
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSignalEndsAChildThatHonoursIt(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	ready := filepath.Join(t.TempDir(), "ready")
	go func() {
		waitFile(ready)
		sigs <- syscall.SIGTERM
	}()
	r := launch(t, Options{Command: child(t, "touch:"+ready, "hang"), Signals: sigs, Grace: 10 * time.Second, InitTimeout: time.Minute})
	require.Equal(t, 128+int(syscall.SIGTERM), r.res.ExitCode)
	require.Less(t, r.duration, 5*time.Second, "no need to wait for the grace period")
}

func TestContextCancelTerminatesTheGroup(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		waitFile(ready)
		cancel()
	}()
	res, err := Run(ctx, Options{Command: child(t, "ignore:TERM", "touch:"+ready, "hang"), Env: cleanEnv(), Grace: 200 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, 128+int(syscall.SIGKILL), res.ExitCode)
}

func TestGrandchildrenDoNotSurvive(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "pids")
	// The grandchildren ignore SIGTERM and outlive their parent.
	r := launch(t, Options{Command: child(t, "spawn:3:"+pids, "exit:5"), Grace: 200 * time.Millisecond, InitTimeout: time.Minute})
	require.NoError(t, r.err)
	require.Equal(t, 5, r.res.ExitCode)
	for _, pid := range readPids(t, pids) {
		require.True(t, gone(pid), "grandchild %d survived", pid)
	}
}

func TestInitTimeout(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "pids")
	termLog := filepath.Join(t.TempDir(), "termination-log")
	const timeout, grace = 500 * time.Millisecond, 300 * time.Millisecond
	pre := verdict.NewReport("test", []verdict.Finding{{Rule: "MIG_MODE_PENDING", Severity: verdict.SeverityWarn, Message: "a pending MIG change"}})
	// Rank 0 starts NCCL init and never completes; the leader ignores
	// SIGTERM and has grandchildren that do too.
	r := launch(t, Options{
		Command:        child(t, "ignore:TERM", "spawn:2:"+pids, "start:0:2", "hang"),
		InitTimeout:    timeout,
		Grace:          grace,
		TerminationLog: termLog,
		Preflight:      &pre,
	})
	require.NoError(t, r.err)
	require.Equal(t, verdict.ExitTimeout, r.res.ExitCode)
	require.False(t, r.res.Ready)
	// After the deadline, the group is gone within grace + 1s.
	require.Less(t, r.res.Elapsed, timeout+grace+time.Second)
	for _, pid := range readPids(t, pids) {
		require.True(t, gone(pid), "grandchild %d survived", pid)
	}
	require.Contains(t, r.res.Reason, verdict.RuleNCCLInitTimeout)
	require.Contains(t, r.res.Reason, "never completed: rank 0/2")
	log, err := os.ReadFile(termLog)
	require.NoError(t, err)
	require.Equal(t, r.res.Reason, string(log))
	// The diagnosis: ranks, transports, preflight, the last NCCL lines.
	for _, want := range []string{
		"rankgate: FAIL NCCL_INIT_TIMEOUT: NCCL init did not complete within 500ms",
		"NEVER COMPLETED: rank 0/2",
		"transports: none connected yet",
		"WARN MIG_MODE_PENDING: a pending MIG change",
		"last NCCL lines:",
		"- Init START",
	} {
		require.Contains(t, r.stderr, want)
	}
	f := r.res.Findings[len(r.res.Findings)-1]
	require.Equal(t, verdict.RuleNCCLInitTimeout, f.Rule)
	require.Equal(t, []int{0}, f.Ranks)
}

func TestInitTimeoutWithoutAnyNCCLLine(t *testing.T) {
	r := launch(t, Options{Command: child(t, "out:waiting for rendezvous", "hang"), InitTimeout: 300 * time.Millisecond, Grace: 100 * time.Millisecond})
	require.Equal(t, verdict.ExitTimeout, r.res.ExitCode)
	require.Contains(t, r.res.Reason, "no NCCL line was seen")
	require.Contains(t, r.res.Reason, "-x NCCL_DEBUG")
}

func TestFatalLineAbortsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name, action string
	}{
		{"ranks on one GPU (NVIDIA/nccl#1716)", "replay:" + fixture40},
		{"invalid device ordinal on stderr (mlcommons/training#442)", "replayerr:" + fixture20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := launch(t, Options{Command: child(t, tc.action, "hang"), InitTimeout: time.Minute, Grace: 200 * time.Millisecond})
			require.NoError(t, r.err)
			require.Equal(t, verdict.ExitFail, r.res.ExitCode)
			require.Less(t, r.duration, 10*time.Second, "no waiting for the init deadline")
			require.Contains(t, r.res.Reason, verdict.RuleNCCLFatal)
			require.Contains(t, r.stderr, "rankgate: FAIL NCCL_FATAL: fatal line during NCCL init")
		})
	}
}

func TestMultiRankReadiness(t *testing.T) {
	t.Run("all ranks complete", func(t *testing.T) {
		r := launch(t, Options{Command: child(t, "ranks:3"), LocalRanks: 3, InitTimeout: 20 * time.Second, Grace: 200 * time.Millisecond})
		require.NoError(t, r.err)
		require.Equal(t, 0, r.res.ExitCode)
		require.True(t, r.res.Ready)
		require.Contains(t, r.stderr, "NCCL Init COMPLETE on 3 local rank(s)")
	})
	t.Run("one rank hangs", func(t *testing.T) {
		r := launch(t, Options{Command: child(t, "ranks:3:1"), LocalRanks: 3, InitTimeout: 3 * time.Second, Grace: 200 * time.Millisecond})
		require.Equal(t, verdict.ExitTimeout, r.res.ExitCode)
		require.False(t, r.res.Ready)
		require.Contains(t, r.res.Reason, "2 of 3 local rank(s) reported Init COMPLETE; never completed: rank 1/3")
		require.Equal(t, []int{1}, r.res.Findings[len(r.res.Findings)-1].Ranks)
	})
}

func TestTransportFallback(t *testing.T) {
	// Fixture 10: four pods with one GPU each on one NVLink node; NCCL
	// connects them over the network.
	t.Run("warn", func(t *testing.T) {
		r := launch(t, Options{Command: child(t, "replay:"+fixture10, "exit:0"), InitTimeout: time.Minute, ExpectTransport: TransportP2P})
		require.Equal(t, 0, r.res.ExitCode)
		require.True(t, r.res.Ready)
		require.Equal(t, map[string]int{"NET/Libfabric/0/GDRDMA": 24}, r.res.Transports)
		require.Contains(t, r.stderr, "rankgate: WARN TRANSPORT_FALLBACK: NCCL connects ranks via NET/Libfabric/0/GDRDMA (net) where p2p was expected")
	})
	t.Run("strict", func(t *testing.T) {
		r := launch(t, Options{Command: child(t, "replay:"+fixture10, "hang"), InitTimeout: time.Minute, Grace: 200 * time.Millisecond,
			ExpectTransport: TransportP2P, StrictTransport: true})
		require.Equal(t, verdict.ExitFail, r.res.ExitCode)
		require.Contains(t, r.res.Reason, verdict.RuleTransportFallback)
	})
}

func TestReadyPatternAndFile(t *testing.T) {
	t.Run("pattern", func(t *testing.T) {
		r := launch(t, Options{Command: child(t, "err:Epoch 1/10", "sleep:300ms"), InitTimeout: 10 * time.Second,
			ReadyPattern: regexp.MustCompile(`^Epoch \d+/`)})
		require.Equal(t, 0, r.res.ExitCode)
		require.True(t, r.res.Ready)
	})
	t.Run("file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "ready")
		r := launch(t, Options{Command: child(t, "touch:"+f, "sleep:1s"), InitTimeout: 10 * time.Second, ReadyFile: f})
		require.Equal(t, 0, r.res.ExitCode)
		require.True(t, r.res.Ready)
	})
}

func TestNCCLDebugEnvironment(t *testing.T) {
	t.Run("set when the user set neither", func(t *testing.T) {
		r := launch(t, Options{Command: child(t, "env:NCCL_DEBUG", "env:NCCL_DEBUG_SUBSYS"), InitTimeout: time.Minute})
		require.Equal(t, "NCCL_DEBUG=INFO\nNCCL_DEBUG_SUBSYS=INIT\n", string(r.stdout))
	})
	t.Run("left alone otherwise; a hidden INIT turns the watchdog off", func(t *testing.T) {
		r := launch(t, Options{Command: child(t, "env:NCCL_DEBUG", "env:NCCL_DEBUG_SUBSYS", "sleep:600ms"), InitTimeout: 200 * time.Millisecond,
			Env: append(cleanEnv(), "NCCL_DEBUG=WARN")})
		require.Equal(t, "NCCL_DEBUG=WARN\nNCCL_DEBUG_SUBSYS=<unset>\n", string(r.stdout))
		require.Equal(t, 0, r.res.ExitCode, "no init timeout: the watchdog is off")
		require.Contains(t, r.stderr, "rankgate: WARN NCCL_DEBUG_HIDDEN: NCCL_DEBUG=WARN")
	})
	t.Run("subsys only", func(t *testing.T) {
		r := launch(t, Options{Command: child(t, "env:NCCL_DEBUG"), InitTimeout: time.Minute,
			Env: append(cleanEnv(), "NCCL_DEBUG_SUBSYS=INIT,NET")})
		require.Equal(t, "NCCL_DEBUG=<unset>\n", string(r.stdout))
	})
}

func TestPreLaunchChecksStopBeforeCMD(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "started")
	cmd := child(t, "touch:"+marker)
	t.Run("preflight fail", func(t *testing.T) {
		termLog := filepath.Join(t.TempDir(), "log")
		pre := verdict.NewReport("x", []verdict.Finding{{Rule: "MIG_SPANS_GPUS", Severity: verdict.SeverityFail, Message: "two GPUs"}})
		r := launch(t, Options{Command: cmd, Preflight: &pre, TerminationLog: termLog})
		require.Equal(t, verdict.ExitFail, r.res.ExitCode)
		require.False(t, r.res.Started)
		log, _ := os.ReadFile(termLog)
		require.Contains(t, string(log), "MIG_SPANS_GPUS: two GPUs")
	})
	t.Run("nproc exceeds devices", func(t *testing.T) {
		devs := []verdict.DeviceSummary{{ID: "MIG-aaaa", Kind: "mig"}}
		r := launch(t, Options{Command: []string{"torchrun", "--nproc-per-node=2", "train.py"}, Devices: devs})
		require.Equal(t, verdict.ExitFail, r.res.ExitCode)
		require.False(t, r.res.Started)
		require.Contains(t, r.res.Reason, "NPROC_EXCEEDS_DEVICES: torchrun would start 2 local processes (--nproc-per-node=2) but the rank has 1 MIG device(s)")
		// A wrapper that runs torchrun: PET_NPROC_PER_NODE is what counts.
		wrapper := append([]string{"sh", "-c", `exec "$0" "$@" # torchrun`}, cmd...)
		r = launch(t, Options{Command: wrapper, Devices: devs, Env: append(cleanEnv(), "PET_NPROC_PER_NODE=2")})
		require.Equal(t, verdict.ExitFail, r.res.ExitCode)
		require.Contains(t, r.res.Reason, "(PET_NPROC_PER_NODE=2)")
		r = launch(t, Options{Command: wrapper, Devices: devs, Env: append(cleanEnv(), "PET_NPROC_PER_NODE=1")})
		require.Equal(t, 0, r.res.ExitCode, "one process per device is fine")
		require.FileExists(t, marker)
	})
	t.Run("hostfile", func(t *testing.T) {
		dir := t.TempDir()
		write := func(s string) string {
			p := filepath.Join(dir, strconv.Itoa(len(s)))
			require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
			return p
		}
		open, closed := listen(t), launchertest.ClosedPort(t)
		hf := write("127.0.0.1 slots=2\nworker-1.job.ns.svc slots=2\n")
		res := mapResolver{"worker-1.job.ns.svc": {"127.0.0.1"}}
		// Unreachable: exit 4, the host named.
		r := launch(t, Options{Command: cmd, MPIHostfile: hf, SSHPort: closed, HostsTimeout: 300 * time.Millisecond, Resolver: res})
		require.Equal(t, verdict.ExitTimeout, r.res.ExitCode)
		require.False(t, r.res.Started)
		require.Contains(t, r.res.Reason, "HOST_UNREACHABLE: 2 of 2 MPI host(s) not reachable on port")
		require.Contains(t, r.res.Reason, "127.0.0.1 refuses or drops TCP")
		require.Equal(t, []string{"127.0.0.1", "worker-1.job.ns.svc"}, r.res.Findings[0].Nodes)

		// Too few slots for -np: exit 1 before any connection.
		r = launch(t, Options{Command: []string{"mpirun", "-np", "8", "python", "train.py"}, MPIHostfile: hf, SSHPort: open, Resolver: res})
		require.Equal(t, verdict.ExitFail, r.res.ExitCode)
		require.Contains(t, r.res.Reason, "HOSTFILE_SLOTS: mpirun -np 8 needs 8 slots but hostfile")

		// Invalid: exit 2.
		r = launch(t, Options{Command: cmd, MPIHostfile: write("node slots=two\n")})
		require.Equal(t, verdict.ExitUsage, r.res.ExitCode)
		require.Contains(t, r.res.Reason, "HOSTFILE_INVALID")

		// Reachable: CMD runs.
		r = launch(t, Options{Command: cmd, MPIHostfile: hf, SSHPort: open, Resolver: res, HostsTimeout: 5 * time.Second})
		require.Equal(t, 0, r.res.ExitCode)
		require.True(t, r.res.Started)
		require.FileExists(t, marker)
	})
}

// rankgateProcess starts testbin's "launch" (the launcher behind a flag
// parser and real signal handling) as a separate process.
func rankgateProcess(t *testing.T, flags []string, command []string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	args := append(append([]string{"launch"}, flags...), "--")
	cmd := exec.Command(testbin(t), append(args, command...)...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	cmd.Env = cleanEnv()
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, &errb
}

func exitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Wait()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	return ee.ExitCode()
}

func TestSubreaperEndsProcessesThatLeftTheGroup(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "pids")
	// Grandchildren in sessions of their own, ignoring SIGTERM: outside the
	// process group, only the subreaper finds them.
	cmd, stderr := rankgateProcess(t, []string{"--grace", "200ms"}, child(t, "spawnsid:2:"+pids, "exit:7"))
	require.Equal(t, 7, exitCode(t, cmd), stderr.String())
	for _, pid := range readPids(t, pids) {
		require.True(t, gone(pid), "escaped grandchild %d survived", pid)
	}
}

func TestSignalsToRankgateReachTheGroup(t *testing.T) {
	dir := t.TempDir()
	rec, ready := filepath.Join(dir, "signals"), filepath.Join(dir, "ready")
	cmd, stderr := rankgateProcess(t, []string{"--grace", "1s"}, child(t, "record:"+rec, "touch:"+ready, "hang"))
	waitFile(ready)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	// The child records SIGTERM and carries on; after the grace period
	// rankgate kills it and exits 128+9 like the child.
	require.Equal(t, 128+int(syscall.SIGKILL), exitCode(t, cmd), stderr.String())
	data, err := os.ReadFile(rec)
	require.NoError(t, err)
	require.Equal(t, "terminated\n", string(data))
}

// firstDiff describes where two byte strings part.
func firstDiff(want, got []byte) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	return fmt.Sprintf("first difference at %d: want %q, got %q", i, want[i:min(i+40, len(want))], got[i:min(i+200, len(got))])
}

func TestFatalLineOfACMDThatExitsAtOnceIsTheReason(t *testing.T) {
	termLog := filepath.Join(t.TempDir(), "termination-log")
	// The rank prints the CUDA error and exits 1 before rankgate can act.
	r := launch(t, Options{Command: child(t, "replayerr:"+fixture20, "exit:1"), InitTimeout: time.Minute, TerminationLog: termLog})
	require.Equal(t, 1, r.res.ExitCode, "CMD's own code")
	require.Contains(t, r.res.Reason, "NCCL_FATAL: fatal line during NCCL init: THCudaCheck FAIL")
	log, err := os.ReadFile(termLog)
	require.NoError(t, err)
	require.Equal(t, r.res.Reason, string(log))
	require.Contains(t, r.stderr, "rankgate: FAIL NCCL_FATAL")
}

func TestSignalWhileWaitingForHostsEndsTheLaunch(t *testing.T) {
	hf := filepath.Join(t.TempDir(), "hostfile")
	require.NoError(t, os.WriteFile(hf, []byte("127.0.0.1 slots=1\n"), 0o644))
	sigs := make(chan os.Signal, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		sigs <- syscall.SIGTERM
	}()
	r := launch(t, Options{Command: []string{"true"}, MPIHostfile: hf, SSHPort: launchertest.ClosedPort(t), HostsTimeout: time.Minute, Signals: sigs})
	require.Equal(t, 128+int(syscall.SIGTERM), r.res.ExitCode)
	require.False(t, r.res.Started)
	require.Less(t, r.duration, 10*time.Second)
	require.Contains(t, r.stderr, "terminated while waiting for the MPI hosts; CMD not started")
}
