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

// TestPreflightEnvFileNVLink: NCCL_P2P_DISABLE=1 on two full A100s joined
// by NVLink (the a100-full sample, NV12 between every pair) warns that
// NCCL leaves NVLink unused; on one GPU there is no NVLink to lose.
func TestPreflightEnvFileNVLink(t *testing.T) {
	p := filepath.Join(t.TempDir(), "p2p.env")
	require.NoError(t, os.WriteFile(p, []byte("NCCL_P2P_DISABLE=1\n"), 0o600))
	code, out, errs := run(t, nil, "preflight", "--sample", "a100-full", "--devices", "0,1", "--env-file", p, "-o", "json")
	require.Equal(t, verdict.ExitPass, code, errs)
	r := decodeReport(t, out)
	require.Contains(t, r.RuleIDs(), verdict.RuleNCCLP2PDisabledNVLink, out)
	require.Equal(t, verdict.VerdictWarn, r.Verdict, out)

	_, out, errs = run(t, nil, "preflight", "--sample", "a100-full", "--devices", "0", "--env-file", p, "-o", "json")
	require.NotContains(t, decodeReport(t, out).RuleIDs(), verdict.RuleNCCLP2PDisabledNVLink, errs)
}

// TestPreflightEnvFileNVLSWithoutNVSwitch: NCCL_NVLS_ENABLE=1 judged on
// real `nvidia-smi topo -m` outputs: four L40S joined over PCIe only (AWS
// g6e.12xlarge) have no NVSwitch, so NVLS cannot run; eight A100s all
// joined by NV12 (p4d.24xlarge) may sit on one, so nothing is said.
func TestPreflightEnvFileNVLSWithoutNVSwitch(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nvls.env")
	require.NoError(t, os.WriteFile(p, []byte("NCCL_NVLS_ENABLE=1\n"), 0o600))
	topo := func(name string) string {
		return filepath.Join("..", "..", "..", "testdata", "fixtures", "nvidia-smi", name)
	}

	code, out, errs := run(t, nil, "preflight", "--inventory", topo("07_topo_g6e.12xlarge_4xL40S_pcie-NODE.txt"), "--devices", "0,1", "--env-file", p, "-o", "json")
	require.Equal(t, verdict.ExitPass, code, errs)
	require.Contains(t, decodeReport(t, out).RuleIDs(), verdict.RuleNCCLNVLSNoNVSwitch, out)

	_, out, errs = run(t, nil, "preflight", "--inventory", topo("08_topo_p4d.24xlarge_8xA100_NV12.txt"), "--devices", "0,1", "--env-file", p, "-o", "json")
	r := decodeReport(t, out)
	require.NotContains(t, r.RuleIDs(), verdict.RuleNCCLNVLSNoNVSwitch, errs)
	require.Len(t, r.Devices, 2, out)
	for _, d := range r.Devices {
		require.True(t, d.NVLinkPeer, out)
		require.Nil(t, d.NVSwitch, "NV12 may run to a switch or a bridge: %s", out)
	}
}
