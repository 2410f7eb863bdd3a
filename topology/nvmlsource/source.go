// Package nvmlsource discovers a node's GPU inventory live through NVML
// (go-nvml's nvml.Interface), so tests inject go-nvml's mock servers (see the
// nvmltest sub-package) and production uses the driver's libnvidia-ml.so.1.
//
// Every NVML call runs under its own deadline (WithCallTimeout). NVML calls
// can block forever on a wedged GPU, and a blocked cgo call cannot be
// interrupted, so the calls run on a goroutine of their own and Inventory
// waits for them with a timer and the context. When a call passes its
// deadline, Inventory returns at once a *topology.DiscoveryError of class
// CALL_HUNG (rule NVML_CALL_HUNG, Hung true) that names the call and the
// device; discovery stops at that call. The goroutine stuck in the driver is
// abandoned: it leaks until the call returns, if ever, and then only shuts
// NVML down and exits. The process can still exit (returning from main or
// os.Exit does not wait for goroutines).
//
// NVML return codes become *topology.DiscoveryError values with a class per
// failure kind (see Classes), a message and a remediation a person can act
// on. ERROR_NOT_SUPPORTED is an answer, never a failure: the field stays
// unknown, or the capability is reported absent.
package nvmlsource

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/rankgate/rankgate/topology"
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

// Source discovers the inventory through NVML. It is safe for concurrent
// use; each Inventory call initializes and shuts down NVML around its work.
type Source struct {
	lib  nvml.Interface
	opts options
}

var _ topology.Source = (*Source)(nil)

// New returns a Source over lib: nvml.New() in production, a mock in tests.
func New(lib nvml.Interface, opts ...Option) *Source {
	o := options{
		callTimeout: DefaultCallTimeout,
		initTimeout: DefaultInitTimeout,
		log:         nopLogger{},
	}
	for _, opt := range opts {
		opt(&o)
	}
	return &Source{lib: lib, opts: o}
}

// NewDefault returns a Source over the system's NVML. The library
// (libnvidia-ml.so.1) is opened at the first Inventory call, not here: on a
// machine without it, Inventory fails with class LIBRARY_NOT_FOUND.
func NewDefault(opts ...Option) *Source {
	return New(nvml.New(), opts...)
}

// Inventory initializes NVML, reads the node's GPUs, MIG devices, NVLinks
// and GPU pairs, and shuts NVML down. The hostname is left to the caller.
// Errors are *topology.DiscoveryError, except a cancelled ctx, which is
// returned wrapped.
func (s *Source) Inventory(ctx context.Context) (*topology.Inventory, error) {
	// A caller that already gave up gets no NVML session at all.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("NVML discovery: %w", err)
	}
	var callLog Logger
	if _, nop := s.opts.log.(nopLogger); !nop {
		callLog = s.opts.log
	}
	c := newCaller(ctx, s.opts.callTimeout, s.opts.initTimeout, s.opts.calls, callLog)
	// Buffered: an abandoned discovery must be able to finish and exit.
	res := make(chan result, 1)
	go func() {
		inv, err := s.run(c)
		res <- result{inv, err}
	}()
	return c.wait(res)
}

// run is the discovery goroutine: Init, discovery, Shutdown.
func (s *Source) run(c *caller) (*topology.Inventory, error) {
	r, err := callInit(c, s.lib.Init)
	if errors.Is(err, errAbandoned) && r == nvml.SUCCESS {
		s.shutdown(c) // a hung Init that came back after all
	}
	if err != nil {
		return nil, err
	}
	if r != nvml.SUCCESS {
		return nil, classify(sysOp("nvmlInit"), r)
	}
	inv, err := s.discover(c)
	s.shutdown(c)
	return inv, err
}

// shutdown ends the NVML session. After a hung call it runs only once that
// call came back, in the abandoned goroutine, with nobody waiting.
func (s *Source) shutdown(c *caller) {
	if c.abandoned.Load() {
		s.opts.log.Debugf("nvml: an abandoned discovery came back; shutting NVML down")
		s.lib.Shutdown()
		return
	}
	o := sysOp("nvmlShutdown")
	r, err := callRet(c, o, s.lib.Shutdown)
	switch {
	case err != nil:
		s.opts.log.Debugf("nvml: %v", err)
	case r != nvml.SUCCESS:
		s.opts.log.Debugf("nvml: %s returned %s", o, r.Error())
	}
}
