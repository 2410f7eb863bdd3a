//go:build !rankgate_node

package app

import (
	"testing"

	"github.com/rankgate/rankgate/verdict"
	"github.com/stretchr/testify/require"
)

func TestControllerFlags(t *testing.T) {
	code, _, stderr := run(t, nil, "controller", "--on-fail", "explode")
	require.Equal(t, verdict.ExitUsage, code)
	require.Contains(t, stderr, "--on-fail")

	// Outside a cluster, without a kubeconfig: an environment failure.
	code, _, stderr = run(t, map[string]string{"HOME": t.TempDir(), "KUBERNETES_SERVICE_HOST": ""}, "controller", "--leader-elect=false")
	require.Equal(t, verdict.ExitEnvironment, code, stderr)
	require.Contains(t, stderr, "rankgate: kubeconfig: no kubeconfig at ")
	// The same connection flags as kubectl's, less -n (the controller's own
	// namespace) and --request-timeout.
	code, _, stderr = run(t, nil, "controller", "--leader-elect=false", "--kubeconfig", "/nonexistent/kc", "--context", "prod")
	require.Equal(t, verdict.ExitEnvironment, code, stderr)
	require.Contains(t, stderr, "/nonexistent/kc")
	code, _, stderr = run(t, nil, "controller", "--request-timeout", "5s")
	require.Equal(t, verdict.ExitUsage, code, stderr)
	require.Contains(t, stderr, "unknown flag: --request-timeout")

	code, out, _ := run(t, nil, "controller", "--help")
	require.Equal(t, 0, code)
	for _, f := range []string{"--kubeconfig", "--context", "--server", "--token", "--as", "--gate-addr", "--cert-dir", "--gang-timeout", "--on-fail", "--leader-elect", "--metrics-addr", "--health-addr"} {
		require.Contains(t, out, f)
	}
	code, out, _ = run(t, nil, "init", "--help")
	require.Equal(t, 0, code)
	for _, f := range []string{"--gate-url", "--ca-file", "--token-file", "--pod-name", "--pod-namespace", "--timeout", "--inventory", "--devices", "--sample"} {
		require.Contains(t, out, f)
	}
}

func TestAdmissionCheckFlag(t *testing.T) {
	for _, bad := range []string{"SHAPE_MISMATCH", "SHAPE_MISMATCH=explode", "NO_SUCH_RULE=deny"} {
		code, _, stderr := run(t, nil, "controller", "--admission-check", bad)
		require.Equal(t, verdict.ExitUsage, code, bad)
		require.Contains(t, stderr, "--admission-check", bad)
	}
	m, err := admissionPolicies([]string{"SHAPE_MISMATCH=warn", " NPROC_EXCEEDS_DEVICES = off"})
	require.NoError(t, err)
	require.EqualValues(t, map[string]string{"SHAPE_MISMATCH": "warn", "NPROC_EXCEEDS_DEVICES": "off"}, toStrings(m))
}

func toStrings[V ~string](m map[string]V) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}

func TestInitResourcesFlags(t *testing.T) {
	for _, bad := range [][]string{
		{"--init-requests", "cpu"},
		{"--init-requests", "cpu=lots"},
		{"--init-limits", "nvidia.com/gpu=1"},
		{"--init-requests", "memory=1Gi"}, // above the default limit
	} {
		code, _, stderr := run(t, nil, append([]string{"controller"}, bad...)...)
		require.Equal(t, verdict.ExitUsage, code, bad)
		require.Contains(t, stderr, "init", bad)
	}
	r, err := initResources(" cpu=50m , memory=64Mi", "memory=256Mi")
	require.NoError(t, err)
	require.Equal(t, "50m", r.Requests.Cpu().String())
	require.Equal(t, "64Mi", r.Requests.Memory().String())
	require.Equal(t, "256Mi", r.Limits.Memory().String())
	require.True(t, r.Limits.Cpu().IsZero(), "no cpu limit when none is given")
}
