//go:build !rankgate_node

package app

import (
	"path/filepath"
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
}
