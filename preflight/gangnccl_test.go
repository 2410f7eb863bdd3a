package preflight

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/preflight/ncclenv"
	"github.com/rankgate/rankgate/verdict"
)

// settings is the template settings every rank runs with.
func settings(n int, kv ...string) map[int]ncclenv.Rank {
	vars := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		vars[kv[i]] = kv[i+1]
	}
	out := map[int]ncclenv.Rank{}
	for i := 0; i < n; i++ {
		out[i] = ncclenv.Rank{Rank: i, Env: ncclenv.NewEnv(vars), Image: "registry.example.com/train:1"}
	}
	return out
}

func TestGangNCCLSettings(t *testing.T) {
	onePodTwoMIG := []RankReport{rank(0, "n1", "ml/j-0", migDev("GPU-a", 0, "1g.35gb", 26), migDev("GPU-a", 1, "1g.35gb", 26))}
	for _, tc := range []struct {
		name  string
		ranks []RankReport
		nccl  map[int]ncclenv.Rank
		want  []string
	}{
		{"settings unknown: not judged", onePodTwoMIG, nil, nil},
		{"two MIG ranks of one pod on one GPU without NCCL_MULTI_RANK_GPU_ENABLE", onePodTwoMIG, settings(1),
			[]string{"NCCL_MULTI_RANK_GPU_DISABLED/fail"}},
		{"with NCCL_MULTI_RANK_GPU_ENABLE=1", onePodTwoMIG, settings(1, "NCCL_MULTI_RANK_GPU_ENABLE", "1"), nil},
		{"NVLS forced on MIG ranks of two pods", []RankReport{
			rank(0, "n1", "ml/j-0", migDev("GPU-a", 0, "1g.35gb", 26)), rank(1, "n1", "ml/j-1", migDev("GPU-a", 1, "1g.35gb", 26))},
			settings(2, "NCCL_NVLS_ENABLE", "1"), []string{"GANG_MIG_SHARED_GPU/info", "NCCL_NVLS_ON_MIG/fail"}},
		{"CUDA_VISIBLE_DEVICES beyond one full GPU per pod", []RankReport{
			rank(0, "n1", "ml/j-0", full(0, "n1")), rank(1, "n2", "ml/j-1", full(0, "n2"))},
			settings(2, "CUDA_VISIBLE_DEVICES", "0,1"), []string{"VISIBLE_DEVICES_MISMATCH/fail", "VISIBLE_DEVICES_MISMATCH/fail"}},
		{"MNNVL forced on GPUs in no NVLink domain", []RankReport{
			rank(0, "n1", "ml/j-0", full(0, "n1")), rank(1, "n2", "ml/j-1", full(0, "n2"))},
			settings(2, "NCCL_MNNVL_ENABLE", "1"), []string{"NCCL_MNNVL_NO_DOMAIN/fail"}},
		{"NVLS forced on GPUs with no NVSwitch fabric", []RankReport{
			rank(0, "n1", "ml/j-0", onNVSwitch(full(0, "n1"), false)), rank(1, "n2", "ml/j-1", onNVSwitch(full(0, "n2"), false))},
			settings(2, "NCCL_NVLS_ENABLE", "1"), []string{"NCCL_NVLS_NO_NVSWITCH/warn"}},
		{"NVLS forced on GPUs of an NVSwitch fabric", []RankReport{
			rank(0, "n1", "ml/j-0", onNVSwitch(full(0, "n1"), true)), rank(1, "n2", "ml/j-1", onNVSwitch(full(0, "n2"), true))},
			settings(2, "NCCL_NVLS_ENABLE", "1"), nil},
		{"P2P disabled on NVLinked GPUs of one pod", []RankReport{
			rank(0, "n1", "ml/j-0", nvlinked(full(0, "n1")), nvlinked(full(1, "n1"))), rank(1, "n2", "ml/j-1", nvlinked(full(0, "n2")), nvlinked(full(1, "n2")))},
			settings(2, "NCCL_P2P_DISABLE", "1"), []string{"NCCL_P2P_DISABLED_NVLINK/warn"}},
		{"P2P disabled on PCIe GPUs of one pod", []RankReport{
			rank(0, "n1", "ml/j-0", full(0, "n1"), full(1, "n1")), rank(1, "n2", "ml/j-1", full(0, "n2"), full(1, "n2"))},
			settings(2, "NCCL_P2P_DISABLE", "1"), nil},
		{"MIG with an NCCL that cannot be told: the gang verdict stays quiet", []RankReport{
			rank(0, "n1", "ml/j-0", migDev("GPU-a", 0, "1g.35gb", 26))}, settings(1), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := GangRules(GangInput{Job: "ml/j", Expected: len(tc.ranks), Ranks: tc.ranks, NCCL: tc.nccl})
			require.NoError(t, verdict.CheckRegistered(r))
			if tc.want == nil {
				require.Empty(t, r.Findings)
				return
			}
			require.ElementsMatch(t, tc.want, rules(r))
		})
	}
}

// onNVSwitch is d on a GPU whose fabric state says whether it is on an
// NVSwitch fabric.
func onNVSwitch(d verdict.DeviceSummary, on bool) verdict.DeviceSummary {
	d.NVSwitch = &on
	return d
}

// nvlinked is d with an NVLink to another GPU of its rank.
func nvlinked(d verdict.DeviceSummary) verdict.DeviceSummary {
	d.NVLinkPeer = true
	return d
}

// withNet is r with the network it reported.
func withNet(r RankReport, ifs []string, hcas ...string) RankReport {
	r.Net = &ncclenv.Net{Interfaces: ifs, HCAs: hcas, HCAsKnown: true}
	return r
}

// The NIC rules run at the gang verdict on the network every rank
// reported, with the job's settings: a rank whose node lacks the
// interface or HCA named fails or warns with the rule of launch and
// preflight; NCCL_IGNORE_NET_MISMATCH=1 fails when the ranks' NIC sets
// differ. A rank that did not report its network is not judged by them.
func TestGangNCCLNetRules(t *testing.T) {
	eth := []string{"eth0", "lo"}
	multus := []string{"eth0", "lo", "net1"}
	two := func(a, b RankReport) []RankReport { return []RankReport{a, b} }
	r0, r1 := rank(0, "n1", "ml/j-0", full(0, "n1")), rank(1, "n2", "ml/j-1", full(0, "n2"))
	for _, tc := range []struct {
		name  string
		ranks []RankReport
		nccl  map[int]ncclenv.Rank
		want  []string
	}{
		{"NCCL_SOCKET_IFNAME names an interface rank 1's node lacks",
			two(withNet(r0, multus), withNet(r1, eth)), settings(2, "NCCL_SOCKET_IFNAME", "net1"),
			[]string{"NCCL_SOCKET_IFNAME_MISSING/fail"}},
		{"NCCL_SOCKET_IFNAME matches on every rank", two(withNet(r0, multus), withNet(r1, multus)), settings(2, "NCCL_SOCKET_IFNAME", "net"), nil},
		{"NCCL_SOCKET_IFNAME with ranks that did not report their network", two(r0, r1), settings(2, "NCCL_SOCKET_IFNAME", "net1"), nil},
		{"NCCL_IB_HCA names an HCA rank 0's node lacks",
			two(withNet(r0, eth, "mlx5_0"), withNet(r1, eth, "mlx5_2", "mlx5_3")), settings(2, "NCCL_IB_HCA", "=mlx5_2:1"),
			[]string{"NCCL_IB_HCA_MISSING/warn"}},
		{"NCCL_IB_HCA matches on every rank", two(withNet(r0, eth, "mlx5_0", "mlx5_1"), withNet(r1, eth, "mlx5_0", "mlx5_1")), settings(2, "NCCL_IB_HCA", "mlx5"), nil},
		{"NCCL_IGNORE_NET_MISMATCH=1 with NIC sets that differ",
			two(withNet(r0, eth, "mlx5_0", "mlx5_1"), withNet(r1, eth, "mlx5_0")), settings(2, "NCCL_IGNORE_NET_MISMATCH", "1"),
			[]string{"NCCL_NET_MISMATCH_IGNORED/fail"}},
		{"NCCL_IGNORE_NET_MISMATCH=1 with the same NICs everywhere",
			two(withNet(r0, eth, "mlx5_0", "mlx5_1"), withNet(r1, eth, "mlx5_0", "mlx5_1")), settings(2, "NCCL_IGNORE_NET_MISMATCH", "1"), nil},
		{"NCCL_IGNORE_NET_MISMATCH=1 where a rank's NICs are unknown",
			two(withNet(r0, eth, "mlx5_0"), r1), settings(2, "NCCL_IGNORE_NET_MISMATCH", "1"), []string{"NCCL_NET_MISMATCH_IGNORED/warn"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := GangRules(GangInput{Job: "ml/j", Expected: len(tc.ranks), Ranks: tc.ranks, NCCL: tc.nccl})
			require.NoError(t, verdict.CheckRegistered(r))
			require.ElementsMatch(t, tc.want, rules(r))
		})
	}
	// The finding names the rank whose node lacks the interface.
	r := GangRules(GangInput{Job: "ml/j", Expected: 2, Ranks: two(withNet(r0, multus), withNet(r1, eth)), NCCL: settings(2, "NCCL_SOCKET_IFNAME", "net1")})
	require.Len(t, r.Findings, 1)
	require.Equal(t, []int{1}, r.Findings[0].Ranks)
	require.Equal(t, []string{"n2"}, r.Findings[0].Nodes)
	require.Contains(t, r.Findings[0].Message, "eth0, lo")
}

// A rank's reported NCCL version takes part in the MIG version rule: MIG
// ranks reporting an NCCL older than 2.31 fail the gang.
func TestGangNCCLReportedVersion(t *testing.T) {
	mig := rank(0, "n1", "ml/j-0", migDev("GPU-a", 0, "1g.35gb", 26))
	old := mig
	old.NCCLVersion = "2.27.3"
	r := GangRules(GangInput{Job: "ml/j", Expected: 1, Ranks: []RankReport{old}, NCCL: settings(1)})
	require.Equal(t, []string{"NCCL_MIG_VERSION/fail"}, rules(r))
	fresh := mig
	fresh.NCCLVersion = "2.31.2"
	r = GangRules(GangInput{Job: "ml/j", Expected: 1, Ranks: []RankReport{fresh}, NCCL: settings(1)})
	require.Empty(t, r.Findings)
}
