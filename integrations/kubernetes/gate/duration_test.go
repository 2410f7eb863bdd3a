package gate

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseJobDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"15m": 15 * time.Minute, "0s": 0, "168h": MaxJobDuration, "169h": MaxJobDuration,
		"2562047h47m": MaxJobDuration, "2562047h47m16.854775807s": MaxJobDuration,
	} {
		d, err := ParseJobDuration(in)
		require.NoError(t, err, in)
		require.Equal(t, want, d, in)
	}
	for _, in := range []string{"", "soon", "-1s", "2562047h48m", "15"} {
		_, err := ParseJobDuration(in)
		require.Error(t, err, in)
	}
}

func TestAddDurations(t *testing.T) {
	require.Equal(t, 20*time.Minute, AddDurations(15*time.Minute, 5*time.Minute))
	require.Equal(t, time.Duration(math.MaxInt64), AddDurations(math.MaxInt64-time.Minute, 5*time.Minute))
	require.Equal(t, time.Duration(math.MinInt64), AddDurations(math.MinInt64+time.Minute, -5*time.Minute))
	require.Equal(t, time.Duration(-1), AddDurations(math.MaxInt64, math.MinInt64))
}
