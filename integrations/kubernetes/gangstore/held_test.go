package gangstore

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/preflight/ncclenv"
	"github.com/rankgate/rankgate/verdict"
)

// An open gang holds its reports packed: unpacked, each is the report the
// gate decoded, and an 8-GPU report takes a fraction of its JSON.
func TestHeldReportRoundTrip(t *testing.T) {
	clique := uint32(3)
	var devs []verdict.DeviceSummary
	for i := 0; i < 8; i++ {
		id := fmt.Sprintf("GPU-6f1c2a7e-59d1-4b0a-0042-%012d", i)
		devs = append(devs, verdict.DeviceSummary{ID: id, Kind: "gpu", GPU: i, GPUUUID: id, Profile: "full", SMs: 132, MemoryMiB: 81559,
			FabricCluster: "c1", FabricClique: &clique})
	}
	r := verdict.NewReport("node gpu-node-0042", []verdict.Finding{
		{Rule: verdict.RuleProfileMismatch, Severity: verdict.SeverityWarn, Message: "GPU 3 runs profile full, the job asks for 3g.40gb",
			Remediation: "reconfigure MIG on the node or change the job's resource", Devices: []string{devs[3].ID}, Ranks: []int{0, 3}, Nodes: []string{"a"}},
		{Rule: verdict.RuleMIGParentAllocated, Severity: verdict.SeverityInfo, Message: "GPU 5 is allocated whole", Devices: []string{devs[5].ID}},
	})
	r.Devices, r.Mode = devs, "rank"
	b, err := json.Marshal(preflight.RankReport{Rank: 3, Pod: "train-worker-2", Node: "gpu-node-0042", DriverVersion: "580.65.06", CUDADriverVersion: "13.0", Report: r})
	require.NoError(t, err)
	var decoded preflight.RankReport
	require.NoError(t, json.Unmarshal(b, &decoded))

	h := holdReport(decoded, 8)
	require.Equal(t, "train-worker-2", h.pod)
	require.Less(t, len(h.packed), len(b)/3, "packed %d of %d bytes", len(h.packed), len(b))
	var wg sync.WaitGroup // the packers and unpackers are shared
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 20; k++ {
				require.Equal(t, decoded, holdReport(decoded, 8).report())
			}
		}()
	}
	wg.Wait()
	// A large gang's reports are held as they are (unpacking thousands
	// would delay its verdict).
	big := holdReport(decoded, packMaxRanks+1)
	require.Nil(t, big.packed)
	require.Equal(t, decoded, big.report())
	require.Equal(t, h.summary(3), big.summary(3))
	empty := preflight.RankReport{Rank: 1}
	require.Equal(t, empty, holdReport(empty, 8).report())
}

// A held report keeps the rank's network and NCCL version, packed or
// plain; ranks with the same network hold one interned copy of it, and a
// rank that reported none (an older rankgate init) stays unknown.
func TestHeldReportNet(t *testing.T) {
	nw := func() *ncclenv.Net {
		return &ncclenv.Net{Interfaces: []string{"eth0", "lo", "net1"}, HCAs: []string{"mlx5_0", "mlx5_1"}, HCAsKnown: true}
	}
	rr := preflight.RankReport{Rank: 2, Pod: "p2", Node: "n2", Report: verdict.NewReport("node n2", nil), Net: nw(), NCCLVersion: "2.27.3"}
	for _, expected := range []int{8, packMaxRanks + 1} {
		h := holdReport(rr, expected)
		require.Equal(t, rr, h.report(), "gang of %d", expected)
		require.Equal(t, expected > packMaxRanks, h.plain != nil)
		if h.plain != nil {
			require.Nil(t, h.plain.Net, "held apart from the report")
		} else {
			require.NotContains(t, string(h.packed), "mlx5", "held apart from the packed report")
		}
		other := rr
		other.Rank, other.Pod, other.Net = 3, "p3", nw() // equal, not the same lists
		require.Equal(t, h.net, holdReport(other, expected).net, "one interned copy")

		unknown := rr
		unknown.Net, unknown.NCCLVersion = nil, ""
		require.Nil(t, holdReport(unknown, expected).report().Net)
		none := rr
		none.Net = &ncclenv.Net{Interfaces: []string{"lo"}, HCAsKnown: true}
		require.Equal(t, none.Net, holdReport(none, expected).report().Net, "no HCAs is not unknown HCAs")
		require.NotEqual(t, holdReport(none, expected).net, h.net)
	}
	// The gang's held ranks unpack with their networks.
	held := []heldRank{{rank: 0, h: holdReport(rr, 8)}, {rank: 1, h: holdReport(preflight.RankReport{Rank: 1}, 8)}}
	got := unpackAll(held)
	require.Equal(t, nw(), got[0].Net)
	require.Nil(t, got[1].Net)
}

// Only a report made from a DRA allocation shows DRA devices: a rank's
// own report that names some (a hostile one) shows its device IDs only.
func TestSummaryDRADevicesOnlyFromTheDRASource(t *testing.T) {
	rr := preflight.RankReport{Rank: 0, Pod: "p", Report: verdict.Report{Verdict: verdict.VerdictPass,
		Devices: []verdict.DeviceSummary{{ID: "MIG-a", Profile: "1g.10gb", DRA: "gpu.nvidia.com/n1/gpu-0-mig-1g10gb-0"}}}}
	require.Equal(t, []verdict.DeviceSummary{{ID: "MIG-a"}}, summarize(rr).summary(0).Report.Devices)
	rr.Source = preflight.SourceDRA
	got := summarize(rr).summary(0)
	require.Equal(t, []verdict.DeviceSummary{{ID: "MIG-a", Profile: "1g.10gb", DRA: "gpu.nvidia.com/n1/gpu-0-mig-1g10gb-0"}}, got.Report.Devices)
	require.Equal(t, preflight.SourceDRA, got.Source)
}
