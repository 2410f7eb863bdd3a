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
	"strings"
	"syscall"
	"time"

	"github.com/rankgate/rankgate/internal/fileinput"
	"github.com/rankgate/rankgate/preflight"
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
	// terminationMax is the kubelet's limit for a termination message.
	terminationMax = 4096
)

// Run performs one launch: pre-launch checks, CMD, supervision. The error
// is non-nil when rankgate itself could not do its job (bad options, no
// pipes, CMD not found); Result.ExitCode is set either way.
func Run(ctx context.Context, opts Options) (Result, error) {
	if len(opts.Command) == 0 {
		return Result{ExitCode: preflight.ExitUsage}, errors.New("no command to launch: rankgate launch [flags] -- CMD ARGS...")
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
	findings []preflight.Finding
	mon      *monitor
	watchdog bool

	cmd       *exec.Cmd
	pgid      int
	startedAt time.Time

	reason      *preflight.Finding
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
		reason := p.Reason(terminationMax)
		r.writeTerminationLog(reason)
		return Result{ExitCode: preflight.ExitFail, Reason: reason, Findings: r.findings}, nil
	}
	if f, ok := r.checkNproc(); ok {
		return r.fail(f, exitCodeFor(f.Rule)), nil
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
			return r.fail(f, exitCodeFor(f.Rule)), nil
		}
		if ctx.Err() != nil {
			return Result{ExitCode: preflight.ExitTimeout, Findings: r.findings}, ctx.Err()
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
func (r *runner) fail(f preflight.Finding, code int) Result {
	r.findings = append(r.findings, f)
	r.printFinding(f)
	reason := oneFinding(f)
	r.writeTerminationLog(reason)
	return Result{ExitCode: code, Reason: reason, Findings: r.findings}
}

// checkNproc: NPROC_EXCEEDS_DEVICES.
func (r *runner) checkNproc() (preflight.Finding, bool) {
	if r.opts.Devices == nil {
		return preflight.Finding{}, false
	}
	info, ok := torchrunNproc(r.opts.Command, r.getenv)
	if !ok || info.n == 0 {
		return preflight.Finding{}, false
	}
	devs := r.opts.Devices
	if info.n <= len(devs) {
		return preflight.Finding{}, false
	}
	ids := make([]string, len(devs))
	mig := 0
	for i, d := range devs {
		ids[i] = d.ID
		if d.Kind == "mig" {
			mig++
		}
	}
	what := fmt.Sprintf("%d device(s)", len(devs))
	why := "two processes on one GPU fail NCCL init (\"Duplicate GPU detected\" / \"Multiple Ranks are using the same GPU\")"
	if mig > 0 {
		what = fmt.Sprintf("%d MIG device(s)", len(devs))
		why = "more than one process per MIG device fails NCCL init (\"Multiple Ranks are using the same GPU/Partition\"), and CUDA shows each process only one MIG device"
	}
	if len(devs) == 0 {
		what = "no device"
	}
	return preflight.Finding{
		Rule: RuleNprocExceedsDevices, Severity: preflight.SeverityFail, Devices: ids,
		Message: fmt.Sprintf("torchrun would start %d local processes (%s=%s) but the rank has %s: %s",
			info.n, info.from, info.raw, what, why),
		Remediation: fmt.Sprintf("set --nproc-per-node (PyTorchJob: spec.nprocPerNode) to at most %d, or request %d devices for the pod", len(devs), info.n),
	}, true
}

func (r *runner) getenv(key string) string {
	prefix := key + "="
	v := ""
	for _, kv := range r.opts.Env {
		if strings.HasPrefix(kv, prefix) {
			v = kv[len(prefix):] // the last one wins, as in exec
		}
	}
	return v
}

func (r *runner) lookupEnv(key string) bool {
	prefix := key + "="
	for _, kv := range r.opts.Env {
		if strings.HasPrefix(kv, prefix) {
			return true
		}
	}
	return false
}

// checkHostfile: HOSTFILE_INVALID, HOSTFILE_SLOTS, HOST_UNREACHABLE.
func (r *runner) checkHostfile(ctx context.Context) (preflight.Finding, bool) {
	path := r.opts.MPIHostfile
	data, err := fileinput.ReadFile(ctx, path, nil, MaxHostfileSize)
	var hf *Hostfile
	var fe *fileinput.Error
	switch {
	case errors.As(err, &fe):
		err = errors.New(fe.Reason()) // the message names the file
	case err == nil:
		hf, err = ParseHostfile(data)
	}
	if err != nil {
		return preflight.Finding{
			Rule: RuleHostfileInvalid, Severity: preflight.SeverityFail,
			Message:     fmt.Sprintf("MPI hostfile %s: %v", path, err),
			Remediation: "write one host per line: \"host slots=N\" (Open MPI) or \"host:N\" (Intel MPI, MPICH)",
		}, true
	}
	names := make([]string, len(hf.Hosts))
	for i, h := range hf.Hosts {
		names[i] = h.Name
	}
	if np, over, isMPI := mpirunNP(r.opts.Command); isMPI && np > 0 && !over {
		if total, known := hf.TotalSlots(); known && np > total {
			return preflight.Finding{
				Rule: RuleHostfileSlots, Severity: preflight.SeverityFail, Nodes: names,
				Message: fmt.Sprintf("mpirun -np %d needs %d slots but hostfile %s gives %d on %d host(s)",
					np, np, path, total, len(hf.Hosts)),
				Remediation: "make -np equal to workers x slotsPerWorker (MPIJob: spec.slotsPerWorker and the Worker replicas), or add workers",
			}, true
		}
	}
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, r.opts.HostsTimeout)
	defer cancel()
	fails := waitHosts(hctx, names, r.opts.SSHPort, r.opts.Resolver, r.opts.Dialer)
	if ctx.Err() != nil {
		return preflight.Finding{}, false
	}
	if len(fails) == 0 {
		r.say(fmt.Sprintf("%d MPI host(s) reachable on port %d after %s", len(names), r.opts.SSHPort, time.Since(start).Round(time.Millisecond)))
		return preflight.Finding{}, false
	}
	var lines []string
	failed := make([]string, 0, len(fails))
	for i, f := range fails {
		failed = append(failed, f.host)
		if i < 10 {
			lines = append(lines, f.String())
		}
	}
	if len(fails) > 10 {
		lines = append(lines, fmt.Sprintf("and %d more", len(fails)-10))
	}
	return preflight.Finding{
		Rule: RuleHostUnreachable, Severity: preflight.SeverityFail, Nodes: failed,
		Message: fmt.Sprintf("%d of %d MPI host(s) not reachable on port %d within %s: %s",
			len(fails), len(names), r.opts.SSHPort, r.opts.HostsTimeout, strings.Join(lines, "; ")),
		Remediation: "check that the worker pods are Running and their sshd listens (kubectl get pods; MPIJob launcherCreationPolicy: WaitForWorkersReady); " +
			"hostnames resolve through the job's headless service",
	}, true
}

// prepareEnv sets NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT when the user
// set neither (the watchdog needs NCCL's INFO lines), and turns the
// watchdog off when the environment hides them.
func (r *runner) prepareEnv() []string {
	env := r.opts.Env
	if !r.lookupEnv("NCCL_DEBUG") && !r.lookupEnv("NCCL_DEBUG_SUBSYS") {
		env = append(env[:len(env):len(env)], "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT")
	}
	get := func(k string) string {
		v := ""
		for _, kv := range env {
			if strings.HasPrefix(kv, k+"=") {
				v = kv[len(k)+1:]
			}
		}
		return v
	}
	r.watchdog = r.opts.InitTimeout > 0
	hidden := ncclHidden(get("NCCL_DEBUG"), get("NCCL_DEBUG_SUBSYS"), get("NCCL_DEBUG_FILE"))
	if hidden != "" && r.watchdog && r.opts.ReadyPattern == nil && r.opts.ReadyFile == "" {
		r.watchdog = false
		f := preflight.Finding{
			Rule: RuleNCCLDebugHidden, Severity: preflight.SeverityWarn,
			Message:     hidden + ", so the NCCL init watchdog cannot see Init COMPLETE and is off",
			Remediation: "unset NCCL_DEBUG and NCCL_DEBUG_SUBSYS (rankgate then sets INFO/INIT), or set NCCL_DEBUG=INFO with INIT in NCCL_DEBUG_SUBSYS, or use --ready-pattern / --ready-file",
		}
		r.findings = append(r.findings, f)
		r.printFinding(f)
	}
	expect := r.opts.LocalRanks
	if expect <= 0 {
		expect = 1
		if info, ok := torchrunNproc(r.opts.Command, r.getenv); ok && info.n > 0 {
			expect = info.n
		} else if ok && r.opts.Devices != nil && len(r.opts.Devices) > 0 {
			expect = len(r.opts.Devices) // --nproc-per-node gpu
		} else if np, _, isMPI := mpirunNP(r.opts.Command); isMPI && np > 0 {
			expect = np // mpirun forwards every rank's output
		}
	}
	r.mon = newMonitor(r.opts.ReadyPattern, expect, r.opts.ExpectTransport, r.opts.ExpectDerived, r.opts.StrictTransport)
	return env
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
		res.ExitCode = preflight.ExitEnvironment
		return res, fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := newPipe()
	if err != nil {
		syscall.Close(outR)
		outW.Close()
		res.ExitCode = preflight.ExitEnvironment
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
		res.ExitCode = exitCodeFor(r.reason.Rule)
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

// supervise runs until CMD (the group leader) exits.
func (r *runner) supervise(ctx context.Context, waitCh <-chan error, chld <-chan os.Signal) {
	var initC <-chan time.Time
	if r.watchdog {
		t := time.NewTimer(r.opts.InitTimeout)
		defer t.Stop()
		initC = t.C
	}
	var fileC <-chan time.Time
	if r.opts.ReadyFile != "" {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		fileC = t.C
	}
	var graceT *time.Timer
	defer func() {
		if graceT != nil {
			graceT.Stop()
		}
	}()
	var graceC <-chan time.Time
	startGrace := func() {
		if graceT == nil {
			r.graceEnd = time.Now().Add(r.opts.Grace)
			graceT = time.NewTimer(r.opts.Grace)
			graceC = graceT.C
		}
	}
	terminate := func() {
		initC, fileC = nil, nil
		if r.terminating {
			return
		}
		r.terminating = true
		r.signalAll(syscall.SIGTERM)
		startGrace()
	}
	ctxDone := ctx.Done()
	for {
		select {
		case <-waitCh:
			return
		case sig := <-r.opts.Signals:
			r.forward(sig)
			initC, fileC = nil, nil
			r.terminating = true
			startGrace()
		case <-ctxDone:
			ctxDone = nil
			terminate()
		case <-chld:
			reapAdopted(r.cmd.Process.Pid)
		case ev := <-r.mon.events:
			switch ev.kind {
			case evReady:
				r.readyAfter = time.Since(r.startedAt)
				initC, fileC = nil, nil
				if r.watchdog {
					r.say(fmt.Sprintf("ready after %s: %s", r.readyAfter.Round(time.Millisecond), ev.how))
				}
			case evFatal:
				if r.reason == nil && !r.terminating {
					f := ev.finding
					r.reason = &f
					r.findings = append(r.findings, f)
					r.printFinding(f)
					r.say(fmt.Sprintf("aborting: terminating process group %d (SIGTERM, SIGKILL after %s)", r.pgid, r.opts.Grace))
					terminate()
				}
			case evFallback:
				f := ev.finding
				r.findings = append(r.findings, f)
				r.printFinding(f)
				if f.Severity == preflight.SeverityFail && r.reason == nil && !r.terminating {
					r.reason = &f
					r.say(fmt.Sprintf("--strict-transport: terminating process group %d", r.pgid))
					terminate()
				}
			}
		case <-initC:
			initC = nil
			if r.mon.ready.Load() {
				continue // the ready event is queued
			}
			f := r.timeoutFinding()
			r.reason = &f
			r.findings = append(r.findings, f)
			r.printDiagnosis(f)
			r.say(fmt.Sprintf("terminating process group %d (SIGTERM, SIGKILL after %s)", r.pgid, r.opts.Grace))
			terminate()
		case <-fileC:
			if _, err := os.Stat(r.opts.ReadyFile); err == nil {
				fileC = nil
				r.mon.markReady(fmt.Sprintf("--ready-file %s appeared", r.opts.ReadyFile))
			}
		case <-graceC:
			graceC = nil
			r.signalAll(syscall.SIGKILL)
			r.killed = true
		}
	}
}

// lateEvents handles what the output showed after CMD exited or was
// ended (the pumps read on until the end of its output): findings are
// recorded and printed; the first fatal one is returned.
func (r *runner) lateEvents() *preflight.Finding {
	var fatal *preflight.Finding
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

func (r *runner) timeoutFinding() preflight.Finding {
	s := r.mon.snapshot()
	msg := fmt.Sprintf("NCCL init did not complete within %s: %d of %d local rank(s) reported Init COMPLETE",
		r.opts.InitTimeout, len(s.completed), s.expect)
	var ranks []int
	if len(s.pending) > 0 {
		msg += "; never completed: " + strings.Join(s.pending, ", ")
		r.mon.mu.Lock()
		for _, p := range r.mon.order {
			if p.started && !p.completed && p.rank >= 0 {
				ranks = append(ranks, p.rank)
			}
		}
		r.mon.mu.Unlock()
	}
	if missing := s.expect - len(s.completed) - len(s.pending); missing > 0 {
		msg += fmt.Sprintf("; %d process(es) printed no NCCL Init START", missing)
	}
	rem := "a rank waits for its peers: check that every pod of the job is Running, that the ranks reach each other " +
		"(MASTER_ADDR/MASTER_PORT, NCCL_SOCKET_IFNAME), and the preflight findings; raise --init-timeout if init is only slow"
	if !s.sawNCCL {
		msg += "; no NCCL line was seen at all"
		rem = "CMD never reached NCCL init, or NCCL's lines do not reach rankgate: a rendezvous that waits for missing ranks " +
			"(torchrun, init_process_group), or mpirun without -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS; use --ready-pattern for non-NCCL readiness"
	}
	return preflight.Finding{Rule: RuleNCCLInitTimeout, Severity: preflight.SeverityFail, Message: msg, Remediation: rem, Ranks: ranks}
}

// printDiagnosis explains an init timeout: ranks, transports, NCCL's
// view, the preflight, NCCL's last lines.
func (r *runner) printDiagnosis(f preflight.Finding) {
	s := r.mon.snapshot()
	var b strings.Builder
	fmt.Fprintf(&b, "FAIL %s: NCCL init did not complete within %s\n", f.Rule, r.opts.InitTimeout)
	fmt.Fprintf(&b, "  local ranks: %d expected, %d completed init\n", s.expect, len(s.completed))
	for _, c := range s.completed {
		fmt.Fprintf(&b, "    completed: %s\n", c)
	}
	for _, p := range s.pending {
		fmt.Fprintf(&b, "    NEVER COMPLETED: %s\n", p)
	}
	if missing := s.expect - len(s.completed) - len(s.pending); missing > 0 {
		fmt.Fprintf(&b, "    %d process(es) printed no NCCL Init START\n", missing)
	}
	if len(s.transports) > 0 {
		fmt.Fprintf(&b, "  transports: %s\n", strings.Join(s.transports, ", "))
	} else {
		b.WriteString("  transports: none connected yet\n")
	}
	if s.nNodes > 0 {
		fmt.Fprintf(&b, "  NCCL's view: nNodes %d, localRanks %d\n", s.nNodes, s.localRanks)
	}
	if p := r.opts.Preflight; p != nil {
		fmt.Fprintf(&b, "  preflight: %s\n", p.Verdict)
		for _, pf := range p.Findings {
			fmt.Fprintf(&b, "    %s %s: %s\n", strings.ToUpper(string(pf.Severity)), pf.Rule, pf.Message)
		}
	} else {
		b.WriteString("  preflight: skipped\n")
	}
	if len(s.last) > 0 {
		b.WriteString("  last NCCL lines:\n")
		for _, l := range s.last {
			fmt.Fprintf(&b, "    %s\n", l)
		}
	} else {
		b.WriteString("  no NCCL line was seen\n")
	}
	fmt.Fprintf(&b, "  fix: %s", f.Remediation)
	r.say(b.String())
}

func (r *runner) printFinding(f preflight.Finding) {
	msg := fmt.Sprintf("%s %s: %s", strings.ToUpper(string(f.Severity)), f.Rule, f.Message)
	if f.Remediation != "" {
		msg += "\n  fix: " + f.Remediation
	}
	r.say(msg)
}

func (r *runner) say(msg string) { r.errw.say(msg) }

func (r *runner) writeTerminationLog(reason string) {
	p := r.opts.TerminationLog
	if p == "" || reason == "" {
		return
	}
	if len(reason) > terminationMax {
		reason = reason[:terminationMax-3] + "..."
	}
	if err := os.WriteFile(p, []byte(reason), 0o644); err != nil {
		r.say(fmt.Sprintf("cannot write termination log %s: %v", p, err))
	}
}

// oneFinding is a finding as one termination-message paragraph.
func oneFinding(f preflight.Finding) string {
	s := f.Rule + ": " + f.Message
	if f.Remediation != "" {
		s += " Fix: " + f.Remediation
	}
	return s
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
		return preflight.ExitEnvironment
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
