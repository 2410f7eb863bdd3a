package app

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/zapr"
	"go.uber.org/zap"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology/nvmlsource/nvmltest"
	"github.com/rankgate/rankgate/verdict"
)

// --log-level debug shows every NVML call of the discovery with its
// duration, read like 175ms.
func TestDebugLogShowsNVMLCalls(t *testing.T) {
	nvmlLibrary = nvmltest.NewServer(t, nvmltest.DGXA100).Interface()
	t.Cleanup(func() { nvmlLibrary = nil })
	code, out, stderr := run(t, nil, "preflight", "--log-level", "debug", "--devices", "0", "-o", "json")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
	require.Equal(t, verdict.VerdictPass, decodeReport(t, out).Verdict)
	took := regexp.MustCompile(`DEBUG\tnvml: (nvml\w+)\(.*\) took [0-9.]+(ns|µs|ms|s)\n`)
	calls := map[string]bool{}
	for _, m := range took.FindAllStringSubmatch(stderr, -1) {
		calls[m[1]] = true
	}
	for _, fn := range []string{"nvmlInit", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlShutdown"} {
		require.True(t, calls[fn], "no debug line for %s in:\n%s", fn, stderr)
	}

	// At the default level (warn), none of it.
	code, _, stderr = run(t, nil, "preflight", "--devices", "0", "-o", "json")
	require.Equal(t, 0, code)
	require.NotContains(t, stderr, "nvml:")
}

// Durations in log records read like 175ms, not 0.175, in both formats
// and through logr (the controller's).
func TestLogDurationsReadAsDurations(t *testing.T) {
	for format, want := range map[string]string{"json": `"in":"175ms"`, "console": `{"in": "175ms"}`} {
		var b strings.Builder
		log, err := newLogger(&b, "info", format)
		require.NoError(t, err)
		log.Info("retrying", zap.Duration("in", 175*time.Millisecond))
		zapr.NewLogger(log).Info("requeue", "in", 175*time.Millisecond)
		require.Equal(t, 2, strings.Count(b.String(), want), b.String())
	}
}
