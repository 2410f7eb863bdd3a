package controller

import (
	"time"

	"k8s.io/utils/clock"
)

// The controller reads the time and arms its deadlines, delays and
// retries through one clock, Options.Clock, so that its timing (a gang's
// deadline, the applied delay, the Pending watchdog's grace) is
// unit-tested with a fake clock (k8s.io/utils/clock/testing).

// clock is Options.Clock, or the real clock when none is set (also for a
// Controller built without New, in tests).
func (c *Controller) clock() clock.WithTickerAndDelayedExecution {
	return clockOr(c.opts.Clock)
}

// now is the controller's current time.
func (c *Controller) now() time.Time { return c.clock().Now() }

func clockOr(clk clock.WithTickerAndDelayedExecution) clock.WithTickerAndDelayedExecution {
	if clk == nil {
		return clock.RealClock{}
	}
	return clk
}
