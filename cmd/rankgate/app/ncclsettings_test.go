package app

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

// TestPreflightEnvFile: preflight --env-file judges the file's NCCL
// settings against the rank's devices; a file that is not NAME=VALUE
// lines is bad input.
func TestPreflightEnvFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	bad := write("bad.env", "# two ranks on MIG instances of GPU 0\nexport NCCL_VERSION=2.31.2\nNCCL_MULTI_RANK_GPU_ENABLE=true\n")
	code, out, errs := run(t, nil, "preflight", "--sample", "h100-mig", "--devices", "0:0,0:1", "--env-file", bad, "-o", "json")
	require.Equal(t, verdict.ExitFail, code, errs)
	r := decodeReport(t, out)
	require.Contains(t, r.RuleIDs(), verdict.RuleNCCLMultiRankGPU)

	good := write("good.env", "NCCL_VERSION=2.31.2\nNCCL_MULTI_RANK_GPU_ENABLE=1\n")
	_, out, errs = run(t, nil, "preflight", "--sample", "h100-mig", "--devices", "0:0,0:1", "--env-file", good, "-o", "json")
	r = decodeReport(t, out)
	require.NotContains(t, r.RuleIDs(), verdict.RuleNCCLMultiRankGPU, errs)

	code, _, errs = run(t, nil, "preflight", "--sample", "h100-mig", "--devices", "0:0", "--env-file", write("broken.env", "NCCL-DEBUG=INFO\n"))
	require.Equal(t, verdict.ExitUsage, code)
	require.Contains(t, errs, "line 1")
}
