package ncclenv

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

// The settings and allocations of failures people posted (the fixture
// README gives each source): the rules must have caught them before NCCL
// started. Each case also checks that the fixture holds the failure it
// stands for.
func TestRealOutputs(t *testing.T) {
	tests := []struct {
		name    string
		fixture string
		shows   []string
		in      Input
		want    []want
	}{
		{
			// NVIDIA/nccl#1716: NCCL 2.31.2, H200, four ranks in one pod on
			// four 1g.35gb instances of one GPU, NCCL_NVLS_ENABLE=1 in the
			// pod spec, no NCCL_MULTI_RANK_GPU_ENABLE.
			name:    "nccl1716 NVLS and several ranks on one GPU",
			fixture: "40_nccl-errors_h200_4-ranks-on-1g.35gb-same-gpu_nccl1716.txt",
			shows:   []string{`NCCL_NVLS_ENABLE has been set to "1"`, "Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this"},
			in: Input{Scope: ScopeLocal, Ranks: []Rank{{
				Rank: 0, Env: env("NCCL_NVLS_ENABLE", "1"), NCCLVersion: "2.31.2+cuda13.3", DevicesKnown: true,
				Devices: []Device{mig("MIG-1", "GPU-h200"), mig("MIG-2", "GPU-h200"), mig("MIG-3", "GPU-h200"), mig("MIG-4", "GPU-h200")},
			}}},
			want: []want{{verdict.RuleNCCLMultiRankGPU, verdict.SeverityFail}, {verdict.RuleNCCLNVLSOnMIG, verdict.SeverityFail}},
		},
		{
			// NVIDIA/nccl#2428: node A opens erdma_0 and erdma_1, node B
			// only erdma_0; NCCL_IGNORE_NET_MISMATCH=1 on both.
			name:    "nccl2428 ignored NIC mismatch",
			fixture: "41_nccl-hang_2x8xH20_erdma-hca-sets-differ_ignore-net-mismatch_nccl2428.txt",
			shows:   []string{"NET/IB/1", "Unable to open device erdma_1"},
			in: gang(
				withNet(Rank{Rank: 0, Node: "node-a", Env: env("NCCL_IGNORE_NET_MISMATCH", "1"), DevicesKnown: true, Devices: []Device{full("GPU-a0")}}, "erdma_0", "erdma_1"),
				withNet(Rank{Rank: 1, Node: "node-b", Env: env("NCCL_IGNORE_NET_MISMATCH", "1"), DevicesKnown: true, Devices: []Device{full("GPU-b0")}}, "erdma_0"),
			),
			want: []want{{verdict.RuleNCCLIgnoreNetMismatch, verdict.SeverityFail}},
		},
		{
			// NVIDIA/nccl#1837: NCCL_SOCKET_IFNAME=eth2 on a host without eth2.
			name:    "nccl1837 socket interface missing",
			fixture: "42_nccl-error_socket-ifname-eth2-missing_nccl1837.txt",
			shows:   []string{"NCCL_SOCKET_IFNAME set to eth2", "ncclInternalError"},
			in: Input{Scope: ScopeLocal, Ranks: []Rank{
				withIfaces(Rank{Rank: 0, Env: env("NCCL_SOCKET_IFNAME", "eth2"), DevicesKnown: true, Devices: []Device{full("GPU-0")}}, "lo", "eth0", "eth1"),
			}},
			want: []want{{verdict.RuleNCCLSocketIfnameMissing, verdict.SeverityFail}},
		},
		{
			// NVIDIA/nccl#2057: two ranks of one node with P2P and SHM off
			// fall back to NET/Socket and fail init. MIG ranks on one GPU
			// have no P2P, so NCCL_SHM_DISABLE=1 alone puts them there.
			name:    "nccl2057 SHM off where P2P cannot run",
			fixture: "43_nccl-error_1-node-2-gpu_p2p-and-shm-disabled_net-socket-af-unix_nccl2057.txt",
			shows:   []string{"NCCL_SHM_DISABLE=1", "neither AF_INET(2) nor AF_INET6(10)", "internal error"},
			in: Input{Scope: ScopeLocal, Ranks: []Rank{{
				Rank: 0, Env: env("NCCL_SHM_DISABLE", "1", "NCCL_MULTI_RANK_GPU_ENABLE", "1"), NCCLVersion: "2.31.2", DevicesKnown: true,
				Devices: []Device{mig("MIG-1", "GPU-0"), mig("MIG-2", "GPU-0")},
			}}},
			want: []want{{verdict.RuleNCCLSHMDisabledMIG, verdict.SeverityWarn}},
		},
		{
			// mlcommons/training#442: several MIG instances visible to one
			// process; set_device(1) fails with invalid device ordinal. With
			// CUDA_VISIBLE_DEVICES=0,1 over one MIG instance per pod, the
			// second local rank has no device.
			name:    "mlcommons442 device ordinal beyond the allocation",
			fixture: "20_cuda-invalid-device-ordinal_multiple-MIG-visible_mlcommons442.txt",
			shows:   []string{"invalid device ordinal"},
			in:      templates(template("Worker", 2, 1, true, "x", env("NCCL_VERSION", "2.31.2", "CUDA_VISIBLE_DEVICES", "0,1"))),
			want:    []want{{verdict.RuleVisibleDevicesMismatch, verdict.SeverityFail}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "fixtures", "nccl", tc.fixture))
			require.NoError(t, err)
			for _, s := range tc.shows {
				require.Contains(t, string(data), s)
			}
			var got []want
			for _, f := range Check(tc.in) {
				got = append(got, want{f.Rule, f.Severity})
			}
			require.Equal(t, tc.want, got)
		})
	}
}
