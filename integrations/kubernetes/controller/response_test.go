package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/preflight"
)

// A waiting answer carries what a rank's progress line shows: the ranks
// reported of expected and the gang's deadline (none before the first
// report starts the clock).
func TestWaitingAnswerCarriesProgress(t *testing.T) {
	g := &gang{key: "ml/PyTorchJob/train", expected: 8, reports: map[int]heldReport{}, done: make(chan struct{})}
	r := g.response(2)
	require.Equal(t, gate.StateWaiting, r.State)
	require.Equal(t, 8, r.Expected)
	require.Zero(t, r.Reported)
	require.Nil(t, r.Deadline)

	deadline := time.Date(2026, 11, 30, 12, 10, 0, 0, time.UTC)
	for _, rank := range []int{0, 2, 5} {
		g.reports[rank] = holdReport(preflight.RankReport{Rank: rank}, 8)
	}
	g.deadline = deadline
	r = g.response(2)
	require.Equal(t, gate.Response{State: gate.StateWaiting, Job: "ml/PyTorchJob/train", Rank: 2, Expected: 8, Reported: 3, Deadline: &deadline}, *r)
}
