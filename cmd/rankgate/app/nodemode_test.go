package app

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

// TestPreflightNodeMode: pasted outputs with no allocation run node mode
// (exit 0 for a healthy MIG node, which rank mode failed with
// MIG_MULTIPLE_PER_PROCESS); --devices keeps rank mode.
func TestPreflightNodeMode(t *testing.T) {
	const fixture = "../../../testdata/fixtures/nvidia-smi/12_smi-L_a100-sxm4-80gb_7x1g.10gb_datadog33120.txt"
	code, out, errOut := run(t, nil, "preflight", "--inventory", fixture, "-o", "json")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	r := decodeReport(t, out)
	require.Equal(t, "node", r.Mode)
	require.Contains(t, r.Subject, "node mode")
	require.Empty(t, r.Findings)
	require.Len(t, r.Devices, 7)

	code, out, _ = run(t, nil, "preflight", "--inventory", fixture, "--devices", "0:0,0:1", "-o", "json")
	require.Equal(t, 1, code)
	r = decodeReport(t, out)
	require.Equal(t, "rank", r.Mode)
	require.Equal(t, verdict.RuleMIGMultiplePerProcess, r.Findings[0].Rule)

	code, out, _ = run(t, map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}, "preflight", "--inventory", fixture, "-o", "json")
	require.Equal(t, 1, code, "an allocation in the environment is a rank")
	require.Equal(t, "rank", decodeReport(t, out).Mode)
}
