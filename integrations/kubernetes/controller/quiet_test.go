package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestQuietGateIdleDoesNotWait(t *testing.T) {
	q := newQuietGate(time.Hour, nil)
	start := time.Now()
	q.wait(context.Background(), time.Hour)
	require.Less(t, time.Since(start), time.Second)
	require.False(t, q.busy())
}

// Busy while a verdict write is in flight and until none has started for
// the quiet time; a write started within that time extends it.
func TestQuietGateWaitsForTheGapAfterWrites(t *testing.T) {
	const quiet = 100 * time.Millisecond
	q := newQuietGate(quiet, nil)
	waiter := func() <-chan time.Time {
		woke := make(chan time.Time, 1)
		go func() {
			q.wait(context.Background(), time.Minute)
			woke <- time.Now()
		}()
		return woke
	}

	// A long write: nobody goes while it is in flight, and since it
	// started longer ago than the quiet time, they go when it ends.
	q.begin()
	require.True(t, q.busy())
	woke := waiter()
	time.Sleep(150 * time.Millisecond)
	select {
	case <-woke:
		t.Fatal("a waiter woke while a verdict write was in flight")
	default:
	}
	q.end()
	select {
	case <-woke:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not go when the write ended")
	}

	// Short writes: the waiter goes a quiet time after the last start.
	q.begin()
	q.end()
	woke = waiter()
	time.Sleep(quiet / 2)
	second := time.Now() // at or before the start begin records
	q.begin()
	q.end()
	at := <-woke
	require.False(t, at.Before(second.Add(quiet)), "woke %s after the second write started, before the quiet time", at.Sub(second))
	require.False(t, q.busy())
	// Quiet again: no wait.
	start := time.Now()
	q.wait(context.Background(), time.Minute)
	require.Less(t, time.Since(start), 50*time.Millisecond)
}

// Under a stream of writes with no gap, a waiter goes after its longest
// wait; a canceled context ends the wait at once.
func TestQuietGateWaitIsBounded(t *testing.T) {
	q := newQuietGate(time.Hour, nil)
	q.begin()
	q.end()
	start := time.Now()
	q.wait(context.Background(), 80*time.Millisecond)
	took := time.Since(start)
	require.GreaterOrEqual(t, took, 80*time.Millisecond)
	require.Less(t, took, 5*time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start = time.Now()
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
