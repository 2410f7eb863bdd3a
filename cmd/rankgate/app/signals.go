package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"github.com/rankgate/rankgate/verdict"
)

// interrupts turns SIGINT and SIGTERM into the end of a command. The first
// cancels the command's context: it stops what it waits for (standard
// input, NVML, the API server, the gate), cleans up and returns with its
// own exit code (128+N where it was reading its input). A second one exits
// at once with 128+N, whatever the first one's cleanup still waits for.
//
// launch takes the signals over before it starts CMD: from then on it
// forwards every signal to CMD's process group and ends it within
// --grace, so that no process CMD started outlives it.
type interrupts struct {
	cancel context.CancelFunc
	exit   func(code int)
	stderr io.Writer

	mu        sync.Mutex
	got       os.Signal
	takenOver bool
}

// watch handles the signals that arrive on sigs until it is closed.
func (h *interrupts) watch(sigs <-chan os.Signal) {
	for sig := range sigs {
		h.handle(sig)
	}
}

func (h *interrupts) handle(sig os.Signal) {
	h.mu.Lock()
	if h.takenOver {
		h.mu.Unlock()
		return
	}
	first := h.got == nil
	if first {
		h.got = sig
	}
	h.mu.Unlock()
	if first {
		h.cancel()
		return
	}
	fmt.Fprintf(h.stderr, "rankgate: %s again: exiting without waiting for the cleanup\n", signalName(sig))
	h.exit(signalExitCode(sig))
}

// takeOver stops the handling: the command handles the signals itself.
func (h *interrupts) takeOver() {
	h.mu.Lock()
	h.takenOver = true
	h.mu.Unlock()
}

// signal is the first signal received, nil if none.
func (h *interrupts) signal() os.Signal {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got
}

func signalExitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 128 + int(syscall.SIGTERM)
}

func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

type interruptsKey struct{}

// interrupted returns the exit for an error that a signal caused by
// cancelling ctx (a read of standard input cut short is not bad input):
// 128+N, and ok false when no signal ended ctx.
func interrupted(ctx context.Context, err error) (exit error, ok bool) {
	h, isSet := ctx.Value(interruptsKey{}).(*interrupts)
	if !isSet || !errors.Is(err, context.Canceled) {
		return nil, false
	}
	sig := h.signal()
	if sig == nil {
		return nil, false
	}
	return verdict.Exitf(signalExitCode(sig), "%s: %w", signalName(sig), err), true
}

// takeOverSignals tells Main's handler that the command now handles
// SIGINT and SIGTERM itself (launch, once CMD is about to start). A no-op
// when the command runs in-process (tests).
func takeOverSignals(ctx context.Context) {
	if h, ok := ctx.Value(interruptsKey{}).(*interrupts); ok {
		h.takeOver()
	}
}
