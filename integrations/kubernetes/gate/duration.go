package gate

import (
	"fmt"
	"math"
	"time"
)

// MaxJobDuration bounds every duration a job's annotation sets
// (rankgate.io/gang-timeout, rankgate.io/pending-grace,
// rankgate.io/pending-timeout): a longer value is read as this one, so that
// no deadline, and no --timeout derived from it, can overflow.
const MaxJobDuration = 7 * 24 * time.Hour

// ParseJobDuration reads a duration annotation ("15m"), clamped to
// MaxJobDuration. It fails on what time.ParseDuration refuses (values
// beyond about 2562047h included) and on negative durations; callers that
// need a positive one check for zero.
func ParseJobDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration like 15m: %w", s, err)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	return min(d, MaxJobDuration), nil
}

// AddDurations is a+b, saturated at the largest (or smallest) Duration
// instead of wrapping around.
func AddDurations(a, b time.Duration) time.Duration {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}
