package certs

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A namespace without a CA ConfigMap is written before the stale ones: a
// pass over many namespaces after a CA change must not keep a newly
// opted-in namespace (whose rank pods cannot start) waiting behind them.
func TestToWriteMissingFirst(t *testing.T) {
	want := map[string]bool{"a": true, "b": true, "c": true, "d": true, "new": true, "own": true}
	kept := map[string]string{"a": "old", "b": "cur", "c": "old", "d": "", "own": "old", "gone": "old"}
	require.Equal(t, []string{"new", "own", "a", "c", "d"}, toWrite(want, kept, "cur", "own"))
	require.Empty(t, toWrite(map[string]bool{"b": true}, kept, "cur", "own"))
}
