package launcher

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/launcher/launchertest"
)

// Only 127.0.0.1 is ever dialled; names resolve through mapResolver.

type mapResolver map[string][]string

func (m mapResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	if a, ok := m[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// listen opens a TCP listener on 127.0.0.1 that accepts and closes.
func listen(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

func TestWaitHostsReachable(t *testing.T) {
	port := listen(t)
	res := mapResolver{"worker-0.job.ns.svc": {"127.0.0.1"}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fails := waitHosts(ctx, []string{"127.0.0.1", "worker-0.job.ns.svc"}, port, res, &net.Dialer{})
	require.Empty(t, fails)
}

func TestWaitHostsUnreachableAndUnresolvable(t *testing.T) {
	port := launchertest.ClosedPort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	fails := waitHosts(ctx, []string{"127.0.0.1", "missing-worker.job.ns.svc"}, port, mapResolver{}, &net.Dialer{})
	require.Less(t, time.Since(start), 3*time.Second)
	require.Len(t, fails, 2)
	require.Equal(t, "127.0.0.1", fails[0].host)
	require.Equal(t, "connect", fails[0].stage)
	require.ErrorContains(t, fails[0].err, "refused")
	require.Equal(t, "missing-worker.job.ns.svc", fails[1].host)
	require.Equal(t, "resolve", fails[1].stage)
	require.Contains(t, fails[1].String(), "does not resolve")
}

func TestWaitHostsRetriesUntilTheHostComesUp(t *testing.T) {
	port := launchertest.ClosedPort(t)
	go func() {
		time.Sleep(200 * time.Millisecond)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			return // the port was taken meanwhile; the test then fails loudly
		}
		t.Cleanup(func() { l.Close() })
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.Empty(t, waitHosts(ctx, []string{"127.0.0.1"}, port, mapResolver{}, &net.Dialer{}))
}
