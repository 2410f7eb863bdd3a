package verdict

import (
	"context"
	"errors"
	"fmt"
)

// Exit codes of preflight, init, launch and diagnose: a public contract
// (docs/rules.md). launch otherwise returns its child's own code.
const (
	ExitPass        = 0 // pass, warnings allowed
	ExitFail        = 1 // verdict fail
	ExitUsage       = 2 // usage or bad input
	ExitEnvironment = 3 // NVML missing, driver error, API unreachable
	ExitTimeout     = 4 // gang wait or NCCL init deadline
)

// ExitCoder is an error that knows its exit code. The project's error types
// (bad input, discovery failure, unknown object, ...) implement it, so that
// Code can classify them without this package importing theirs.
type ExitCoder interface {
	error
	ExitCode() int
}

// ExitError carries an exit code and an optional message. A nil Err means
// the message was already printed (a report).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode is e's code.
func (e *ExitError) ExitCode() int { return e.Code }

// Exitf builds an ExitError with a formatted message (%w wraps).
func Exitf(code int, format string, args ...any) error {
	return &ExitError{Code: code, Err: fmt.Errorf(format, args...)}
}

// WithCode gives err an exit code; nil stays nil.
func WithCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{Code: code, Err: err}
}

// Silent is an exit with code whose reason was already printed.
func Silent(code int) error { return &ExitError{Code: code} }

// Quiet keeps err's exit code but marks its message as already told to
// the user (a report that carries it was printed); nil stays nil.
func Quiet(err error) error {
	if err == nil {
		return nil
	}
	return &quietError{err}
}

type quietError struct{ err error }

func (e *quietError) Error() string { return e.err.Error() }
func (e *quietError) Unwrap() error { return e.err }

// Code is the one classifier from errors to exit codes:
//   - nil: ExitPass;
//   - the outermost error in the chain that implements ExitCoder: its code;
//   - a deadline: ExitTimeout;
//   - anything else: ExitEnvironment (the tool could not do its job, and the
//     cause is not the user's input).
func Code(err error) int {
	if err == nil {
		return ExitPass
	}
	var ec ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ExitTimeout
	}
	return ExitEnvironment
}

// Message is err's text for the user, or "" when there is none to print
// (a Silent exit, whose reason was already printed).
func Message(err error) string {
	if err == nil {
		return ""
	}
	if ee, ok := err.(*ExitError); ok && ee.Err == nil {
		return ""
	}
	if _, ok := err.(*quietError); ok {
		return ""
	}
	return err.Error()
}
