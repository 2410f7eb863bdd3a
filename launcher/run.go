//go:build linux

package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/rankgate/rankgate/verdict"
)

const (
	// pumpBuf is the most a pump moves at once; pipeSize the kernel
	// buffer of CMD's pipes and of destination pipes (F_SETPIPE_SZ, Linux'
	// default pipe-max-size).
	pumpBuf  = 256 << 10
	pipeSize = 1 << 20
	// drainIdle: once CMD's group is gone, a pipe that stays silent this
	// long is held by a process outside the group; stop reading it.
	drainIdle = 500 * time.Millisecond
	// killWait bounds the wait for a group after SIGKILL (a process in
	// uninterruptible sleep cannot die before its I/O ends).
	killWait = 2 * time.Second
)

// Run performs one launch: pre-launch checks, CMD, supervision. The error
// is non-nil when rankgate itself could not do its job (bad options, no
// pipes, CMD not found); Result.ExitCode is set either way.
func Run(ctx context.Context, opts Options) (Result, error) {
	if len(opts.Command) == 0 {
		return Result{ExitCode: verdict.ExitUsage}, errors.New("no command to launch (usage: rankgate launch [flags] -- CMD ARGS...)")
	}
	r := &runner{opts: opts, out: opts.Stdout, errw: &stderrWriter{w: opts.Stderr}}
	if r.out == nil {
		r.out = io.Discard
	}
	if r.errw.w == nil {
		r.errw.w = io.Discard
	}
	if opts.Env == nil {
		r.opts.Env = os.Environ()
	}
	if opts.Resolver == nil {
		r.opts.Resolver = net.DefaultResolver
	}
	if opts.Dialer == nil {
		r.opts.Dialer = &net.Dialer{}
	}
	if opts.SSHPort == 0 {
		r.opts.SSHPort = DefaultSSHPort
	}
	if opts.HostsTimeout == 0 {
		r.opts.HostsTimeout = DefaultHostsTimeout
	}
	if opts.Preflight != nil {
		r.findings = append(r.findings, opts.Preflight.Findings...)
	}
	return r.run(ctx)
}

type runner struct {
	opts     Options
	out      io.Writer
	errw     *stderrWriter
	findings []verdict.Finding
	mon      *monitor
	watchdog bool

	cmd       *exec.Cmd
	pgid      int
	startedAt time.Time

	reason      *verdict.Finding
	terminating bool
	killed      bool
	graceEnd    time.Time
	readyAfter  time.Duration
}

func (r *runner) run(ctx context.Context) (Result, error) {
	// Writing to a closed stdout must return EPIPE, not kill rankgate
	// (Go's default for fds 1 and 2) and leave CMD behind. A handled
	// signal, unlike an ignored one, is reset to default in CMD on exec.
	pipeCh := make(chan os.Signal, 1)
	signal.Notify(pipeCh, syscall.SIGPIPE)
	defer signal.Stop(pipeCh)

	if p := r.opts.Preflight; p != nil && p.Failed() {
		r.say("preflight verdict fail; CMD not started")
		reason := p.Reason(verdict.TerminationMax)
		r.writeTerminationLog(reason)
		return Result{ExitCode: verdict.ExitFail, Reason: reason, Findings: r.findings}, nil
	}
	if f, ok := r.checkNproc(); ok {
		return r.fail(f, verdict.ExitFor(f.Rule)), nil
	}
	if r.opts.MPIHostfile != "" {
		// A signal while the hosts are awaited ends the launch before CMD.
		hctx, cancel := context.WithCancel(ctx)
		got := make(chan os.Signal, 1)
		stop, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			select {
			case sig := <-r.opts.Signals:
				got <- sig
				cancel()
			case <-stop:
			}
		}()
		f, ok := r.checkHostfile(hctx)
		close(stop)
		<-stopped // a signal taken meanwhile is in got
		cancel()
		select {
		case sig := <-got:
			code := 128 + 15
			if s, isSys := sig.(syscall.Signal); isSys {
				code = 128 + int(s)
			}
			r.say(fmt.Sprintf("%v while waiting for the MPI hosts; CMD not started", sig))
			return Result{ExitCode: code, Findings: r.findings}, nil
		default:
		}
		if ok {
			return r.fail(f, verdict.ExitFor(f.Rule)), nil
		}
		if ctx.Err() != nil {
			return Result{ExitCode: verdict.ExitTimeout, Findings: r.findings}, ctx.Err()
		}
	}
	env := r.prepareEnv()
	if r.opts.Subreaper {
		if err := becomeSubreaper(); err != nil {
			r.say(fmt.Sprintf("cannot become child subreaper (%v); processes that leave CMD's process group may outlive it", err))
			r.opts.Subreaper = false
		}
	}
	return r.start(ctx, env)
}

// fail ends a launch that rankgate refuses or aborts before CMD started.
func (r *runner) fail(f verdict.Finding, code int) Result {
	r.findings = append(r.findings, f)
	r.printFinding(f)
	reason := oneFinding(f)
	r.writeTerminationLog(reason)
	return Result{ExitCode: code, Reason: reason, Findings: r.findings}
}

// start runs CMD and supervises it to the end.
func (r *runner) start(ctx context.Context, env []string) (Result, error) {
	res := Result{Findings: r.findings}
	argv := r.opts.Command
	cmd := exec.Command(argv[0], argv[1:]...)
	if cmd.Err != nil {
		res.ExitCode = startErrorCode(cmd.Err)
		return res, fmt.Errorf("%s: %w", argv[0], cmd.Err)
	}
	cmd.Env = env
	cmd.Dir = r.opts.Dir
	cmd.Stdin = r.opts.Stdin
	cmd.SysProcAttr = sysProcAttr()
	outR, outW, err := newPipe()
	if err != nil {
		res.ExitCode = verdict.ExitEnvironment
		return res, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := newPipe()
	if err != nil {
		syscall.Close(outR)
		outW.Close()
		res.ExitCode = verdict.ExitEnvironment
		return res, fmt.Errorf("stderr pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW

	var chld chan os.Signal
	if r.opts.Subreaper {
		chld = make(chan os.Signal, 1)
		signal.Notify(chld, syscall.SIGCHLD)
		defer signal.Stop(chld)
	}
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		syscall.Close(outR)
		syscall.Close(errR)
		res.ExitCode = startErrorCode(err)
		return res, fmt.Errorf("start %s: %w", argv[0], err)
	}
	r.cmd = cmd
	r.pgid = cmd.Process.Pid
	r.startedAt = time.Now()
	res.Started = true

	pumps := []*pump{
		newPump(outR, r.out, r.mon),
		newPump(errR, r.errw, r.mon),
	}
	for _, p := range pumps {
		go p.run()
	}
	waitCh := make(chan error, 1)
	go func() { waitCh <- cmd.Wait() }()

	r.supervise(ctx, waitCh, chld)
	r.cleanup()
	res.Elapsed = time.Since(r.startedAt)
	r.drain(pumps)
	late := r.lateEvents()

	res.Transports = r.mon.transportCounts()
	if r.mon.ready.Load() {
		res.Ready, res.ReadyAfter = true, r.readyAfter
	}
	switch {
	case r.reason != nil:
		res.ExitCode = verdict.ExitFor(r.reason.Rule)
		res.Reason = oneFinding(*r.reason)
		r.writeTerminationLog(res.Reason)
	default:
		res.ExitCode = exitStatus(cmd.ProcessState)
		// CMD failed by itself after a fatal line (a rank that dies of
		// "invalid device ordinal" exits at once): its own code stands,
		// the line explains it.
		if late != nil && res.ExitCode != 0 {
			res.Reason = oneFinding(*late)
			r.writeTerminationLog(res.Reason)
		}
	}
	res.Findings = r.findings
	for _, p := range pumps {
		if p.werr != nil && !errors.Is(p.werr, syscall.EPIPE) {
			r.say(fmt.Sprintf("writing CMD's output: %v", p.werr))
		}
	}
	return res, nil
}

// startErrorCode follows the shell: 127 not found, 126 not executable.
func startErrorCode(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return 127
	}
	return 126
}

// exitStatus is CMD's exit code, 128+signal for a signal death.
func exitStatus(ps *os.ProcessState) int {
	if ps == nil {
		return verdict.ExitEnvironment
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
