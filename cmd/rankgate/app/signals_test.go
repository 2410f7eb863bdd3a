package app

import (
	"bytes"
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

func TestInterruptedCommandExitsWithTheSignal(t *testing.T) {
	h, _, _, _ := newInterrupts()
	require.Equal(t, 2, h.exitCode(2), "no signal: the command's code")
	h.handle(syscall.SIGTERM)
	require.Equal(t, 143, h.exitCode(2), "interrupted and failed: 128+SIGTERM")
	require.Equal(t, 143, h.exitCode(4))
	require.Equal(t, 0, h.exitCode(0), "a command that finished despite the signal succeeded")

	h, _, _, _ = newInterrupts()
	h.handle(os.Interrupt)
	require.Equal(t, 130, h.exitCode(1))
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
	require.Equal(t, 137, h.exitCode(137))

	// In-process (no handler in the context) it is a no-op.
	takeOverSignals(context.Background())
}
