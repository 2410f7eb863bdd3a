package preflight

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology"
)

// TestLostGPUFromPaste: nvidia-smi's device-handle failure is GPU_LOST in
// node mode, alone or next to the rows of healthy GPUs, naming the bus ID,
// with the reset and the drain.
func TestLostGPUFromPaste(t *testing.T) {
	for _, f := range []string{"handle_gpu-is-lost_owod81.txt", "table_2xrtx-a4000_gpu0-lost_variant-of-nvct189.txt"} {
		t.Run(f, func(t *testing.T) {
			r := RankRules(RankInput{Inventory: smiNode(t, f), Allocation: nodeAlloc, Mode: ModeNode, Catalog: topology.DefaultCatalog()})
			require.Equal(t, "GPU_LOST/fail", rules(r)[0])
			fd := r.Findings[0]
			require.Contains(t, fd.Message, "GPU 0 (bus 00000000:")
			require.Contains(t, fd.Message, "lost")
			require.Contains(t, fd.Remediation, "`nvidia-smi -r -i 0`")
			require.Contains(t, fd.Remediation, "drain the node")
		})
	}
}
