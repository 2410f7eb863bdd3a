package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
)

// interrupts turns SIGINT and SIGTERM into the end of a command. The first
// cancels the command's context: it stops what it waits for (standard
// input, NVML, the API server, the gate), cleans up and returns, and the
// process exits 128+N if the command did not succeed. A second one exits
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

// exitCode is the process's exit code for a command that returned code:
// 128+N when signal N interrupted a command that did not succeed.
func (h *interrupts) exitCode(code int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.got == nil || h.takenOver || code == 0 {
		return code
	}
	return signalExitCode(h.got)
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

// takeOverSignals tells Main's handler that the command now handles
// SIGINT and SIGTERM itself (launch, once CMD is about to start). A no-op
// when the command runs in-process (tests).
func takeOverSignals(ctx context.Context) {
	if h, ok := ctx.Value(interruptsKey{}).(*interrupts); ok {
		h.takeOver()
	}
}
