package app

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate/gatetest"
	"github.com/rankgate/rankgate/launcher/launchertest"
	"github.com/rankgate/rankgate/verdict"
)

// closedPort is a local address nothing listens on.
func closedPort(t *testing.T) string {
	return "127.0.0.1:" + strconv.Itoa(launchertest.ClosedPort(t))
}

func TestInitExitCodes(t *testing.T) {
	dir := t.TempDir()
	certs, err := gatetest.WriteCerts(dir, "127.0.0.1")
	require.NoError(t, err)
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte("x"), 0o600))
	term := filepath.Join(dir, "termination-log")
	url := "https://" + closedPort(t)
	rank := []string{"--sample", "a100-full", "--devices", "0", "--termination-log", term}
	pod := map[string]string{"POD_NAME": "j-worker-0", "POD_NAMESPACE": "ml"}

	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string
	}{
		{"no pod identity", nil, []string{"init", "--gate-url", url}, verdict.ExitUsage, "POD_NAME"},
		{"no gate URL", pod, []string{"init"}, verdict.ExitUsage, "--gate-url"},
		{"gate URL not https", pod, []string{"init", "--gate-url", "ftp://x"}, verdict.ExitUsage, "--gate-url"},
		{"CA file missing", pod, []string{"init", "--gate-url", url, "--ca-file", filepath.Join(dir, "nope")}, verdict.ExitEnvironment, "CA file"},
		{"bad inventory", pod, []string{"init", "--gate-url", url, "--ca-file", certs.CAFile, "--token-file", tok, "--sample", "nope"}, verdict.ExitUsage, "unknown sample"},
		// The gate never answers: retry until --timeout, then exit 4 with
		// the reason in the termination log.
		{"gate unreachable", pod, append([]string{"init", "--gate-url", url, "--ca-file", certs.CAFile, "--token-file", tok, "--timeout", "2s"}, rank...),
			verdict.ExitTimeout, "no gang verdict within --timeout 2s"},
		// The rank fails its own rules: exit 1 with its reason even though
		// the gate cannot confirm.
		{"rank fails locally", pod, []string{"init", "--gate-url", url, "--ca-file", certs.CAFile, "--token-file", tok, "--timeout", "2s",
			"--sample", "h100-mig", "--devices", "0:0,1:0", "--termination-log", term}, verdict.ExitFail, "MIG_SPANS_GPUS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_ = os.Remove(term)
			code, out, stderr := run(t, tc.env, tc.args...)
			require.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
			msg := stderr
			if b, err := os.ReadFile(term); err == nil {
				msg += string(b)
			}
			require.Contains(t, msg, tc.want)
		})
	}
}
