//go:build linux

package launcher

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// While the watchdog waits, a progress line each Progress interval: how
// far NCCL init got and the time left; none once CMD is ready. Quiet
// leaves out the "ready after" line too.
func TestInitProgressLines(t *testing.T) {
	cmd := child(t, "start:0:1", "sleep:1100ms", "init:0:1", "sleep:400ms")
	progress := regexp.MustCompile(`(?m)^rankgate: waiting for NCCL init: 0 of 1 local rank\(s\) reported Init COMPLETE, 1 started; 1\ds left until --init-timeout$`)

	r := launch(t, Options{Command: cmd, InitTimeout: 20 * time.Second, Grace: 100 * time.Millisecond, Progress: 250 * time.Millisecond})
	require.NoError(t, r.err)
	require.Equal(t, 0, r.res.ExitCode, r.stderr)
	lines := progress.FindAllStringIndex(r.stderr, -1)
	require.GreaterOrEqual(t, len(lines), 2, r.stderr)
	require.LessOrEqual(t, len(lines), int(r.duration/(250*time.Millisecond))+1, "at most one line per interval:\n%s", r.stderr)
	ready := strings.Index(r.stderr, "rankgate: ready after")
	require.Positive(t, ready, r.stderr)
	require.Less(t, lines[len(lines)-1][0], ready, "no progress line once ready:\n%s", r.stderr)
	require.NotContains(t, r.stderr[ready:], "waiting for NCCL init")

	r = launch(t, Options{Command: cmd, InitTimeout: 20 * time.Second, Grace: 100 * time.Millisecond, Quiet: true})
	require.Equal(t, 0, r.res.ExitCode, r.stderr)
	require.NotContains(t, r.stderr, "waiting for NCCL init")
	require.NotContains(t, r.stderr, "ready after")
	require.True(t, r.res.Ready)
}
