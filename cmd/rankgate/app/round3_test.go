package app

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

const smiTestdata = "../../../topology/smi/testdata/"

// TestPreflightLostGPUPaste: a pasted nvidia-smi whose GPU cannot be
// opened is a health failure (exit 1, GPU_LOST naming the bus ID), not bad
// input (exit 2), alone and among other GPUs' rows.
func TestPreflightLostGPUPaste(t *testing.T) {
	for _, f := range []string{"handle_unknown-error_syno22.txt", "table_2xrtx-a4000_gpu0-lost_variant-of-nvct189.txt"} {
		t.Run(f, func(t *testing.T) {
			code, out, errOut := run(t, nil, "preflight", "--inventory", smiTestdata+f, "-o", "json")
			require.Equal(t, 1, code, "%s\n%s", out, errOut)
			r := decodeReport(t, out)
			require.Equal(t, "node", r.Mode)
			require.Equal(t, verdict.RuleGPULost, r.Findings[0].Rule)
			require.Contains(t, r.Findings[0].Message, "00000000:")
		})
	}
}

// TestPreflightNVLinkStatusPaste: nvlink -s with inactive links fails with
// NVLINK_DOWN; with the node's -L next to it all links up pass (the
// elided GPUs of the paste warn).
func TestPreflightNVLinkStatusPaste(t *testing.T) {
	code, out, errOut := run(t, nil, "preflight", "--inventory", smiTestdata+"nvlink-s_v100-sxm2_links-3-5-inactive_azhpc73.txt", "-o", "json")
	require.Equal(t, 1, code, "%s\n%s", out, errOut)
	r := decodeReport(t, out)
	require.Equal(t, verdict.RuleNVLinkDown, r.Findings[0].Rule)

	code, out, errOut = run(t, nil, "preflight", "--inventory", smiTestdata+"nvlink-s_gb200_all-up_k8stestinfra371.txt", "-o", "json")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	r = decodeReport(t, out)
	require.Equal(t, verdict.VerdictWarn, r.Verdict)
	require.Equal(t, verdict.RuleInputIncomplete, r.Findings[0].Rule)
}
