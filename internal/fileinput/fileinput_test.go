package fileinput

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func write(t *testing.T, n int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "in.txt")
	require.NoError(t, os.WriteFile(p, bytes.Repeat([]byte("x"), n), 0o644))
	return p
}

func requireErr(t *testing.T, err, sentinel error, contains ...string) {
	t.Helper()
	require.ErrorIs(t, err, sentinel)
	var e *Error
	require.ErrorAs(t, err, &e)
	for _, s := range contains {
		require.Contains(t, err.Error(), s)
	}
}

func TestReadFileLimit(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		size  int
		limit int64
		ok    bool
	}{
		{"empty", 0, 10, true},
		{"under", 9, 10, true},
		{"exactly the limit", 10, 10, true},
		{"one byte over", 11, 10, false},
		{"far over", 1 << 20, 1 << 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := write(t, tc.size)
			data, err := ReadFile(ctx, p, nil, tc.limit)
			if tc.ok {
				require.NoError(t, err)
				require.Len(t, data, tc.size)
				return
			}
			requireErr(t, err, ErrTooLarge, p, "larger than "+Size(tc.limit))
			require.Nil(t, data)
		})
	}
}

// A file whose size says nothing (/proc) or that grows after the stat is
// bounded by the read itself.
func TestReadFileBoundsTheReadNotOnlyTheSize(t *testing.T) {
	p := write(t, 10)
	r, err := Open(context.Background(), p, nil, 10)
	require.NoError(t, err)
	defer r.Close()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte("grown"))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	data, err := io.ReadAll(r)
	requireErr(t, err, ErrTooLarge)
	require.Len(t, data, 10, "bytes up to the limit are handed out, never more")

	// size 0 in stat, content on read
	if _, err := os.Stat("/proc/self/status"); err == nil {
		data, err := ReadFile(context.Background(), "/proc/self/status", nil, 1<<20)
		require.NoError(t, err)
		require.Contains(t, string(data), "Name:")
		_, err = ReadFile(context.Background(), "/proc/self/status", nil, 16)
		requireErr(t, err, ErrTooLarge, "/proc/self/status", "16 bytes")
	}
}

func TestNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(fifo, link))
	for _, tc := range []struct {
		path, what string
	}{
		{fifo, "a named pipe"},
		{link, "a named pipe"},
		{dir, "a directory"},
		{"/dev/zero", "a character device"},
		{"/dev/null", "a character device"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := ReadFile(context.Background(), tc.path, strings.NewReader(""), 1<<20); done <- err }()
			select {
			case err := <-done:
				requireErr(t, err, ErrNotRegular, tc.path, "not a regular file ("+tc.what+")", "or - to read standard input")
			case <-time.After(5 * time.Second):
				t.Fatal("blocked")
			}
		})
	}
	// Without stdin, the message does not offer "-".
	_, err := ReadFile(context.Background(), fifo, nil, 1<<20)
	require.NotContains(t, err.Error(), "standard input")
}

// A symlink to a regular file (Kubernetes mounts ConfigMaps, Secrets and
// projected tokens so) is read.
func TestSymlinkToRegularFile(t *testing.T) {
	p := write(t, 3)
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(p, link))
	data, err := ReadFile(context.Background(), link, nil, 3)
	require.NoError(t, err)
	require.Equal(t, "xxx", string(data))
}

func TestMissingFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "absent.yaml")
	_, err := ReadFile(context.Background(), p, nil, 10)
	requireErr(t, err, fs.ErrNotExist, p+": no such file or directory")
}

func TestStdin(t *testing.T) {
	ctx := context.Background()
	data, err := ReadFile(ctx, "-", strings.NewReader("hello"), 5)
	require.NoError(t, err)
	require.Equal(t, "hello", string(data))

	_, err = ReadFile(ctx, "-", strings.NewReader("hello!"), 5)
	requireErr(t, err, ErrTooLarge, "standard input: larger than 5 bytes")

	_, err = ReadFile(ctx, "-", nil, 5)
	requireErr(t, err, ErrStdinRefused)

	// /dev/zero on standard input: bounded, fails at the limit.
	zero, err := os.Open("/dev/zero")
	require.NoError(t, err)
	defer zero.Close()
	data, err = ReadFile(ctx, "-", zero, 1<<20)
	requireErr(t, err, ErrTooLarge, "larger than 1 MiB")
	require.Nil(t, data)
}

// A stream larger than a chunk comes through whole.
func TestStdinManyChunks(t *testing.T) {
	want := bytes.Repeat([]byte("0123456789"), chunkSize/2)
	data, err := ReadFile(context.Background(), "-", bytes.NewReader(want), int64(len(want)))
	require.NoError(t, err)
	require.Equal(t, want, data)
}

func TestStdinCancel(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := ReadFile(ctx, "-", pr, 1<<20); done <- err }()
	_, err := pw.Write([]byte("partial"))
	require.NoError(t, err)
	select {
	case err := <-done:
		t.Fatalf("returned before the end of input or a cancel: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		requireErr(t, err, context.Canceled, "standard input: reading stopped: context canceled")
	case <-time.After(5 * time.Second):
		t.Fatal("the read did not end on cancel")
	}
}

func TestFileCancel(t *testing.T) {
	p := write(t, 10)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := ReadFile(ctx, p, nil, 10)
	require.True(t, errors.Is(err, context.Canceled), err)
}

func TestSize(t *testing.T) {
	require.Equal(t, "16 MiB", Size(16<<20))
	require.Equal(t, "64 KiB", Size(64<<10))
	require.Equal(t, "1500 bytes", Size(1500))
}

// A reader that gives up early (a syntax error in the first document)
// closes the stream: its goroutine ends instead of waiting to hand out the
// next chunk.
func TestStreamCloseStopsThePump(t *testing.T) {
	r, err := Open(context.Background(), "-", bytes.NewReader(make([]byte, 4*chunkSize)), 1<<20)
	require.NoError(t, err)
	_, err = r.Read(make([]byte, 10))
	require.NoError(t, err)
	require.NoError(t, r.Close())
	s := r.(*stream)
	select {
	case _, ok := <-s.chunks: // at most the chunk it was offering, then closed
		if ok {
			_, ok = <-s.chunks
		}
		require.False(t, ok, "the pump still hands out chunks after Close")
	case <-time.After(5 * time.Second):
		t.Fatal("the pump did not stop")
	}
	_, err = r.Read(make([]byte, 10))
	require.ErrorIs(t, err, os.ErrClosed)
}
