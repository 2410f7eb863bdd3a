package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/preflight"
)

// A waiting answer carries what a rank's progress line shows: the ranks
// reported of expected and the gang's deadline (none before the first
// report starts the clock).
func TestWaitingAnswerCarriesProgress(t *testing.T) {
	j := kubeflow.MustFromObject(ptJob(true, 7))
	j.Object().SetName("train")
	g := newTestGang(j, 10*time.Minute, false)
	r := response(g, 2)
	require.Equal(t, gate.StateWaiting, r.State)
	require.Equal(t, 8, r.Expected)
	require.Zero(t, r.Reported)
	require.Nil(t, r.Deadline)

	deadline := time.Date(2026, 11, 30, 12, 10, 0, 0, time.UTC)
	for _, rank := range []int{0, 2, 5} {
		g.Add(preflight.RankReport{Rank: rank}, fmt.Sprint("uid-", rank), deadline)
	}
	require.Equal(t, deadline, g.Start(deadline.Add(-10*time.Minute), time.Time{}))
	r = response(g, 2)
	require.Equal(t, gate.Response{State: gate.StateWaiting, Job: "ml/PyTorchJob/train", Rank: 2, Expected: 8, Reported: 3, Deadline: &deadline}, *r)
}
