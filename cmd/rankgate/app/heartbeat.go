package app

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// defaultHeartbeat is the interval of the progress lines of init and
// launch while they wait.
const defaultHeartbeat = 10 * time.Second

// refreshTimeout bounds the heartbeat's own verdict poll.
const refreshTimeout = 5 * time.Second

// progressOptions are the flags of the faces that wait (init, launch).
type progressOptions struct {
	Quiet     bool
	Heartbeat time.Duration
}

func (o *progressOptions) addFlags(f *pflag.FlagSet) {
	f.BoolVarP(&o.Quiet, "quiet", "q", false, "no progress lines while waiting (gang verdict, NCCL init); errors, findings and verdicts are still printed")
	f.DurationVar(&o.Heartbeat, "heartbeat", defaultHeartbeat, "interval of the progress lines while waiting")
	_ = f.MarkHidden("heartbeat")
}

func (o *progressOptions) check() error {
	if o.Heartbeat <= 0 {
		return verdict.Exitf(verdict.ExitUsage, "--heartbeat must be positive")
	}
	return nil
}

// interval is the heartbeat's, 0 under --quiet.
func (o *progressOptions) interval() time.Duration {
	if o.Quiet {
		return 0
	}
	return o.Heartbeat
}

// heartbeat tells the person at the console that rankgate still waits for
// the gang verdict: what for, the ranks reported of expected, the time left
// until the deadline. At most one line per interval: the first answer of
// the gate is announced at once (unless a line was printed already), then
// a line each interval. The gate holds a poll up to 30s; when its last
// answer is older than the interval, the heartbeat asks for the counts
// with a poll that does not wait (one cheap GET per interval). A nil
// heartbeat (--quiet) prints nothing.
type heartbeat struct {
	w        io.Writer
	interval time.Duration
	prefix   string // "rankgate init: ", "rankgate: "
	pod      string // namespace/name, until the gate names the job
	limit    string // the flag of the local deadline: "--timeout"
	end      time.Time
	// announce is the line for the gate's first "waiting" answer.
	announce func(r *gate.Response) string
	// refresh asks the gate for the counts without waiting.
	refresh func(ctx context.Context) (*gate.Response, error)
	now     func() time.Time

	mu       sync.Mutex
	last     *gate.Response
	lastAt   time.Time
	printed  time.Time
	lines    int
	retryErr error
}

// newHeartbeat returns nil (silent) when interval is 0.
func newHeartbeat(w io.Writer, interval time.Duration, prefix, pod, limit string, end time.Time) *heartbeat {
	if interval <= 0 {
		return nil
	}
	return &heartbeat{w: w, interval: interval, prefix: prefix, pod: pod, limit: limit, end: end, now: time.Now}
}

// waiting records a "waiting" answer of the gate.
func (h *heartbeat) waiting(r *gate.Response) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.record(r)
	if h.lines == 0 && h.announce != nil {
		h.printLocked(h.announce(r))
	}
}

func (h *heartbeat) record(r *gate.Response) {
	h.last, h.lastAt, h.retryErr = r, h.now(), nil
}

// retrying records a failed attempt to reach the gate.
func (h *heartbeat) retrying(err error) {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.retryErr = err
	h.mu.Unlock()
}

// start prints a line each interval until the returned stop is called;
// stop returns once no more line can be printed.
func (h *heartbeat) start(ctx context.Context) (stop func()) {
	if h == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	h.mu.Lock()
	h.printed = h.now() // the first line one interval after the start
	h.mu.Unlock()
	go func() {
		defer close(done)
		for {
			h.mu.Lock()
			next := h.printed.Add(h.interval).Sub(h.now())
			h.mu.Unlock()
			t := time.NewTimer(max(next, time.Millisecond))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			h.tick(ctx)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// tick prints a line when an interval has passed since the last one.
func (h *heartbeat) tick(ctx context.Context) {
	h.mu.Lock()
	if h.now().Sub(h.printed) < h.interval {
		h.mu.Unlock()
		return
	}
	stale := h.refresh != nil && h.now().Sub(h.lastAt) >= h.interval
	h.mu.Unlock()
	if stale {
		rctx, cancel := context.WithTimeout(ctx, refreshTimeout)
		r, err := h.refresh(rctx)
		cancel()
		if ctx.Err() != nil {
			return // stopped meanwhile: the verdict is being printed
		}
		h.mu.Lock()
		switch {
		case err != nil:
			h.retryErr = err
		case r.State == gate.StateDecided:
			h.mu.Unlock()
			return // the verdict is on its way
		default:
			h.record(r)
		}
		h.mu.Unlock()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.printLocked(h.line())
}

func (h *heartbeat) printLocked(s string) {
	fmt.Fprintf(h.w, "%s%s\n", h.prefix, s)
	h.printed = h.now()
	h.lines++
}

// line is the progress line from what the gate said last.
func (h *heartbeat) line() string {
	now := h.now()
	r := h.last
	if r == nil {
		s := fmt.Sprintf("waiting for the gang verdict of pod %s: no answer from the gate yet", h.pod)
		if h.retryErr != nil {
			s += fmt.Sprintf(" (%v)", h.retryErr)
		}
		return s + "; " + timeLeft(h.end.Sub(now), h.limit)
	}
	s := fmt.Sprintf("waiting for the gang verdict of %s: %d of %d ranks reported", r.Job, r.Reported, r.Expected)
	if h.retryErr != nil {
		s += fmt.Sprintf(" (%s ago; the gate is not answering now: %v)", now.Sub(h.lastAt).Round(time.Second), h.retryErr)
	}
	if r.Deadline != nil && r.Deadline.Before(h.end) {
		left := r.Deadline.Sub(now)
		if left <= 0 {
			return s + "; the gang deadline has passed, the verdict is due"
		}
		return s + "; " + timeLeft(left, "the gang deadline")
	}
	return s + "; " + timeLeft(h.end.Sub(now), h.limit)
}

func timeLeft(d time.Duration, until string) string {
	return fmt.Sprintf("%s left until %s", max(d, 0).Round(time.Second), until)
}
