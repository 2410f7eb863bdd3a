package ncclenv

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

// Builders for the rule tests.

func env(kv ...string) *Env {
	e := NewEnv(nil)
	for i := 0; i+1 < len(kv); i += 2 {
		e.Set(kv[i], kv[i+1])
	}
	return e
}

func mig(id, parent string) Device { return Device{ID: id, MIG: true, GPUUUID: parent} }
func full(id string) Device        { return Device{ID: id, GPUUUID: id} }

func rank(n int, node string, e *Env, ds ...Device) Rank {
	return Rank{Rank: n, Node: node, Env: e, Devices: ds, DevicesKnown: true, NCCLVersion: "2.31.2"}
}

func template(name string, replicas, gpus int, migReq bool, image string, e *Env) Rank {
	return Rank{Rank: -1, Name: "template " + name, Replicas: replicas, GPUs: gpus, MIGRequested: migReq, Image: image, Env: e}
}

func gang(rs ...Rank) Input      { return Input{Scope: ScopeGang, Ranks: rs} }
func templates(rs ...Rank) Input { return Input{Scope: ScopeTemplate, Ranks: rs} }

type want struct {
	rule string
	sev  verdict.Severity
}

func TestRules(t *testing.T) {
	multi := env("NCCL_MULTI_RANK_GPU_ENABLE", "1")
	clique := uint32(3)
	other := uint32(4)
	nvsw := false
	tests := []struct {
		name string
		in   Input
		want []want
	}{
		// NCCL_MIG_VERSION
		{"mig with old reported NCCL fails", gang(
			Rank{Rank: 0, Env: multi, NCCLVersion: "2.21.5", Devices: []Device{mig("MIG-a", "GPU-1")}, DevicesKnown: true}),
			[]want{{verdict.RuleNCCLMIGVersion, verdict.SeverityFail}}},
		{"mig with old NGC image fails", templates(template("Worker", 1, 1, true, "nvcr.io/nvidia/pytorch:24.05-py3", env())),
			[]want{{verdict.RuleNCCLMIGVersion, verdict.SeverityFail}}},
		{"mig with NCCL_VERSION 2.21.5-1 fails", templates(template("Worker", 1, 1, true, "my/image:latest", env("NCCL_VERSION", "2.21.5-1"))),
			[]want{{verdict.RuleNCCLMIGVersion, verdict.SeverityFail}}},
		{"mig with unknown version warns", templates(template("Worker", 1, 1, true, "my/image:latest", env())),
			[]want{{verdict.RuleNCCLMIGVersion, verdict.SeverityWarn}}},
		{"mig with NCCL 2.31 passes", templates(template("Worker", 1, 1, true, "x", env("NCCL_VERSION", "2.31.2"))), nil},
		{"full GPUs with old NCCL pass", templates(template("Worker", 2, 8, false, "nvcr.io/nvidia/pytorch:24.05-py3", env())), nil},

		// NCCL_MULTI_RANK_GPU_DISABLED
		{"two MIG ranks on one GPU without the setting fail", gang(
			rank(0, "n1", env(), mig("MIG-a", "GPU-1")), rank(1, "n1", env(), mig("MIG-b", "GPU-1"))),
			[]want{{verdict.RuleNCCLMultiRankGPU, verdict.SeverityFail}}},
		{"true is not 1", gang(
			rank(0, "n1", env("NCCL_MULTI_RANK_GPU_ENABLE", "true"), mig("MIG-a", "GPU-1")), rank(1, "n1", env("NCCL_MULTI_RANK_GPU_ENABLE", "true"), mig("MIG-b", "GPU-1"))),
			[]want{{verdict.RuleNCCLMultiRankGPU, verdict.SeverityFail}}},
		{"two MIG ranks on one GPU with the setting pass", gang(
			rank(0, "n1", multi, mig("MIG-a", "GPU-1")), rank(1, "n1", env("NCCL_MULTI_RANK_GPU_ENABLE", "0x1"), mig("MIG-b", "GPU-1"))), nil},
		{"MIG ranks on two GPUs are not this rule's", gang(
			rank(0, "n1", env(), mig("MIG-a", "GPU-1")), rank(1, "n1", env(), mig("MIG-b", "GPU-2"))), nil},
		{"template with several MIG instances in a pod warns", templates(template("Worker", 1, 4, true, "x", env("NCCL_VERSION", "2.31.2"))),
			[]want{{verdict.RuleNCCLMultiRankGPU, verdict.SeverityWarn}}},
		{"template with one MIG instance per pod passes", templates(template("Worker", 4, 1, true, "x", env("NCCL_VERSION", "2.31.2"))), nil},
		{"one pod with two MIG instances of one GPU fails", gang(
			inPod(rank(0, "n1", env(), mig("MIG-a", "GPU-1"), mig("MIG-b", "GPU-1")), "w-0")),
			[]want{{verdict.RuleNCCLMultiRankGPU, verdict.SeverityFail}}},
		{"pods on one GPU are different hosts to NCCL", gang(
			inPod(rank(0, "n1", env(), mig("MIG-a", "GPU-1")), "w-0"), inPod(rank(1, "n1", env(), mig("MIG-b", "GPU-1")), "w-1")), nil},
		{"valueFrom is not judged", func() Input {
			e := env("NCCL_VERSION", "2.31.2")
			e.SetUnresolved("NCCL_MULTI_RANK_GPU_ENABLE")
			return templates(template("Worker", 1, 4, true, "x", e))
		}(), nil},
		{"envFrom may set it: not judged", func() Input {
			e := env("NCCL_VERSION", "2.31.2")
			e.Partial = true
			return templates(template("Worker", 1, 4, true, "x", e))
		}(), nil},

		// NCCL_NVLS_ON_MIG
		{"NVLS forced on MIG fails", gang(
			rank(0, "n1", env("NCCL_MULTI_RANK_GPU_ENABLE", "1", "NCCL_NVLS_ENABLE", "1"), mig("MIG-a", "GPU-1")),
			rank(1, "n1", env("NCCL_MULTI_RANK_GPU_ENABLE", "1", "NCCL_NVLS_ENABLE", "1"), mig("MIG-b", "GPU-1"))),
			[]want{{verdict.RuleNCCLNVLSOnMIG, verdict.SeverityFail}}},
		{"NVLS default on MIG passes", gang(
			rank(0, "n1", env("NCCL_MULTI_RANK_GPU_ENABLE", "1", "NCCL_NVLS_ENABLE", "2"), mig("MIG-a", "GPU-1")),
			rank(1, "n1", env("NCCL_MULTI_RANK_GPU_ENABLE", "1", "NCCL_NVLS_ENABLE", "2"), mig("MIG-b", "GPU-1"))), nil},

		// NCCL_NVLS_NO_NVSWITCH
		{"NVLS forced without NVSwitch warns", gang(
			rank(0, "n1", env("NCCL_NVLS_ENABLE", "1"), Device{ID: "GPU-1", GPUUUID: "GPU-1", NVSwitch: &nvsw})),
			[]want{{verdict.RuleNCCLNVLSNoNVSwitch, verdict.SeverityWarn}}},
		{"NVLS forced where NVSwitch is unknown passes", gang(
			rank(0, "n1", env("NCCL_NVLS_ENABLE", "1"), full("GPU-1"))), nil},

		// NCCL_MNNVL_NO_DOMAIN
		{"MNNVL forced across cliques fails", gang(
			rank(0, "n1", env("NCCL_MNNVL_ENABLE", "1"), Device{ID: "GPU-1", FabricCluster: "c", FabricClique: &clique}),
			rank(1, "n2", env("NCCL_MNNVL_ENABLE", "1"), Device{ID: "GPU-2", FabricCluster: "c", FabricClique: &other})),
			[]want{{verdict.RuleNCCLMNNVLNoDomain, verdict.SeverityFail}}},
		{"MNNVL forced on GPUs without a fabric fails", gang(
			rank(0, "n1", env("NCCL_MNNVL_ENABLE", "1"), full("GPU-1")), rank(1, "n2", env("NCCL_MNNVL_ENABLE", "1"), full("GPU-2"))),
			[]want{{verdict.RuleNCCLMNNVLNoDomain, verdict.SeverityFail}}},
		{"MNNVL forced in one clique passes", gang(
			rank(0, "n1", env("NCCL_MNNVL_ENABLE", "1"), Device{ID: "GPU-1", FabricCluster: "c", FabricClique: &clique}),
			rank(1, "n2", env("NCCL_MNNVL_ENABLE", "1"), Device{ID: "GPU-2", FabricCluster: "c", FabricClique: &clique})), nil},
		{"MNNVL forced on a MIG template fails", templates(template("Worker", 1, 1, true, "x", env("NCCL_VERSION", "2.31.2", "NCCL_MNNVL_ENABLE", "1"))),
			[]want{{verdict.RuleNCCLMNNVLNoDomain, verdict.SeverityFail}}},

		// NCCL_SHM_DISABLED_MIG
		{"SHM off for MIG ranks on one GPU warns", gang(
			rank(0, "n1", env("NCCL_MULTI_RANK_GPU_ENABLE", "1", "NCCL_SHM_DISABLE", "1"), mig("MIG-a", "GPU-1")),
			rank(1, "n1", env("NCCL_MULTI_RANK_GPU_ENABLE", "1", "NCCL_SHM_DISABLE", "1"), mig("MIG-b", "GPU-1"))),
			[]want{{verdict.RuleNCCLSHMDisabledMIG, verdict.SeverityWarn}}},
		{"SHM off on full GPUs is not this rule's", gang(
			rank(0, "n1", env("NCCL_SHM_DISABLE", "1"), full("GPU-1")), rank(1, "n2", env("NCCL_SHM_DISABLE", "1"), full("GPU-2"))), nil},

		// NCCL_P2P_DISABLED_NVLINK
		{"P2P off on NVLinked GPUs warns", gang(
			rank(0, "n1", env("NCCL_P2P_DISABLE", "1"), Device{ID: "GPU-1", NVLinkPeers: true}, Device{ID: "GPU-2", NVLinkPeers: true})),
			[]want{{verdict.RuleNCCLP2PDisabledNVLink, verdict.SeverityWarn}}},
		{"P2P off across nodes of one multi-node NVLink domain warns", gang(
			rank(0, "n1", env("NCCL_P2P_DISABLE", "1"), Device{ID: "GPU-1", FabricCluster: "c", FabricClique: &clique}),
			rank(1, "n2", env("NCCL_P2P_DISABLE", "1"), Device{ID: "GPU-2", FabricCluster: "c", FabricClique: &clique})),
			[]want{{verdict.RuleNCCLP2PDisabledNVLink, verdict.SeverityWarn}}},
		{"P2P off across cliques is not this rule's", gang(
			rank(0, "n1", env("NCCL_P2P_DISABLE", "1"), Device{ID: "GPU-1", FabricCluster: "c", FabricClique: &clique}),
			rank(1, "n2", env("NCCL_P2P_DISABLE", "1"), Device{ID: "GPU-2", FabricCluster: "c", FabricClique: &other})), nil},
		{"P2P off on PCIe GPUs passes", gang(
			rank(0, "n1", env("NCCL_P2P_DISABLE", "1"), full("GPU-1"), full("GPU-2"))), nil},

		// NCCL_IGNORE_NET_MISMATCH
		{"ignore mismatch with differing HCAs fails", gang(
			withNet(rank(0, "a", env("NCCL_IGNORE_NET_MISMATCH", "1"), full("GPU-1")), "erdma_0", "erdma_1"),
			withNet(rank(1, "b", env("NCCL_IGNORE_NET_MISMATCH", "1"), full("GPU-2")), "erdma_0")),
			[]want{{verdict.RuleNCCLIgnoreNetMismatch, verdict.SeverityFail}}},
		{"ignore mismatch with equal HCAs passes", gang(
			withNet(rank(0, "a", env("NCCL_IGNORE_NET_MISMATCH", "1"), full("GPU-1")), "mlx5_0"),
			withNet(rank(1, "b", env("NCCL_IGNORE_NET_MISMATCH", "1"), full("GPU-2")), "mlx5_0")), nil},
		{"ignore mismatch in a template warns", templates(template("Worker", 2, 8, false, "x", env("NCCL_IGNORE_NET_MISMATCH", "1"))),
			[]want{{verdict.RuleNCCLIgnoreNetMismatch, verdict.SeverityWarn}}},

		// NCCL_SETTINGS_DIFFER
		{"different protocols per replica type warn", templates(
			template("Master", 1, 8, false, "x", env("NCCL_PROTO", "Simple")), template("Worker", 3, 8, false, "x", env("NCCL_PROTO", "LL128"))),
			[]want{{verdict.RuleNCCLSettingsDiffer, verdict.SeverityWarn}}},
		{"different debug settings pass", templates(
			template("Master", 1, 8, false, "x", env("NCCL_DEBUG", "INFO", "FI_PROVIDER", "efa")), template("Worker", 3, 8, false, "x", env("FI_PROVIDER", "efa"))), nil},

		// NCCL_SOCKET_IFNAME_MISSING
		{"missing socket interface fails", gang(withIfaces(rank(0, "n1", env("NCCL_SOCKET_IFNAME", "eth2"), full("GPU-1")), "lo", "eth0")),
			[]want{{verdict.RuleNCCLSocketIfnameMissing, verdict.SeverityFail}}},
		{"exact name that matches only as a prefix fails", gang(withIfaces(rank(0, "n1", env("NCCL_SOCKET_IFNAME", "=eth"), full("GPU-1")), "lo", "eth0")),
			[]want{{verdict.RuleNCCLSocketIfnameMissing, verdict.SeverityFail}}},
		{"prefix that matches passes", gang(withIfaces(rank(0, "n1", env("NCCL_SOCKET_IFNAME", "eth,ib"), full("GPU-1")), "lo", "eth0")), nil},
		{"exclusion leaving an interface passes", gang(withIfaces(rank(0, "n1", env("NCCL_SOCKET_IFNAME", "^lo,docker"), full("GPU-1")), "lo", "eth0")), nil},
		{"interfaces unknown: not judged", gang(rank(0, "n1", env("NCCL_SOCKET_IFNAME", "eth2"), full("GPU-1"))), nil},

		// NCCL_IB_HCA_MISSING
		{"missing HCA warns", gang(withNet(rank(0, "n1", env("NCCL_IB_HCA", "=mlx5_4:1"), full("GPU-1")), "mlx5_0", "mlx5_1")),
			[]want{{verdict.RuleNCCLIBHCAMissing, verdict.SeverityWarn}}},
		{"HCA with port passes", gang(withNet(rank(0, "n1", env("NCCL_IB_HCA", "mlx5_0:1,mlx5_1:1"), full("GPU-1")), "mlx5_0", "mlx5_1")), nil},

		// VISIBLE_DEVICES_MISMATCH
		{"CUDA_VISIBLE_DEVICES beyond the request fails", templates(template("Worker", 2, 1, false, "x", env("CUDA_VISIBLE_DEVICES", "0,1"))),
			[]want{{verdict.RuleVisibleDevicesMismatch, verdict.SeverityFail}}},
		{"CUDA_VISIBLE_DEVICES with a UUID in a template fails", templates(template("Worker", 2, 1, false, "x", env("CUDA_VISIBLE_DEVICES", "GPU-abc"))),
			[]want{{verdict.RuleVisibleDevicesMismatch, verdict.SeverityFail}}},
		{"CUDA_VISIBLE_DEVICES narrower than the request warns", templates(template("Worker", 2, 4, false, "x", env("CUDA_VISIBLE_DEVICES", "0"))),
			[]want{{verdict.RuleVisibleDevicesMismatch, verdict.SeverityWarn}}},
		{"CUDA_VISIBLE_DEVICES naming all requested devices passes", templates(template("Worker", 2, 2, false, "x", env("CUDA_VISIBLE_DEVICES", "0,1"))), nil},
		{"CUDA_VISIBLE_DEVICES naming the rank's own UUID passes", gang(rank(0, "n1", env("CUDA_VISIBLE_DEVICES", "GPU-1"), full("GPU-1"))), nil},
		{"CUDA_VISIBLE_DEVICES naming another UUID fails", gang(rank(0, "n1", env("CUDA_VISIBLE_DEVICES", "GPU-9"), full("GPU-1"))),
			[]want{{verdict.RuleVisibleDevicesMismatch, verdict.SeverityFail}}},
		{"NVIDIA_VISIBLE_DEVICES=all without a GPU request fails", templates(template("Worker", 2, 0, false, "x", env("NVIDIA_VISIBLE_DEVICES", "all"))),
			[]want{{verdict.RuleVisibleDevicesMismatch, verdict.SeverityFail}}},
		{"NVIDIA_VISIBLE_DEVICES by hand with a request warns", templates(template("Worker", 2, 1, false, "x", env("NVIDIA_VISIBLE_DEVICES", "0"))),
			[]want{{verdict.RuleVisibleDevicesMismatch, verdict.SeverityWarn}}},
		{"NVIDIA_VISIBLE_DEVICES=void passes", templates(template("Worker", 2, 0, false, "x", env("NVIDIA_VISIBLE_DEVICES", "void"))), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Check(tc.in)
			var g []want
			for _, f := range got {
				require.True(t, verdict.Registered(f.Rule), f.Rule)
				require.NotEmpty(t, f.Message)
				require.NotEmpty(t, f.Remediation)
				g = append(g, want{f.Rule, f.Severity})
			}
			require.Equal(t, tc.want, g, "%+v", got)
		})
	}
}

func inPod(r Rank, pod string) Rank {
	r.Pod = pod
	return r
}

func withNet(r Rank, hcas ...string) Rank {
	r.Net = &Net{Interfaces: []string{"eth0"}, HCAs: hcas, HCAsKnown: true}
	return r
}

func withIfaces(r Rank, ifaces ...string) Rank {
	r.Net = &Net{Interfaces: ifaces}
	return r
}

func TestIntReadsLikeNCCL(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want int64
		set  bool
	}{
		{"1", 1, true}, {" 1", 1, true}, {"0x1", 1, true}, {"01", 1, true}, {"1abc", 1, true},
		{"true", 0, true}, {"yes", 0, true}, {"", 0, false}, {"-1", -1, true}, {"2", 2, true},
		{"99999999999999999999", 0, false}, {"-9223372036854775808", -9223372036854775808, true},
	} {
		v, set, known := env("X", tc.v).Int("X")
		require.True(t, known)
		require.Equal(t, tc.set, set, tc.v)
		require.Equal(t, tc.want, v, tc.v)
	}
	var nilEnv *Env
	_, set, known := nilEnv.Int("X")
	require.False(t, set)
	require.False(t, known)
}

func TestNGCRelease(t *testing.T) {
	for _, tc := range []struct {
		image  string
		yy, mm int
		ok     bool
	}{
		{"nvcr.io/nvidia/pytorch:24.05-py3", 24, 5, true},
		{"nvcr.io/nvidia/nemo:25.02.01", 25, 2, true},
		{"nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04", 0, 0, false},
		{"nvcr.io/nvidia/pytorch@sha256:abc", 0, 0, false},
		{"pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime", 0, 0, false},
		{"localhost:5000/nvcr.io/nvidia/pytorch", 0, 0, false},
	} {
		yy, mm, ok := ngcRelease(tc.image)
		require.Equal(t, tc.ok, ok, tc.image)
		require.Equal(t, [2]int{tc.yy, tc.mm}, [2]int{yy, mm}, tc.image)
	}
}

func TestMergeKeepsTheReport(t *testing.T) {
	r := verdict.NewReport("job", []verdict.Finding{{Rule: verdict.RuleSchedulable, Severity: verdict.SeverityInfo}})
	r.Mode = "rank"
	m := Merge(r, []verdict.Finding{{Rule: verdict.RuleNCCLNVLSOnMIG, Severity: verdict.SeverityFail}})
	require.Equal(t, verdict.VerdictFail, m.Verdict)
	require.Equal(t, "rank", m.Mode)
	require.Equal(t, []string{verdict.RuleNCCLNVLSOnMIG, verdict.RuleSchedulable}, m.RuleIDs())
	require.Len(t, r.Findings, 1, "the original is not changed")
}

func TestLocalVisibleDevices(t *testing.T) {
	local := func(e *Env) Input {
		return Input{Scope: ScopeLocal, Ranks: []Rank{{Rank: 0, Env: e, DevicesKnown: true, Devices: []Device{full("GPU-4"), full("GPU-5")}}}}
	}
	// On a host without a container runtime's remapping CUDA sees every
	// GPU: CUDA_VISIBLE_DEVICES=4,5 is the allocation itself.
	require.Empty(t, Check(local(env("CUDA_VISIBLE_DEVICES", "4,5"))))
	// In a container given two GPUs, CUDA numbers them 0 and 1.
	fs := Check(local(env("NVIDIA_VISIBLE_DEVICES", "GPU-4,GPU-5", "CUDA_VISIBLE_DEVICES", "4,5")))
	require.Len(t, fs, 1)
	require.Equal(t, verdict.RuleVisibleDevicesMismatch, fs[0].Rule)
	require.Equal(t, verdict.SeverityFail, fs[0].Severity)
	require.Empty(t, Check(local(env("NVIDIA_VISIBLE_DEVICES", "GPU-4,GPU-5", "CUDA_VISIBLE_DEVICES", "1,0"))))
}

// With lays one env over another (a launcher's exports over a rank
// container's env) without changing either.
func TestEnvWith(t *testing.T) {
	base := env("NCCL_NVLS_ENABLE", "0", "NCCL_DEBUG", "INFO")
	base.SetUnresolved("NCCL_SOCKET_IFNAME")
	base.Partial = true
	over := env("NCCL_NVLS_ENABLE", "1", "NCCL_SOCKET_IFNAME", "eth0")
	over.SetUnresolved("NCCL_DEBUG")
	got := base.With(over)
	require.True(t, got.IsOne("NCCL_NVLS_ENABLE"))
	v, _, known := got.String("NCCL_SOCKET_IFNAME")
	require.True(t, known)
	require.Equal(t, "eth0", v)
	_, _, known = got.String("NCCL_DEBUG")
	require.False(t, known)
	require.True(t, got.Partial)
	require.False(t, base.IsOne("NCCL_NVLS_ENABLE"), "the base is not changed")
	require.Same(t, base, base.With(nil))
	require.True(t, (*Env)(nil).With(over).IsOne("NCCL_NVLS_ENABLE"))
}
