package gate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rankgate/rankgate/verdict"
)

// WaitError: a rank got no gang verdict. Err is what ended the wait (the
// deadline, a signal, a refusal by the gate, ...).
type WaitError struct {
	Err error
	// Timeout is the rank's whole deadline (rankgate init --timeout) and
	// Waited how long it waited for the verdict.
	Timeout, Waited time.Duration
}

func (e *WaitError) Error() string {
	var ge *Error
	switch {
	case errors.Is(e.Err, context.DeadlineExceeded):
		return fmt.Sprintf("no gang verdict within --timeout %s (waited %s): %v", e.Timeout, e.Waited.Round(time.Second), e.Err)
	case errors.Is(e.Err, context.Canceled):
		return fmt.Sprintf("interrupted while waiting for the gang verdict: %v", e.Err)
	case errors.As(e.Err, &ge):
		return fmt.Sprintf("the gate refused this rank: %s: %s", ge.Code, ge.Message)
	}
	return e.Err.Error()
}

func (e *WaitError) Unwrap() error { return e.Err }

// ExitCode: 4 at the deadline, 3 when interrupted or the gate cannot be
// used, 2 when the gate refused the request or the pod for good.
func (e *WaitError) ExitCode() int {
	var ge *Error
	switch {
	case errors.Is(e.Err, context.DeadlineExceeded):
		return verdict.ExitTimeout
	case errors.Is(e.Err, context.Canceled):
		return verdict.ExitEnvironment
	case errors.As(e.Err, &ge):
		return ge.ExitCode()
	}
	return verdict.ExitEnvironment
}
