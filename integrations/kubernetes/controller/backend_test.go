package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller/leader"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	gateserver "github.com/rankgate/rankgate/integrations/kubernetes/gate/server"
)

// Report uses the rank Admit resolved for the same request and identity
// while this replica leads; otherwise it resolves again (and a replica
// that stopped leading between Admit and Report answers NotLeader).
func TestReportReusesAdmittedRank(t *testing.T) {
	c := &Controller{w: leader.New(leader.Config{}, nil)}
	c.leader.Store(true)
	b := c.gateBackend()
	id := gateserver.Identity{Namespace: "ml", Pod: "w-0", PodUID: "u"}
	want := rankOf{pod: &corev1.Pod{}, rank: 3}
	ctx := context.WithValue(context.Background(), admittedKey{}, admitted{id: id, r: want})

	got, err := b.resolveReport(ctx, id)
	require.NoError(t, err)
	require.Equal(t, 3, got.rank)

	// Another identity: resolved now (caches not synced here: Unavailable).
	other := id
	other.Pod = "w-1"
	_, err = b.resolveReport(ctx, other)
	var ge *gate.Error
	require.ErrorAs(t, err, &ge)
	require.Equal(t, gate.CodeUnavailable, ge.Code)

	// Leadership lost after Admit: NotLeader, not the admitted rank.
	c.leader.Store(false)
	_, err = b.resolveReport(ctx, id)
	require.ErrorAs(t, err, &ge)
	require.Equal(t, gate.CodeNotLeader, ge.Code)
}
