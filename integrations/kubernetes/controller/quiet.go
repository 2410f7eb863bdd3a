package controller

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// quietGate tracks the verdict writes ranks wait for, so that the writes
// nobody waits for (job patches, Events, progress, the Applied condition)
// can wait for a gap after them: it is busy while a verdict write is in
// flight and until none has started for its quiet time. Waiters block on
// one channel, closed when the gate turns quiet, so any number of them
// cost nothing while they wait.
type quietGate struct {
	quiet time.Duration
	clk   clock.WithDelayedExecution

	mu       sync.Mutex
	inFlight int
	last     time.Time     // when the latest verdict write started
	ch       chan struct{} // non-nil while busy; closed when quiet
	timer    clock.Timer
}

// newQuietGate is a gate with quiet time quiet on clk (nil: the real clock).
func newQuietGate(quiet time.Duration, clk clock.WithTickerAndDelayedExecution) *quietGate {
	return &quietGate{quiet: quiet, clk: clockOr(clk)}
}

// begin marks a verdict write started.
func (q *quietGate) begin() {
	q.mu.Lock()
	q.inFlight++
	q.last = q.clk.Now()
	if q.ch == nil {
		q.ch = make(chan struct{})
	}
	q.mu.Unlock()
}

// end marks a verdict write finished.
func (q *quietGate) end() {
	q.mu.Lock()
	q.inFlight--
	q.settleLocked()
	q.mu.Unlock()
}

// settleLocked closes the channel if the gate is quiet now, or checks
// again when it will be (unless a write is in flight: its end checks).
func (q *quietGate) settleLocked() {
	if q.inFlight > 0 || q.ch == nil {
		return
	}
	left := q.quiet - q.clk.Since(q.last)
	if left <= 0 {
		close(q.ch)
		q.ch = nil
		return
	}
	// A new timer each time: one that fired is not reset (a fake clock
	// cannot fire an AfterFunc timer twice). Its function runs on its own
	// goroutine, as time.AfterFunc's (a fake clock runs it inline).
	if q.timer != nil {
		q.timer.Stop()
	}
	q.timer = q.clk.AfterFunc(left, func() { go q.settle() })
}

func (q *quietGate) settle() {
	q.mu.Lock()
	q.settleLocked()
	q.mu.Unlock()
}

// busy says whether a verdict write is in flight or started within the
// quiet time.
func (q *quietGate) busy() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ch != nil
}

// wait returns once the gate is quiet, after at most most, or when ctx
// ends.
func (q *quietGate) wait(ctx context.Context, most time.Duration) {
	q.mu.Lock()
	ch := q.ch
	q.mu.Unlock()
	if ch == nil {
		return
	}
	t := q.clk.NewTimer(most)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C():
	case <-ctx.Done():
	}
}
