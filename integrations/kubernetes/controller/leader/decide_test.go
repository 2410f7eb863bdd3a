package leader

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource"
	"github.com/rankgate/rankgate/preflight"
)

// The ranks whose reports come from their DRA allocations are counted
// (the verdict's subject says how many).
func TestFromDRA(t *testing.T) {
	require.Equal(t, 0, fromDRA(nil))
	require.Equal(t, 0, fromDRA([]preflight.RankReport{{Rank: 0}}))
	require.Equal(t, 1, fromDRA([]preflight.RankReport{{Rank: 0}, {Rank: 1, Source: devicesource.DRA}}))
}
