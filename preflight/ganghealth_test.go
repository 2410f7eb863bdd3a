package preflight

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology/nvmlsource/nvmltest"
	"github.com/rankgate/rankgate/verdict"
)

const testCluster = "5f1c9a2e-7b1d-4e0a-9c3f-2a6b8d4e1f00"

// mockRank is rank i's report from its own preflight on a mock node, one
// GPU per rank, one pod per node.
func mockRank(t *testing.T, s *nvmltest.Server, i int, node, gpu string) RankReport {
	r := rankOn(mockInventory(t, s), gpu)
	return RankReport{Rank: i, Node: node, Pod: "ml/j-" + node, DriverVersion: "560.28.03", Report: r}
}

func TestGangNVLinkDomains(t *testing.T) {
	// Two mock GB200-class nodes of one cluster in different cliques.
	a := nvmltest.NewServer(t, nvmltest.DGXB200, nvmltest.WithFabricCluster(testCluster, 1))
	b := nvmltest.NewServer(t, nvmltest.DGXB200, nvmltest.WithFabricCluster(testCluster, 2))
	c := nvmltest.NewServer(t, nvmltest.DGXB200, nvmltest.WithFabricCluster(testCluster, 1))
	ranks := []RankReport{mockRank(t, a, 0, "n1", "0"), mockRank(t, a, 1, "n1", "1"), mockRank(t, b, 2, "n2", "0"), mockRank(t, b, 3, "n2", "1")}
	r := GangRules(GangInput{Job: "ml/j", Expected: 4, Ranks: ranks})
	require.Equal(t, []string{"GANG_NVLINK_DOMAIN_SPLIT/fail"}, ruleSev(r))
	f := r.Findings[0]
	require.Equal(t, []int{0, 1, 2, 3}, f.Ranks)
	require.Contains(t, f.Message, "cluster "+testCluster+" clique 1: ranks 0-1; cluster "+testCluster+" clique 2: ranks 2-3")

	// One clique on two nodes: one domain.
	same := []RankReport{mockRank(t, a, 0, "n1", "0"), mockRank(t, c, 1, "n3", "0")}
	require.Empty(t, GangRules(GangInput{Job: "ml/j", Expected: 2, Ranks: same}).Findings)

	// Plain H100 nodes: no cluster, no expectation, no finding; the job
	// saying it expects multi-node NVLink makes each node its own domain.
	h1, h2 := nvmltest.NewServer(t, nvmltest.DGXH100), nvmltest.NewServer(t, nvmltest.DGXH100)
	plain := []RankReport{mockRank(t, h1, 0, "n1", "0"), mockRank(t, h2, 1, "n2", "0")}
	require.Empty(t, GangRules(GangInput{Job: "ml/j", Expected: 2, Ranks: plain}).Findings)
	r = GangRules(GangInput{Job: "ml/j", Expected: 2, Ranks: plain, ExpectMultiNodeNVLink: true})
	require.Equal(t, []string{"GANG_NVLINK_DOMAIN_SPLIT/fail"}, ruleSev(r))
	require.Contains(t, r.Findings[0].Message, "the job expects multi-node NVLink")
	require.Contains(t, r.Findings[0].Message, "node n1 (no multi-node NVLink): ranks 0; node n2 (no multi-node NVLink): ranks 1")
}

func TestGangHealthMixed(t *testing.T) {
	sick := nvmltest.NewServer(t, nvmltest.DGXH100)
	sick.SetRemap(3, true, false)
	sick.SetPersistence(5, false)
	ok := nvmltest.NewServer(t, nvmltest.DGXH100)
	ranks := []RankReport{mockRank(t, sick, 0, "n1", "3"), mockRank(t, sick, 1, "n1", "5"), mockRank(t, ok, 2, "n2", "3"), mockRank(t, ok, 3, "n2", "5")}
	r := GangRules(GangInput{Job: "ml/j", Expected: 4, Ranks: ranks})
	require.ElementsMatch(t, []string{"RANK_PREFLIGHT_FAILED/fail", "GANG_HEALTH_MIXED/fail"}, ruleSev(r))
	var f verdict.Finding
	for _, x := range r.Findings {
		if x.Rule == verdict.RuleGangHealthMixed {
			f = x
		}
	}
	require.Equal(t, []int{0, 1}, f.Ranks)
	require.Equal(t, []string{"n1"}, f.Nodes)
	require.Contains(t, f.Message, "GPU_REMAP_PENDING: ranks 0; PERSISTENCE_OFF: ranks 1")

	// Warnings only: the gang warns.
	warnOnly := []RankReport{mockRank(t, sick, 0, "n1", "5"), mockRank(t, ok, 1, "n2", "5")}
	r = GangRules(GangInput{Job: "ml/j", Expected: 2, Ranks: warnOnly})
	require.Equal(t, []string{"GANG_HEALTH_MIXED/warn"}, ruleSev(r))

	// Every rank equally sick: the ranks' own findings say it.
	sick2 := nvmltest.NewServer(t, nvmltest.DGXH100)
	sick2.SetRemap(3, true, false)
	all := []RankReport{mockRank(t, sick, 0, "n1", "3"), mockRank(t, sick2, 1, "n2", "3")}
	r = GangRules(GangInput{Job: "ml/j", Expected: 2, Ranks: all})
	require.Equal(t, []string{"RANK_PREFLIGHT_FAILED/fail", "RANK_PREFLIGHT_FAILED/fail"}, ruleSev(r), "no mixed verdict")

	// A healthy gang on healthy mocks: nothing.
	healthy := []RankReport{mockRank(t, ok, 0, "n1", "0"), mockRank(t, nvmltest.NewServer(t, nvmltest.DGXH100), 1, "n2", "0")}
	require.Empty(t, GangRules(GangInput{Job: "ml/j", Expected: 2, Ranks: healthy}).Findings)
}
