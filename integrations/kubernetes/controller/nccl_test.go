package controller

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/preflight/ncclenv"
)

// A report without a network leaves the rank's network unknown (nil),
// never empty; HCAs listed are known even without hcasKnown.
func TestRankNet(t *testing.T) {
	require.Nil(t, rankNet(nil))
	require.Equal(t, &ncclenv.Net{Interfaces: []string{"eth0"}}, rankNet(&gate.RankNet{Interfaces: []string{"eth0"}}))
	require.Equal(t, &ncclenv.Net{Interfaces: []string{"eth0"}, HCAsKnown: true}, rankNet(&gate.RankNet{Interfaces: []string{"eth0"}, HCAsKnown: true}))
	require.Equal(t, &ncclenv.Net{Interfaces: []string{"eth0"}, HCAs: []string{"mlx5_0"}, HCAsKnown: true},
		rankNet(&gate.RankNet{Interfaces: []string{"eth0"}, HCAs: []string{"mlx5_0"}}))
}
