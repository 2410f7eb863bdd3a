package nvmlsource

import (
	"sync/atomic"
	"time"
)

// Default deadlines.
const (
	DefaultCallTimeout = 5 * time.Second
	// DefaultInitTimeout is longer than a call: without persistence mode,
	// nvmlInit brings up every GPU, about 1-3 s each.
	DefaultInitTimeout = 60 * time.Second
)

// Logger is the little logging this package does: why a field stayed
// unknown, what was skipped. The binary adapts its real logger to it.
type Logger interface {
	Debugf(format string, args ...any)
}

type nopLogger struct{}

func (nopLogger) Debugf(string, ...any) {}

type options struct {
	callTimeout time.Duration
	initTimeout time.Duration
	log         Logger
	calls       *atomic.Int64
}

// Option configures a Source.
type Option func(*options)

// WithCallTimeout sets the deadline of each NVML call (default 5 s). A
// context deadline that comes sooner wins.
func WithCallTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.callTimeout = d
		}
	}
}

// WithInitTimeout sets the deadline of nvmlInit (default 60 s, see
// DefaultInitTimeout). A context deadline that comes sooner wins.
func WithInitTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.initTimeout = d
		}
	}
}

// WithLogger sets the debug logger; the default discards.
func WithLogger(l Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// WithCallCounter adds the number of NVML calls each discovery makes
// (Init and Shutdown included) to c. Benchmarks and tests use it to check
// that discovery stays linear in GPUs, MIG devices and GPU pairs.
func WithCallCounter(c *atomic.Int64) Option {
	return func(o *options) { o.calls = c }
}
