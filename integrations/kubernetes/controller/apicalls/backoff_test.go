package apicalls

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryBackoffDoublesToItsLimit(t *testing.T) {
	b := RetryBackoff(200*time.Millisecond, time.Second)
	var got []time.Duration
	for range 6 {
		got = append(got, b.Step())
	}
	ms := time.Millisecond
	require.Equal(t, []time.Duration{200 * ms, 400 * ms, 800 * ms, time.Second, time.Second, time.Second}, got)
}
