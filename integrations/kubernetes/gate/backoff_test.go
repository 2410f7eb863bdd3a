package gate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The delays between failed attempts double from MinBackoff to MaxBackoff,
// each drawn from the upper half of its base.
func TestAwaitBackoffDelays(t *testing.T) {
	o := AwaitOptions{MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	for range 200 {
		b := o.backoff()
		base := o.MinBackoff
		for i := range 8 {
			d := b.Step()
			require.GreaterOrEqual(t, d, base/2, "attempt %d", i)
			require.LessOrEqual(t, d, base, "attempt %d", i)
			base = min(2*base, o.MaxBackoff)
		}
	}
}
