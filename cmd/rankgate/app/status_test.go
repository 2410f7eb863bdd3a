//go:build !rankgate_node

package app

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"

	"github.com/rankgate/rankgate/verdict"
)

// An API server that accepts the connection and never answers: status
// gives up after --request-timeout with exit 3 and names the flag.
func TestStatusRequestTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	held := make(chan net.Conn, 16)
	t.Cleanup(func() {
		ln.Close()
		for len(held) > 0 {
			(<-held).Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case held <- c: // held open, never answered
			default:
				c.Close()
			}
		}
	}()
	cfg := filepath.Join(t.TempDir(), "config")
	require.NoError(t, os.WriteFile(cfg, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://`+ln.Addr().String()+`", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u, namespace: ml}}]
current-context: c
`), 0o600))
	start := time.Now()
	code, out, errOut := run(t, nil, "status", "--kubeconfig", cfg, "--request-timeout", "1s")
	require.Equal(t, verdict.ExitEnvironment, code, errOut)
	require.Empty(t, out)
	require.Contains(t, errOut, "the API server did not answer within 1s (--request-timeout)")
	require.Less(t, time.Since(start), 20*time.Second)

	code, _, errOut = run(t, nil, "status", "--kubeconfig", filepath.Join(t.TempDir(), "missing"))
	require.Equal(t, verdict.ExitEnvironment, code)
	require.Contains(t, errOut, "rankgate: kubeconfig:")
}

// -v is kubectl's verbosity, mapped onto the log level; --log-level wins.
func TestVerbosityFlag(t *testing.T) {
	for _, tc := range []struct {
		level     string
		verbosity int
		def, want string
	}{
		{"", 0, "warn", "warn"},
		{"", 1, "warn", "info"},
		{"", 3, "warn", "info"},
		{"", 4, "warn", "debug"},
		{"", 9, "info", "debug"},
		{"error", 6, "warn", "error"},
	} {
		a := &App{root: rootOptions{LogLevel: tc.level, Verbosity: tc.verbosity}}
		require.Equal(t, tc.want, a.logLevel(tc.def), "%+v", tc)
	}
	t.Cleanup(func() { _ = clientVerbosity(0) })
	code, out, errOut := run(t, nil, "-v", "7", "version")
	require.Equal(t, 0, code, errOut)
	require.NotEmpty(t, out)
	require.True(t, bool(klog.V(7).Enabled()), "-v reaches the client libraries' log")
	require.False(t, bool(klog.V(8).Enabled()))
	code, _, errOut = run(t, nil, "-v", "x", "version")
	require.Equal(t, verdict.ExitUsage, code, errOut)
}
