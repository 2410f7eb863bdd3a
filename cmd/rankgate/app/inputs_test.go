//go:build unix

package app

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/configs"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/offline"
	"github.com/rankgate/rankgate/verdict"
)

// runBounded is run with stdin and ctx, failing the test if the command
// does not return within 20 s (a FIFO or /dev/zero used to block it).
func runBounded(t *testing.T, ctx context.Context, stdin io.Reader, args ...string) (int, string, string) {
	t.Helper()
	run(t, nil, "--version") // clears the RANKGATE_* environment
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		code := Run(ctx, Streams{In: stdin, Out: &out, Err: &errb}, args)
		done <- result{code, out.String(), errb.String()}
	}()
	select {
	case r := <-done:
		return r.code, r.out, r.err
	case <-time.After(20 * time.Second):
		t.Fatalf("rankgate %s did not return within 20 s", strings.Join(args, " "))
		return 0, "", ""
	}
}

// sparse makes a file of size bytes without writing them.
func sparse(t *testing.T, name string, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	f, err := os.Create(p)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	require.NoError(t, f.Close())
	return p
}

func fifo(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(p, 0o600))
	return p
}

func TestFileInputsAreBounded(t *testing.T) {
	pipe, dir := fifo(t), t.TempDir()
	bigTable := sparse(t, "table.yaml", preflight.MaxDriverTableSize+1)
	bigCatalog := sparse(t, "catalog.yaml", topology.MaxCatalogSize+1)
	bigInventory := sparse(t, "smi.txt", offline.MaxFileSize+1)
	bigConfig := sparse(t, "rankgate.yaml", maxConfigSize+1)
	sample := []string{"preflight", "--sample", "a100-full"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"driver table /dev/zero", append(sample, "--known-bad-drivers", "/dev/zero"), "known-bad driver table: /dev/zero: not a regular file (a character device): give a regular file"},
		{"driver table fifo", append(sample, "--known-bad-drivers", pipe), "known-bad driver table: " + pipe + ": not a regular file (a named pipe)"},
		{"driver table too big", append(sample, "--known-bad-drivers", bigTable), bigTable + ": larger than 1 MiB"},
		{"catalog /dev/zero", append(sample, "--catalog", "/dev/zero"), "MIG profile catalog: /dev/zero: not a regular file (a character device)"},
		{"catalog fifo", []string{"inspect", "--sample", "a100-full", "--catalog", pipe}, "MIG profile catalog: " + pipe + ": not a regular file (a named pipe)"},
		{"catalog too big", append(sample, "--catalog", bigCatalog), bigCatalog + ": larger than 1 MiB"},
		{"catalog from stdin", append(sample, "--catalog", "-"), "MIG profile catalog: standard input: not accepted for this input: give a file"},
		{"inventory fifo", []string{"inspect", "--inventory", pipe}, pipe + ": inventory: not a regular file (a named pipe): give a regular file, or - to read standard input"},
		{"inventory fifo, preflight", []string{"preflight", "--inventory", pipe}, pipe + ": inventory: not a regular file (a named pipe)"},
		{"inventory /dev/zero", []string{"preflight", "--inventory", "/dev/zero"}, "/dev/zero: inventory: not a regular file (a character device)"},
		{"inventory directory", []string{"inspect", "--inventory", dir}, dir + ": inventory: not a regular file (a directory)"},
		{"inventory too big", []string{"inspect", "--inventory", bigInventory}, bigInventory + ": inventory: larger than 16 MiB"},
		{"config /dev/zero", []string{"inspect", "--sample", "a100-full", "--config", "/dev/zero"}, "config file: /dev/zero: not a regular file (a character device)"},
		{"config fifo", []string{"inspect", "--sample", "a100-full", "--config", pipe}, "config file: " + pipe + ": not a regular file (a named pipe)"},
		{"config too big", []string{"inspect", "--sample", "a100-full", "--config", bigConfig}, bigConfig + ": larger than 1 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runBounded(t, t.Context(), strings.NewReader(""), tc.args...)
			require.Equal(t, verdict.ExitUsage, code, stderr)
			require.Contains(t, stderr, tc.want)
		})
	}
}

// A file of exactly the limit is read: the bound refuses only what is over.
func TestInventoryAtTheLimitIsRead(t *testing.T) {
	snap, ok := configs.Sample("h100-mig")
	require.True(t, ok)
	p := filepath.Join(t.TempDir(), "node.json")
	padded := append(append([]byte{}, snap...), bytes.Repeat([]byte(" "), offline.MaxFileSize-len(snap))...)
	require.NoError(t, os.WriteFile(p, padded, 0o644))
	code, out, stderr := runBounded(t, t.Context(), strings.NewReader(""), "inspect", "--inventory", p)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "3g.40gb")

	require.NoError(t, os.WriteFile(p, append(padded, ' '), 0o644))
	code, _, stderr = runBounded(t, t.Context(), strings.NewReader(""), "inspect", "--inventory", p)
	require.Equal(t, verdict.ExitUsage, code)
	require.Contains(t, stderr, "larger than 16 MiB")
}

func TestInventoryFromStdin(t *testing.T) {
	snap, ok := configs.Sample("h100-mig")
	require.True(t, ok)
	code, out, stderr := runBounded(t, t.Context(), bytes.NewReader(snap), "inspect", "--inventory", "-")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "3g.40gb")

	// Standard input is bounded too: /dev/zero fails at the limit.
	zero, err := os.Open("/dev/zero")
	require.NoError(t, err)
	defer zero.Close()
	code, _, stderr = runBounded(t, t.Context(), zero, "preflight", "--inventory", "-")
	require.Equal(t, verdict.ExitUsage, code)
	require.Contains(t, stderr, "rankgate: standard input: inventory: larger than 16 MiB, the most rankgate reads from this input")
}

// A command blocked reading standard input returns when its context ends
// (Main cancels it on SIGINT or SIGTERM).
func TestStdinReadEndsWithTheContext(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithCancel(t.Context())
	var canceled atomic.Bool
	time.AfterFunc(200*time.Millisecond, func() { canceled.Store(true); cancel() })
	code, _, stderr := runBounded(t, ctx, pr, "inspect", "--inventory", "-")
	require.True(t, canceled.Load(), "returned before the context ended")
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "rankgate: standard input: reading stopped: context canceled")
}
