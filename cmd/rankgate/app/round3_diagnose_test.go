//go:build !rankgate_node

package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

// TestDiagnoseBoundDRAPod: a bound pod whose devices come through DRA
// claims is said to be one, not "nothing to diagnose".
func TestDiagnoseBoundDRAPod(t *testing.T) {
	code, out, errOut := run(t, nil, "diagnose", "--offline", "-f", filepath.Join("testdata", "inputs", "pod_dra-gpu-test7_bound-pending_variant.yaml"), "-o", "json")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	require.NotContains(t, errOut, "nothing to diagnose")
	require.Contains(t, out, verdict.RuleDRANotJudged)
	require.Contains(t, out, "DRA resource claims (gpu0, gpu1)")

	// Running: nothing waits, and the pod is not called no GPU pod.
	data, err := os.ReadFile(filepath.Join("testdata", "inputs", "pod_dra-gpu-test7_bound-pending_variant.yaml"))
	require.NoError(t, err)
	running := filepath.Join(t.TempDir(), "running.yaml")
	require.NoError(t, os.WriteFile(running, []byte(strings.Replace(string(data), "phase: Pending", "phase: Running", 1)), 0o600))
	code, _, errOut = run(t, nil, "diagnose", "--offline", "-f", running)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "1 pod(s) with DRA resource claims are bound and running")
}
