package certs

import (
	"context"
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

// A confirmation the record did not take (another replica's write came
// first) is tried again on the next pass; one that took is not repeated.
func TestConfirmRetriesUntilRecorded(t *testing.T) {
	calls := 0
	d := &Distributor{Publish: func(context.Context, string) (bool, error) { calls++; return calls > 1, nil }}
	for range 3 {
		require.NoError(t, d.confirm(context.Background(), map[string]bool{}, "h", true))
	}
	require.Equal(t, 2, calls)
}
