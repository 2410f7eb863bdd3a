package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestQuietGateIdleDoesNotWait(t *testing.T) {
	q := newQuietGate(time.Hour, nil)
	start := time.Now()
	q.wait(context.Background(), time.Hour)
	require.Less(t, time.Since(start), time.Second)
	require.False(t, q.busy())
}

// quietClock is a fake clock for a quiet gate, and a waiter on the gate
// that says whether it woke.
func quietClock(t *testing.T, q func(*armingClock) *quietGate) (*armingClock, *quietGate, func(most time.Duration) func() bool) {
	clk := &armingClock{FakeClock: clocktesting.NewFakeClock(t0)}
	g := q(clk)
	waiter := func(most time.Duration) func() bool {
		woke := make(chan struct{})
		go func() {
			g.wait(context.Background(), most)
			close(woke)
		}()
		// Waiting: its bound is armed.
		require.Eventually(t, func() bool { return clk.take(most) }, eventually, tick)
		return func() bool {
			select {
			case <-woke:
				return true
			default:
				return false
			}
		}
	}
	return clk, g, waiter
}

// Busy while a verdict write is in flight and until none has started for
// the quiet time; a write started within that time extends it.
func TestQuietGateWaitsForTheGapAfterWrites(t *testing.T) {
	const quiet = 100 * time.Millisecond
	clk, q, waiter := quietClock(t, func(c *armingClock) *quietGate { return newQuietGate(quiet, c) })

	// A long write: nobody goes while it is in flight (not even when the
	// quiet time after an earlier write ends meanwhile), and since it
	// started longer ago than the quiet time, they go when it ends.
	q.begin()
	q.end()
	q.begin()
	require.True(t, q.busy())
	woke := waiter(time.Minute)
	clk.Step(quiet + quiet/2)
	require.Never(t, woke, 50*time.Millisecond, tick, "a waiter woke while a verdict write was in flight")
	q.end()
	require.Eventually(t, woke, eventually, tick, "the waiter did not go when the write ended")
	require.False(t, q.busy())

	// Short writes: the waiter goes a quiet time after the last start.
	q.begin()
	q.end()
	woke = waiter(time.Minute)
	clk.Step(quiet / 2)
	q.begin() // a second write, half a quiet time after the first
	q.end()
	clk.Step(quiet / 2)
	require.Never(t, woke, 50*time.Millisecond, tick, "woke a quiet time after the first write, not the last")
	clk.Step(quiet/2 - time.Millisecond)
	require.Never(t, woke, 50*time.Millisecond, tick, "woke before the quiet time")
	require.True(t, q.busy())
	clk.Step(time.Millisecond)
	require.Eventually(t, woke, eventually, tick)
	require.False(t, q.busy())
	// Quiet again: no wait.
	start := time.Now()
	q.wait(context.Background(), time.Minute)
	require.Less(t, time.Since(start), time.Second)
}

// Under a stream of writes with no gap, a waiter goes after its longest
// wait; a canceled context ends the wait at once.
func TestQuietGateWaitIsBounded(t *testing.T) {
	clk, q, waiter := quietClock(t, func(c *armingClock) *quietGate { return newQuietGate(time.Hour, c) })
	q.begin()
	q.end()
	woke := waiter(80 * time.Millisecond)
	clk.Step(80*time.Millisecond - time.Millisecond)
	require.Never(t, woke, 50*time.Millisecond, tick, "went before its longest wait")
	clk.Step(time.Millisecond)
	require.Eventually(t, woke, eventually, tick)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	q.wait(ctx, time.Hour)
	require.Less(t, time.Since(start), time.Second)
	require.True(t, q.busy())
}

// Many waiters share one channel and all wake when the gate turns quiet.
func TestQuietGateWakesEveryWaiter(t *testing.T) {
	q := newQuietGate(30*time.Millisecond, nil)
	q.begin()
	var wg sync.WaitGroup
	for i := 0; i < 1000; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q.wait(context.Background(), time.Minute)
		}()
	}
	time.Sleep(20 * time.Millisecond)
	q.end()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("waiters still blocked after the gate turned quiet")
	}
	require.False(t, q.busy())
}

// Concurrent writers: the gate is quiet only after the last one ends.
func TestQuietGateConcurrentWriters(t *testing.T) {
	q := newQuietGate(time.Millisecond, nil)
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				q.begin()
				q.end()
			}
		}()
	}
	q.begin()
	wg.Wait()
	time.Sleep(5 * time.Millisecond)
	require.True(t, q.busy(), "quiet while a write is in flight")
	q.end()
	require.Eventually(t, func() bool { return !q.busy() }, 5*time.Second, time.Millisecond)
}
