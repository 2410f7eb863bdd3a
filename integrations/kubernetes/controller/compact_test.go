package controller

import (
	"encoding/json"
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// A rank's report is held compacted while its gang is open: the same
// content, the words ranks repeat shared between reports, a device's UUID
// and the findings' references sharing its ID, no spare list capacity.
func TestCompactRankKeepsContent(t *testing.T) {
	decoded := func(node string) preflight.RankReport {
		var devs []verdict.DeviceSummary
		for i := 0; i < 8; i++ {
			id := fmt.Sprintf("GPU-%s-%d", node, i)
			devs = append(devs, verdict.DeviceSummary{ID: id, Kind: "gpu", GPU: i, GPUUUID: id, Profile: "full", SMs: 132, MemoryMiB: 81559})
		}
		r := verdict.NewReport("node "+node, []verdict.Finding{
			{Rule: verdict.RuleProfileMismatch, Severity: verdict.SeverityWarn, Message: "GPU 3 runs profile full, the job asks for 3g.40gb",
				Remediation: "reconfigure MIG", Devices: []string{devs[3].ID}, Nodes: []string{node}},
		})
		r.Devices = devs
		b, err := json.Marshal(preflight.RankReport{Rank: 1, Pod: "p", Node: node, DriverVersion: "580.65.06", Report: r})
		require.NoError(t, err)
		var rr preflight.RankReport // as the gate decodes it: every string its own
		require.NoError(t, json.Unmarshal(b, &rr))
		return rr
	}
	a, b := decoded("n1"), decoded("n2")
	want := decoded("n1")
	require.Greater(t, cap(a.Report.Devices), len(a.Report.Devices), "decoding leaves spare room")
	compactRank(&a)
	compactRank(&b)
	require.Equal(t, want, a)
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	require.True(t, same(a.Report.Devices[2].ID, a.Report.Devices[2].GPUUUID))
	require.True(t, same(a.Report.Devices[3].ID, a.Report.Findings[0].Devices[0]))
	require.True(t, same(a.Report.Findings[0].Message, b.Report.Findings[0].Message))
	require.True(t, same(a.Report.Devices[0].Profile, b.Report.Devices[7].Profile))
	require.True(t, same(a.DriverVersion, b.DriverVersion))
	require.Equal(t, len(a.Report.Devices), cap(a.Report.Devices))
	require.Equal(t, len(a.Report.Findings), cap(a.Report.Findings))
}
