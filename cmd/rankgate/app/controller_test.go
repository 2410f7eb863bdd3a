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
	code, _, stderr = run(t, nil, "controller", "--leader-elect=false")
	require.Equal(t, verdict.ExitEnvironment, code, stderr)

	code, out, _ := run(t, nil, "controller", "--help")
	require.Equal(t, 0, code)
	for _, f := range []string{"--kubeconfig", "--gate-addr", "--cert-dir", "--gang-timeout", "--on-fail", "--leader-elect", "--metrics-addr", "--health-addr"} {
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
