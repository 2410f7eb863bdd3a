package gate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rankgate/rankgate/verdict"
)

// RankOptions configure one rank's side of the gang protocol.
type RankOptions struct {
	Namespace, Pod string
	// Poll is the long-poll wait of each request (default 30s).
	Poll time.Duration
	// Timeout is the rank's whole deadline, for WaitError's message; the
	// context passed to the calls enforces it.
	Timeout time.Duration
	// OnRetry is told about each failed attempt (the gate unreachable or
	// not ready), OnWaiting about each "waiting" answer, OnWarmUp about a
	// failed warm-up (only worth a debug line).
	OnRetry   func(err error, delay time.Duration)
	OnWaiting func(r *Response)
	OnWarmUp  func(err error)
}

// Waits of the rank side, fixed by the protocol.
const (
	// warmUpTimeout bounds the warm-up poll; warmUpWait is how long the
	// report waits for a warm-up still in flight.
	warmUpTimeout = 10 * time.Second
	warmUpWait    = 5 * time.Second
	// failedReportTimeout bounds the wait for the gate's answer once this
	// rank's own verdict is fail: the gang fails at once, the rank does not
	// need the answer.
	failedReportTimeout = 30 * time.Second
	// uncheckedTimeout and uncheckedPoll bound telling the gate that this
	// rank could not check its devices.
	uncheckedTimeout = 20 * time.Second
	uncheckedPoll    = 5 * time.Second
)

// Rank is one rank's side of the gang protocol: warm-up, report,
// long-poll and re-send (Client.Await).
type Rank struct {
	c    *Client
	o    RankOptions
	warm chan struct{}
}

// StartRank begins a rank's session: while the devices are discovered
// (seconds with NVML), it opens the connection and gets the token reviewed
// with a verdict poll that does not wait, so that the report finds both
// ready.
func (c *Client) StartRank(ctx context.Context, o RankOptions) *Rank {
	r := &Rank{c: c, o: o, warm: make(chan struct{})}
	go func() {
		defer close(r.warm)
		wctx, stop := context.WithTimeout(ctx, warmUpTimeout)
		defer stop()
		if _, err := c.Verdict(wctx, o.Namespace, o.Pod, 0); err != nil && o.OnWarmUp != nil {
			o.OnWarmUp(err)
		}
	}()
	return r
}

// Unchecked tells the gate that this rank could not check its devices
// (rankgate init exit code, and why), so that the gang fails now rather
// than at its deadline. The wait is short: the rank exits with its own
// code either way.
func (r *Rank) Unchecked(ctx context.Context, node string, code int, reason string) error {
	if reason == "" {
		reason = "see its init container's log and termination message"
	}
	req := &ReportRequest{APIVersion: APIVersion, Namespace: r.o.Namespace, Pod: r.o.Pod, Node: node}
	req.Report = verdict.NewReport(node, []verdict.Finding{{
		Rule: verdict.RuleRankEnvironment, Severity: verdict.SeverityFail,
		Message:     fmt.Sprintf("rank pod %s/%s could not check its devices (rankgate init exit %d): %s", r.o.Namespace, r.o.Pod, code, reason),
		Remediation: "fix the node's driver or NVML access (kubectl logs POD -c rankgate-init), then resume the job",
	}})
	short, stop := context.WithTimeout(ctx, uncheckedTimeout)
	defer stop()
	_, err := r.c.Await(short, req, AwaitOptions{Poll: uncheckedPoll})
	return err
}

// Report sends this rank's report and waits for the gang verdict,
// re-sending on every poll. When the rank's own verdict is fail, the gang
// fails at once and the wait is short. A wait that ends without a verdict
// is a *WaitError.
func (r *Rank) Report(ctx context.Context, req *ReportRequest) (*Response, error) {
	req.APIVersion, req.Namespace, req.Pod = APIVersion, r.o.Namespace, r.o.Pod
	if req.Report.Failed() {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, failedReportTimeout)
		defer stop()
	}
	t := time.NewTimer(warmUpWait)
	select {
	case <-r.warm:
	case <-t.C:
	}
	t.Stop()
	started := time.Now()
	resp, err := r.c.Await(ctx, req, AwaitOptions{Poll: r.o.Poll, OnRetry: r.o.OnRetry, OnWaiting: r.o.OnWaiting})
	if err != nil {
		return resp, &WaitError{Err: err, Timeout: r.o.Timeout, Waited: time.Since(started)}
	}
	return resp, nil
}

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
