package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// The first pod to report a rank holds it: another pod's report for the
// same rank is not added and names the holder; once released (the holder
// is gone) the other pod takes the rank.
func TestGangRankHeldByFirstPod(t *testing.T) {
	g := newTestGang(kubeflow.MustFromObject(ptJob(false, 2)), time.Minute, false)
	pass := verdict.Report{Verdict: verdict.VerdictPass}
	fail := verdict.Report{Verdict: verdict.VerdictFail, Findings: []verdict.Finding{{Rule: "X", Severity: verdict.SeverityFail}}}
	isNew, decide, _, h := addRank(g, preflight.RankReport{Rank: 0, Pod: "a", Report: pass}, "uid-a", time.Now())
	require.True(t, isNew)
	require.False(t, decide)
	require.Nil(t, h)
	_, decide, _, h = addRank(g, preflight.RankReport{Rank: 0, Pod: "evil", Report: fail}, "uid-evil", time.Now())
	require.False(t, decide, "a second pod's failing report decided the gang")
	require.Equal(t, &gangstore.Holder{Pod: "a", UID: "uid-a"}, h)
	require.Equal(t, pass, g.Ranks()[0].Report)
	// The holder re-sends: fine.
	_, _, _, h = addRank(g, preflight.RankReport{Rank: 0, Pod: "a", Report: pass}, "uid-a", time.Now())
	require.Nil(t, h)
	require.False(t, g.Release(0, "uid-other"))
	require.True(t, g.Release(0, "uid-a"))
	isNew, _, _, h = addRank(g, preflight.RankReport{Rank: 0, Pod: "a2", Report: pass}, "uid-a2", time.Now())
	require.Nil(t, h)
	require.True(t, isNew)
}
