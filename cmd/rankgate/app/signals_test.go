package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

// fakeExit records the code the handler exits with.
type fakeExit chan int

func (f fakeExit) exit(code int) { f <- code }

func newInterrupts() (*interrupts, context.Context, fakeExit, *bytes.Buffer) {
	ctx, cancel := context.WithCancel(context.Background())
	exits := make(fakeExit, 2)
	var stderr bytes.Buffer
	return &interrupts{cancel: cancel, exit: exits.exit, stderr: &stderr}, ctx, exits, &stderr
}

func TestFirstSignalCancelsSecondExits(t *testing.T) {
	for _, tc := range []struct {
		sig  os.Signal
		code int
		name string
	}{
		{syscall.SIGTERM, 143, "SIGTERM"},
		{os.Interrupt, 130, "SIGINT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ctx, exits, stderr := newInterrupts()
			sigs := make(chan os.Signal, 2)
			go h.watch(sigs)
			defer close(sigs)

			sigs <- tc.sig
			<-ctx.Done()
			select {
			case code := <-exits:
				t.Fatalf("the first signal exited (%d): it must only cancel", code)
			case <-time.After(50 * time.Millisecond):
			}
			// The command's cleanup is still running (nothing returned):
			// the second signal exits anyway, at once.
			sigs <- tc.sig
			select {
			case code := <-exits:
				require.Equal(t, tc.code, code)
			case <-time.After(5 * time.Second):
				t.Fatal("the second signal did not exit")
			}
			require.Equal(t, "rankgate: "+tc.name+" again: exiting without waiting for the cleanup\n", stderr.String())
		})
	}
}

// An input read cut short by a signal exits 128+N, not 2 (bad input).
func TestInterruptedReadExitsWithTheSignal(t *testing.T) {
	h, ctx, _, _ := newInterrupts()
	ctx = context.WithValue(ctx, interruptsKey{}, h)
	cut := fmt.Errorf("standard input: %w", context.Canceled)
	_, ok := interrupted(ctx, cut)
	require.False(t, ok, "no signal yet")
	h.handle(syscall.SIGTERM)
	exit, ok := interrupted(ctx, cut)
	require.True(t, ok)
	var ee *verdict.ExitError
	require.ErrorAs(t, exit, &ee)
	require.Equal(t, 143, ee.Code)
	require.Equal(t, "SIGTERM: standard input: context canceled", ee.Error())
	_, ok = interrupted(ctx, errors.New("a syntax error"))
	require.False(t, ok, "an error the signal did not cause keeps its code")

	var ee2 *verdict.ExitError
	require.ErrorAs(t, inputError(ctx, cut), &ee2)
	require.Equal(t, 143, ee2.Code)
	require.ErrorAs(t, inputError(ctx, errors.New("bad")), &ee2)
	require.Equal(t, 2, ee2.Code)

	h, ctx, _, _ = newInterrupts()
	h.handle(os.Interrupt)
	exit, ok = interrupted(context.WithValue(ctx, interruptsKey{}, h), cut)
	require.True(t, ok)
	require.ErrorAs(t, exit, &ee)
	require.Equal(t, 130, ee.Code)

	// In-process, without Main's handler: nothing to map.
	_, ok = interrupted(context.Background(), cut)
	require.False(t, ok)
}

// launch forwards signals to CMD's group itself: once it took them over,
// the handler neither cancels nor exits (rankgate must not leave CMD's
// processes behind), and the exit code is CMD's.
func TestTakenOverSignalsAreLeftToTheCommand(t *testing.T) {
	h, ctx, exits, _ := newInterrupts()
	takeOverSignals(context.WithValue(ctx, interruptsKey{}, h))
	h.handle(syscall.SIGTERM)
	h.handle(syscall.SIGTERM)
	require.NoError(t, ctx.Err())
	require.Empty(t, exits)

	// In-process (no handler in the context) it is a no-op.
	takeOverSignals(context.Background())
}
