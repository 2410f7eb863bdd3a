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
