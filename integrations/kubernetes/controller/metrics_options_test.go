package controller

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// /metrics is served in clear only where nothing but this host can reach
// it; anywhere else over HTTPS behind the API server's authentication and
// authorization.
func TestMetricsOptionsSecureUnlessLoopback(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		secure bool
	}{
		{":8080", true},
		{"0.0.0.0:8080", true},
		{"[::]:8080", true},
		{"10.1.2.3:8080", true},
		{"rankgate.example:8080", true},
		{"127.0.0.1:8080", false},
		{"127.0.0.2:8080", false},
		{"localhost:8080", false},
		{"[::1]:8080", false},
		{"0", false}, // disabled
	} {
		m := metricsOptions(Options{MetricsAddr: tc.addr, CertDir: "/etc/rankgate/tls"})
		require.Equal(t, tc.addr, m.BindAddress)
		require.Equal(t, tc.secure, m.SecureServing, tc.addr)
		require.Equal(t, tc.secure, m.FilterProvider != nil, tc.addr)
		if tc.secure {
			require.Equal(t, "/etc/rankgate/tls", m.CertDir, "the gate's certificate serves /metrics")
		}
	}
}
