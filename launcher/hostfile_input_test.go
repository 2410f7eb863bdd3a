//go:build linux

package launcher

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rankgate/rankgate/verdict"
	"github.com/stretchr/testify/require"
)

// A hostfile that is a named pipe or a device, or too large, is
// HOSTFILE_INVALID at once: opening a FIFO would wait for a writer forever.
func TestHostfileInputIsBounded(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "started")
	fifo := filepath.Join(dir, "hostfile")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	big := filepath.Join(dir, "big")
	f, err := os.Create(big)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(MaxHostfileSize+1))
	require.NoError(t, f.Close())
	for _, tc := range []struct{ path, want string }{
		{fifo, "MPI hostfile " + fifo + ": not a regular file (a named pipe)"},
		{"/dev/zero", "MPI hostfile /dev/zero: not a regular file (a character device)"},
		{big, "MPI hostfile " + big + ": larger than 4 MiB"},
		{filepath.Join(dir, "absent"), "MPI hostfile " + filepath.Join(dir, "absent") + ": no such file or directory"},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			r := launch(t, Options{Command: child(t, "touch:"+marker), MPIHostfile: tc.path, HostsTimeout: time.Minute})
			require.Equal(t, verdict.ExitUsage, r.res.ExitCode)
			require.False(t, r.res.Started)
			require.Contains(t, r.res.Reason, "HOSTFILE_INVALID: "+tc.want)
			require.Less(t, r.duration, 10*time.Second)
			require.NoFileExists(t, marker)
		})
	}
}
