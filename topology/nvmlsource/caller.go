package nvmlsource

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/rankgate/rankgate/topology"
)

// caller runs NVML calls one at a time on a worker goroutine and waits for
// each under a deadline. One caller serves one discovery. After a call
// misses its deadline the worker is abandoned (it may never come back) and
// every later call fails at once: discovery stops at the first hung call.
type caller struct {
	ctx     context.Context
	timeout time.Duration
	counter *atomic.Int64

	work  chan func()
	done  chan any // nil, or the value a call panicked with
	timer *time.Timer

	stuck    bool  // the worker is busy with a call we gave up on
	stuckErr error // what to answer from then on
}

func newCaller(ctx context.Context, timeout time.Duration, counter *atomic.Int64) *caller {
	c := &caller{
		ctx:     ctx,
		timeout: timeout,
		counter: counter,
		work:    make(chan func(), 1),
		// Buffered so that a call that returns after we gave up on it
		// does not block the worker forever.
		done:  make(chan any, 1),
		timer: time.NewTimer(time.Hour),
	}
	c.timer.Stop()
	go worker(c.work, c.done)
	return c
}

func worker(work <-chan func(), done chan<- any) {
	for f := range work {
		done <- run(f)
	}
}

// run calls f and returns what it panicked with, if anything. A panic in a
// binding (a mock's unset method, a handle of the wrong kind) becomes a
// discovery error instead of killing an init container.
func run(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}

// close lets an idle worker exit; a stuck one exits when its call returns.
func (c *caller) close() {
	close(c.work)
	c.timer.Stop()
}

// do runs f under min(timeout, the context's deadline).
func (c *caller) do(o op, timeout time.Duration, f func()) error {
	if c.stuck {
		return c.stuckErr
	}
	if err := c.ctx.Err(); err != nil {
		return c.ctxErr(o, err, 0)
	}
	if c.counter != nil {
		c.counter.Add(1)
	}
	start := time.Now()
	c.work <- f
	c.timer.Reset(timeout)
	select {
	case p := <-c.done:
		c.timer.Stop()
		if p != nil {
			return &topology.DiscoveryError{
				Class:       ClassUnknown,
				Op:          o.String(),
				Message:     fmt.Sprintf("%sthe NVML binding panicked: %v", o.subject(), p),
				Remediation: remediationPanic,
				Err:         fmt.Errorf("panic in %s: %v", o, p),
			}
		}
		return nil
	case <-c.timer.C:
		c.stuck = true
		c.stuckErr = hungError(o, time.Since(start), context.DeadlineExceeded)
		return c.stuckErr
	case <-c.ctx.Done():
		c.timer.Stop()
		c.stuck = true
		c.stuckErr = c.ctxErr(o, c.ctx.Err(), time.Since(start))
		return c.stuckErr
	}
}

func (c *caller) ctxErr(o op, err error, waited time.Duration) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return hungError(o, waited, err)
	}
	return fmt.Errorf("nvml discovery stopped before %s: %w", o, err)
}

// Typed helpers. Results are handed back only when the call completed; a
// call we gave up on may still write its own locals later, which nobody
// reads.

func callRet(c *caller, o op, f func() nvml.Return) (nvml.Return, error) {
	var r nvml.Return
	err := c.do(o, c.timeout, func() { r = f() })
	return r, err
}

func callInit(c *caller, timeout time.Duration, f func() nvml.Return) (nvml.Return, error) {
	var r nvml.Return
	o := op{fn: "nvmlInit", gpu: -1, mig: -1, peer: -1, arg: -1}
	err := c.do(o, timeout, func() { r = f() })
	return r, err
}

func call0[A any](c *caller, o op, f func() (A, nvml.Return)) (A, nvml.Return, error) {
	var a A
	var r nvml.Return
	if err := c.do(o, c.timeout, func() { a, r = f() }); err != nil {
		var zero A
		return zero, 0, err
	}
	return a, r, nil
}

func call1[X, A any](c *caller, o op, f func(X) (A, nvml.Return), x X) (A, nvml.Return, error) {
	var a A
	var r nvml.Return
	if err := c.do(o, c.timeout, func() { a, r = f(x) }); err != nil {
		var zero A
		return zero, 0, err
	}
	return a, r, nil
}

func call2[X, Y, A any](c *caller, o op, f func(X, Y) (A, nvml.Return), x X, y Y) (A, nvml.Return, error) {
	var a A
	var r nvml.Return
	if err := c.do(o, c.timeout, func() { a, r = f(x, y) }); err != nil {
		var zero A
		return zero, 0, err
	}
	return a, r, nil
}

// unsupported reports whether r answers "this GPU or driver cannot tell":
// the field stays unknown. A driver without the function is the same answer.
func unsupported(r nvml.Return) bool {
	return r == nvml.ERROR_NOT_SUPPORTED || r == nvml.ERROR_FUNCTION_NOT_FOUND
}

// answer turns a completed call's code into (known, error): SUCCESS is
// known, an unsupported answer is unknown, anything else is a failure.
func answer(o op, r nvml.Return) (bool, error) {
	switch {
	case r == nvml.SUCCESS:
		return true, nil
	case unsupported(r):
		return false, nil
	default:
		return false, classify(o, r)
	}
}

// op names one NVML call and what it was about, for errors. Fields that do
// not apply are -1. It is formatted only when needed.
type op struct {
	fn   string
	gpu  int
	mig  int // MIG device index within gpu
	peer int // second GPU of a pair
	arg  int
	// argName labels arg ("link", "index", ...); with arg -1 it stands alone.
	argName string
}

func gpuOp(fn string, gpu int) op { return op{fn: fn, gpu: gpu, mig: -1, peer: -1, arg: -1} }

func sysOp(fn string) op { return op{fn: fn, gpu: -1, mig: -1, peer: -1, arg: -1} }

func (o op) String() string {
	var parts []string
	switch {
	case o.gpu >= 0 && o.mig >= 0:
		parts = append(parts, "MIG "+strconv.Itoa(o.gpu)+":"+strconv.Itoa(o.mig))
	case o.gpu >= 0:
		parts = append(parts, "GPU "+strconv.Itoa(o.gpu))
	}
	if o.peer >= 0 {
		parts = append(parts, "GPU "+strconv.Itoa(o.peer))
	}
	switch {
	case o.argName != "" && o.arg >= 0:
		parts = append(parts, o.argName+" "+strconv.Itoa(o.arg))
	case o.argName != "":
		parts = append(parts, o.argName)
	case o.arg >= 0:
		parts = append(parts, strconv.Itoa(o.arg))
	}
	return o.fn + "(" + strings.Join(parts, ", ") + ")"
}

// subject prefixes a message with the device it concerns.
func (o op) subject() string {
	switch {
	case o.gpu >= 0 && o.mig >= 0:
		return fmt.Sprintf("MIG device %d:%d: ", o.gpu, o.mig)
	case o.gpu >= 0 && o.peer >= 0:
		return fmt.Sprintf("GPUs %d and %d: ", o.gpu, o.peer)
	case o.gpu >= 0:
		return fmt.Sprintf("GPU %d: ", o.gpu)
	}
	return ""
}
