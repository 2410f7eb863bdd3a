package launchertest

import (
	"net"
	"testing"
)

// ClosedPort returns a 127.0.0.1 port that nothing listens on (it was
// free a moment ago), for "peer unreachable" cases.
func ClosedPort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		tb.Fatalf("close: %v", err)
	}
	return port
}
