//go:build linux && cgo

package nvmlsource

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// caller bounds every NVML call of one discovery by a deadline. The calls
// run on a discovery goroutine of their own, one after the other; the
// goroutine that asked for the inventory watches them (wait) and gives up
// when the call in progress passes its deadline or the context ends. The
// discovery goroutine is then abandoned: it may never come back from the
// driver. If it does, it makes no further calls but nvmlShutdown, which
// balances its nvmlInit, and exits.
//
// Watching costs a mutex and a clock read per call, not a goroutine switch:
// the watcher wakes once per deadline, not once per call.
type caller struct {
	ctx         context.Context
	timeout     time.Duration
	initTimeout time.Duration
	counter     *atomic.Int64
	// log, when set, gets each call and its duration (debug).
	log Logger

	abandoned atomic.Bool

	mu      sync.Mutex
	inCall  bool
	cur     op
	started time.Time
	limit   time.Duration // the current call's deadline, from started
}

// errAbandoned stops an abandoned discovery; nobody reads it.
var errAbandoned = errors.New("nvml discovery abandoned")

func newCaller(ctx context.Context, timeout, initTimeout time.Duration, counter *atomic.Int64, log Logger) *caller {
	return &caller{ctx: ctx, timeout: timeout, initTimeout: initTimeout, counter: counter, log: log}
}

// do runs f, one NVML call, on the discovery goroutine under a deadline of
// timeout that wait enforces.
func (c *caller) do(o op, timeout time.Duration, f func()) (err error) {
	if c.abandoned.Load() {
		return errAbandoned
	}
	if err := c.ctx.Err(); err != nil {
		return ctxErr(o, false, err, 0)
	}
	if c.counter != nil {
		c.counter.Add(1)
	}
	started := time.Now()
	c.mu.Lock()
	c.inCall, c.cur, c.started, c.limit = true, o, started, timeout
	c.mu.Unlock()
	defer func() {
		if c.log != nil {
			c.log.Debugf("nvml: %s took %s", o, time.Since(started))
		}
		// A panic in a binding (a mock's unset method, a handle of the
		// wrong kind) becomes a discovery error instead of killing an
		// init container.
		p := recover()
		c.mu.Lock()
		c.inCall = false
		c.mu.Unlock()
		if p != nil {
			err = &topology.DiscoveryError{
				Class:       verdict.ClassUnknown,
				Op:          o.String(),
				Message:     fmt.Sprintf("%sthe NVML binding panicked: %v", o.subject(), p),
				Remediation: remediationPanic,
				Err:         fmt.Errorf("panic in %s: %v", o, p),
			}
		}
	}()
	f()
	if c.abandoned.Load() {
		return errAbandoned
	}
	return nil
}

type result struct {
	inv *topology.Inventory
	err error
}

// wait returns the discovery's result, or gives up on it when a call
// passes its deadline or the context ends.
func (c *caller) wait(res <-chan result) (*topology.Inventory, error) {
	// The first call is nvmlInit.
	timer := time.NewTimer(min(c.timeout, c.initTimeout))
	defer timer.Stop()
	for {
		select {
		case r := <-res:
			return r.inv, r.err
		case <-c.ctx.Done():
			c.abandoned.Store(true)
			c.mu.Lock()
			o, inCall, waited := c.cur, c.inCall, time.Since(c.started)
			c.mu.Unlock()
			return nil, ctxErr(o, inCall, c.ctx.Err(), waited)
		case <-timer.C:
			c.mu.Lock()
			inCall, o, waited, limit := c.inCall, c.cur, time.Since(c.started), c.limit
			c.mu.Unlock()
			switch {
			case !inCall:
				// Between calls: look again after a full deadline.
				timer.Reset(c.timeout)
			case waited >= limit:
				c.abandoned.Store(true)
				return nil, hungError(o, waited, context.DeadlineExceeded)
			default:
				timer.Reset(limit - waited)
			}
		}
	}
}

// ctxErr reports the end of the context. A deadline that passes during a
// call is that call's deadline: the call hung. Otherwise (cancellation, or
// a deadline between calls) the caller stopped discovery, and the error
// wraps the context's.
func ctxErr(o op, inCall bool, err error, waited time.Duration) error {
	if inCall && errors.Is(err, context.DeadlineExceeded) {
		return hungError(o, waited, err)
	}
	if o.fn == "" {
		return fmt.Errorf("nvml discovery stopped: %w", err)
	}
	if inCall {
		return fmt.Errorf("nvml discovery stopped during %s: %w", o, err)
	}
	return fmt.Errorf("nvml discovery stopped near %s: %w", o, err)
}

// Typed helpers: they hand a call's results back only when it completed.

func callRet(c *caller, o op, f func() nvml.Return) (nvml.Return, error) {
	var r nvml.Return
	err := c.do(o, c.timeout, func() { r = f() })
	return r, err
}

func callInit(c *caller, f func() nvml.Return) (nvml.Return, error) {
	var r nvml.Return
	err := c.do(sysOp("nvmlInit"), c.initTimeout, func() { r = f() })
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
	return call0(c, o, func() (A, nvml.Return) { return f(x) })
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
