//go:build linux

package launcher

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/rankgate/rankgate/verdict"
)

// supervision is the state of one supervise loop: the watchdog and
// ready-file timers (nil once CMD is ready or ending) and the grace timer
// after SIGTERM.
type supervision struct {
	r      *runner
	initC  <-chan time.Time
	fileC  <-chan time.Time
	progC  <-chan time.Time // progress lines while initC waits
	graceT *time.Timer
	graceC <-chan time.Time
}

// supervise runs until CMD (the group leader) exits.
func (r *runner) supervise(ctx context.Context, waitCh <-chan error, chld <-chan os.Signal) {
	st := &supervision{r: r}
	if r.watchdog {
		t := time.NewTimer(r.opts.InitTimeout)
		defer t.Stop()
		st.initC = t.C
		if r.opts.Progress > 0 {
			p := time.NewTicker(r.opts.Progress)
			defer p.Stop()
			st.progC = p.C
		}
	}
	if r.opts.ReadyFile != "" {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		st.fileC = t.C
	}
	defer func() {
		if st.graceT != nil {
			st.graceT.Stop()
		}
	}()
	ctxDone := ctx.Done()
	for {
		select {
		case <-waitCh:
			return
		case sig := <-r.opts.Signals:
			r.forward(sig)
			st.initC, st.fileC = nil, nil
			r.terminating = true
			st.startGrace()
		case <-ctxDone:
			ctxDone = nil
			st.terminate()
		case <-chld:
			reapAdopted(r.cmd.Process.Pid)
		case ev := <-r.mon.events:
			st.event(ev)
		case <-st.initC:
			st.initTimeout()
		case <-st.progC:
			if st.initC == nil || r.mon.ready.Load() {
				st.progC = nil // ready, timed out or ending
				continue
			}
			r.say(r.initProgress())
		case <-st.fileC:
			if _, err := os.Stat(r.opts.ReadyFile); err == nil {
				st.fileC = nil
				r.mon.markReady(fmt.Sprintf("--ready-file %s appeared", r.opts.ReadyFile))
			}
		case <-st.graceC:
			st.graceC = nil
			r.signalAll(syscall.SIGKILL)
			r.killed = true
		}
	}
}

// startGrace starts the grace period before SIGKILL, once.
func (st *supervision) startGrace() {
	if st.graceT == nil {
		st.r.graceEnd = time.Now().Add(st.r.opts.Grace)
		st.graceT = time.NewTimer(st.r.opts.Grace)
		st.graceC = st.graceT.C
	}
}

// terminate sends CMD's group SIGTERM and starts the grace period, once.
func (st *supervision) terminate() {
	st.initC, st.fileC = nil, nil
	if st.r.terminating {
		return
	}
	st.r.terminating = true
	st.r.signalAll(syscall.SIGTERM)
	st.startGrace()
}

// event handles what the monitor saw in CMD's output.
func (st *supervision) event(ev event) {
	r := st.r
	switch ev.kind {
	case evReady:
		r.readyAfter = time.Since(r.startedAt)
		st.initC, st.fileC = nil, nil
		if r.watchdog && !r.opts.Quiet {
			r.say(fmt.Sprintf("ready after %s: %s", r.readyAfter.Round(time.Millisecond), ev.how))
		}
	case evFatal:
		if r.reason == nil && !r.terminating {
			f := ev.finding
			r.reason = &f
			r.findings = append(r.findings, f)
			r.printFinding(f)
			r.say(fmt.Sprintf("aborting: terminating process group %d (SIGTERM, SIGKILL after %s)", r.pgid, r.opts.Grace))
			st.terminate()
		}
	case evFallback:
		f := ev.finding
		r.findings = append(r.findings, f)
		r.printFinding(f)
		if f.Severity == verdict.SeverityFail && r.reason == nil && !r.terminating {
			r.reason = &f
			r.say(fmt.Sprintf("--strict-transport: terminating process group %d", r.pgid))
			st.terminate()
		}
	}
}

// initTimeout: the NCCL init watchdog fired.
func (st *supervision) initTimeout() {
	r := st.r
	st.initC = nil
	if r.mon.ready.Load() {
		return // the ready event is queued
	}
	f := r.timeoutFinding()
	r.reason = &f
	r.findings = append(r.findings, f)
	r.printDiagnosis(f)
	r.say(fmt.Sprintf("terminating process group %d (SIGTERM, SIGKILL after %s)", r.pgid, r.opts.Grace))
	st.terminate()
}

// lateEvents handles what the output showed after CMD exited or was
// ended (the pumps read on until the end of its output): findings are
// recorded and printed; the first fatal one is returned.
func (r *runner) lateEvents() *verdict.Finding {
	var fatal *verdict.Finding
	for {
		select {
		case ev := <-r.mon.events:
			if ev.kind == evReady {
				r.readyAfter = time.Since(r.startedAt)
				continue
			}
			f := ev.finding
			r.findings = append(r.findings, f)
			if r.reason == nil {
				r.printFinding(f)
			}
			if ev.kind == evFatal && fatal == nil {
				fatal = &f
			}
		default:
			return fatal
		}
	}
}

// cleanup ends what is left of CMD's process group (and, as subreaper, of
// its other descendants) once CMD itself has exited: SIGTERM, the rest of
// the grace period, SIGKILL.
func (r *runner) cleanup() {
	if !r.alive() {
		return
	}
	if !r.terminating {
		r.terminating = true
		r.graceEnd = time.Now().Add(r.opts.Grace)
		r.signalAll(syscall.SIGTERM)
	}
	if r.killed {
		r.signalAll(syscall.SIGKILL)
	}
	var killedAt time.Time
	if r.killed {
		killedAt = time.Now()
	}
	poll := 2 * time.Millisecond
	for r.alive() {
		now := time.Now()
		if !r.killed && !now.Before(r.graceEnd) {
			r.signalAll(syscall.SIGKILL)
			r.killed, killedAt = true, now
		}
		if r.killed && now.Sub(killedAt) > killWait {
			r.say(fmt.Sprintf("processes of group %d outlived SIGKILL by %s (uninterruptible I/O?); leaving them", r.pgid, killWait))
			return
		}
		t := time.NewTimer(poll)
		select {
		case sig := <-r.opts.Signals:
			r.forward(sig)
		case <-t.C:
		}
		t.Stop()
		poll = min(poll*2, 20*time.Millisecond)
	}
}

func (r *runner) alive() bool {
	if r.opts.Subreaper {
		reapAdopted(0)
		if len(descendants(os.Getpid())) > 0 {
			return true
		}
	}
	return groupHasLive(r.pgid)
}

// signalAll signals CMD's group and, as subreaper, every descendant.
func (r *runner) signalAll(sig syscall.Signal) {
	_ = syscall.Kill(-r.pgid, sig)
	if r.opts.Subreaper {
		for _, p := range descendants(os.Getpid()) {
			_ = syscall.Kill(p.pid, sig)
		}
	}
}

// forward passes a signal rankgate received on to CMD's group.
func (r *runner) forward(sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok {
		_ = syscall.Kill(-r.pgid, s)
	}
}

// drain waits for the pumps to reach the end of CMD's output. A pipe that
// stays silent after the group is gone is held open by a process that
// left it; its pump gives up so that rankgate can exit.
func (r *runner) drain(pumps []*pump) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for _, p := range pumps {
		for done := false; !done; {
			select {
			case <-p.done:
				done = true
			case <-t.C:
				if p.idle() > drainIdle {
					p.abandon.Store(true)
				}
			}
		}
	}
}
