//go:build linux && cgo

package nvmlsource

import (
	"context"
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/rankgate/rankgate/topology"
)

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
