//go:build linux

package app

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rankgate/rankgate/verdict"
	"github.com/stretchr/testify/require"
)

// buildRankgate builds the binary these tests are compiled into (full, or
// the node build with -tags rankgate_node).
func buildRankgate(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rankgate")
	args := []string{"build", "-o", bin}
	if !hasDiagnose() {
		args = append(args, "-tags", "rankgate_node")
	}
	out, err := exec.Command("go", append(args, "..")...).CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// proc is rankgate running as a child process.
type proc struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan struct{}
}

func start(t *testing.T, bin string, stdin *os.File, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "RANKGATE_CONFIG=")
	p.cmd.Stdin = stdin
	p.cmd.Stderr = &p.stderr
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait returns the exit code, failing the test after limit.
func (p *proc) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		t.Fatalf("rankgate %v still running after %s; stderr:\n%s", p.cmd.Args[1:], limit, p.stderr.String())
		return -1
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitReadingStdin waits until a thread of pid is blocked in read(0, ...)
// (/proc/PID/task/*/syscall starts with "0 0x0 "): the signal then lands
// while the read blocks, however slowly a loaded machine started it.
func waitReadingStdin(t *testing.T, pid int) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < 20*time.Second {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
		readable := false
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			readable = readable || err == nil
			if err == nil && strings.HasPrefix(string(b), "0 0x0 ") {
				return
			}
		}
		if !readable && time.Since(start) > 2*time.Second {
			return // no /proc/PID/task/*/syscall here (no ptrace access): waited 2 s
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("pid %d never blocked reading standard input", pid)
}

// stdinPipe is a pipe whose writing end stays open: a read of it blocks.
func stdinPipe(t *testing.T) *os.File {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	t.Cleanup(func() { r.Close(); w.Close() })
	return r
}

func TestBinary(t *testing.T) {
	bin := buildRankgate(t)

	t.Run("a read of stdin ends on SIGTERM", func(t *testing.T) {
		for _, tc := range []struct {
			sig  syscall.Signal
			code int
		}{{syscall.SIGTERM, 143}, {syscall.SIGINT, 130}} {
			p := start(t, bin, stdinPipe(t), "preflight", "--inventory", "-")
			waitReadingStdin(t, p.cmd.Process.Pid)
			require.False(t, p.exited(), p.stderr.String())
			require.NoError(t, p.cmd.Process.Signal(tc.sig))
			require.Equal(t, tc.code, p.wait(t, 10*time.Second), p.stderr.String())
			require.Contains(t, p.stderr.String(), "reading stopped: context canceled")
		}
	})

	t.Run("a named pipe is refused at once", func(t *testing.T) {
		args := [][]string{{"inspect", "--inventory", fifo(t)}, {"preflight", "--sample", "a100-full", "--known-bad-drivers", fifo(t)}}
		if hasDiagnose() {
			args = append(args, []string{"diagnose", "--offline", "-f", fifo(t)})
		}
		for _, a := range args {
			p := start(t, bin, nil, a...)
			require.Equal(t, verdict.ExitUsage, p.wait(t, 10*time.Second), p.stderr.String())
			require.Contains(t, p.stderr.String(), ": not a regular file (a named pipe)")
		}
	})

	t.Run("/dev/zero: exit 2, bounded memory", func(t *testing.T) {
		zero, err := os.Open("/dev/zero")
		require.NoError(t, err)
		defer zero.Close()
		type zeroRun struct {
			args  []string
			stdin *os.File
			want  string
		}
		runs := []zeroRun{
			{[]string{"preflight", "--sample", "a100-full", "--known-bad-drivers", "/dev/zero"}, nil, "known-bad driver table: /dev/zero: not a regular file"},
			{[]string{"preflight", "--sample", "a100-full", "--catalog", "/dev/zero"}, nil, "MIG profile catalog: /dev/zero: not a regular file"},
			{[]string{"inspect", "--inventory", "-"}, zero, "standard input: inventory: larger than 16 MiB"},
		}
		if hasDiagnose() {
			runs = append(runs,
				zeroRun{[]string{"diagnose", "--offline", "-f", "/dev/zero"}, nil, "/dev/zero: not a regular file"},
				zeroRun{[]string{"diagnose", "--offline", "-f", "-"}, zero, "standard input: larger than 64 MiB"})
		}
		for _, r := range runs {
			p := start(t, bin, r.stdin, r.args...)
			require.Equal(t, verdict.ExitUsage, p.wait(t, 30*time.Second), p.stderr.String())
			require.Contains(t, p.stderr.String(), r.want)
			rss := p.cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB
			t.Logf("rankgate %s: peak RSS %d MiB", strings.Join(r.args, " "), rss>>10)
			require.Less(t, rss, int64(1<<20), "peak RSS over 1 GiB")
		}
	})

	// launch forwards every signal to CMD's group and ends it within
	// --grace: a second SIGTERM must not make rankgate exit and leave
	// CMD's processes behind.
	t.Run("launch forwards a second SIGTERM instead of exiting", func(t *testing.T) {
		pidFile := filepath.Join(t.TempDir(), "pid")
		p := &proc{cmd: exec.Command(bin, "launch", "--no-preflight", "--init-timeout", "0", "--grace", "1s", "--",
			"sh", "-c", `trap "" TERM; echo $$ > `+pidFile+`; echo ready; exec sleep 30`), done: make(chan struct{})}
		p.cmd.Env = append(os.Environ(), "RANKGATE_CONFIG=")
		p.cmd.Stderr = &p.stderr
		out, err := p.cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, p.cmd.Start())
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "ready\n", line)
		go func() { _, _ = bufio.NewReader(out).ReadString(0); _ = p.cmd.Wait(); close(p.done) }()
		t.Cleanup(func() { _ = p.cmd.Process.Kill() })

		start := time.Now()
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		time.Sleep(300 * time.Millisecond)
		require.False(t, p.exited(), "launch exited on the second SIGTERM while CMD was alive: %s", p.stderr.String())
		require.Equal(t, 128+int(syscall.SIGKILL), p.wait(t, 10*time.Second), p.stderr.String())
		require.GreaterOrEqual(t, time.Since(start), time.Second, "CMD ignores SIGTERM: only the grace period's SIGKILL ends it")
		data, err := os.ReadFile(pidFile)
		require.NoError(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		require.NoError(t, err)
		require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "CMD outlived launch")
	})
}

func hasDiagnose() bool {
	for _, c := range (&App{}).newRootCommand().Commands() {
		if c.Name() == "diagnose" {
			return true
		}
	}
	return false
}
