//go:build !rankgate_node

package app

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
