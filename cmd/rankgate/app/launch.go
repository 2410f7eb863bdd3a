package app

import (
	"context"
	"os"
	"os/signal"
	"regexp"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/rankgate/rankgate/launcher"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// launchSubreaper makes rankgate the reaper of CMD's orphans (see
// launcher.Options.Subreaper). Tests that run launch inside the test
// binary turn it off: there it would adopt every test's orphans.
var launchSubreaper = true

// launchOptions are launch's flags.
type launchOptions struct {
	preflightOptions
	NoPreflight     bool
	InitTimeout     time.Duration
	Grace           time.Duration
	ReadyPattern    string
	ReadyFile       string
	LocalRanks      int
	ExpectTransport string
	StrictTransport bool
	MPIHostfile     string
	SSHPort         int
	HostsTimeout    time.Duration
	ReportFile      string
	progressOptions
	gangOptions
}

func (a *App) newLaunchCommand() *cobra.Command {
	o := &launchOptions{}
	cmd := &cobra.Command{
		Use:   "launch [flags] -- CMD [ARGS...]",
		Short: "Run torchrun or mpirun behind the rank preflight and an NCCL init watchdog",
		Long: `launch stands in front of the training command (torchrun, python, mpirun).
It runs the rank preflight (skip with --no-preflight) and the pre-launch
checks (torchrun's --nproc-per-node against the rank's devices; with
--mpi-hostfile, every host reachable on the ssh port and enough slots for
mpirun -np), then starts CMD in its own process group and passes its
stdout and stderr through byte for byte while it watches them:

  - NCCL init watchdog: CMD is ready when NCCL reports Init COMPLETE on
    every local rank (or --ready-pattern matches a line, or --ready-file
    appears). If not within --init-timeout, launch prints a diagnosis,
    ends the process group and exits 4.
  - A fatal NCCL or CUDA line during init (two ranks on one GPU, an
    unhandled CUDA or system error, ...) ends it at once: exit 1.
  - NCCL's transports are checked against --expect-transport (or what the
    preflight implies): a slower path is a warning, a failure with
    --strict-transport.

With --gang (an MPIJob launcher that runs no rank), launch first waits for
the job's gang verdict from the controller's gate, authenticated as rankgate
init is (--gate-url, --ca-file, --token-file, POD_NAME/POD_NAMESPACE): on a
fail it exits 1 with the reason, without a verdict by --gang-timeout it
exits 4, on a pass it goes on as above.

SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to CMD's group; after
--grace the group is killed. No process CMD started outlives launch.
launch sets NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT when neither is set.

Stdout is CMD's alone. launch's own lines go to stderr, prefixed
"rankgate: ": the preflight report (in the -o format), findings, and while
it waits for the gang verdict or for NCCL init a progress line at most
every 10s (--quiet turns progress lines off). For scripts, --report-file
PATH receives one document about the whole launch when it ends (JSON, or
YAML with -o yaml), written atomically: a file appears whole or not at all.

Exit: CMD's own code (128+N when signal N ended it), or 1 preflight or
pre-launch check failed, fatal NCCL line, transport fallback with
--strict-transport; 2 bad flags or hostfile; 3 environment failure;
4 NCCL init deadline or MPI hosts unreachable; 126/127 CMD not executable /
not found.`,
		Example: `  # PyTorchJob container command
  rankgate launch --termination-log /dev/termination-log -- \
    torchrun --nproc-per-node=4 train.py --epochs 10

  # MPIJob launcher: wait for the workers' sshd, then run mpirun
  rankgate launch --no-preflight --mpi-hostfile /etc/mpi/hostfile -- \
    mpirun -np 8 -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS python train.py

  # MPIJob launcher of a gated job: mpirun starts only after the gang passes
  rankgate launch --gang --gate-url https://rankgate-gate.rankgate-system.svc:443 \
    --ca-file /var/run/rankgate/ca.crt --no-preflight --mpi-hostfile /etc/mpi/hostfile -- \
    mpirun -np 8 python train.py

  # the launch's outcome for a script, apart from CMD's output
  rankgate launch --report-file /tmp/launch.json -- torchrun --nproc-per-node=8 train.py

  # not NCCL: ready when the log says so
  rankgate launch --no-preflight --ready-pattern '^Epoch 1/' --init-timeout 5m -- python train.py`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return a.runLaunch(cmd.Context(), o, args) },
	}
	f := cmd.Flags()
	o.preflightOptions.addFlags(f)
	// Everything from CMD on is CMD's, with or without "--".
	f.SetInterspersed(false)
	f.BoolVar(&o.NoPreflight, "no-preflight", false, "skip the rank preflight (the NCCL watchdog and pre-launch checks still run)")
	f.DurationVar(&o.InitTimeout, "init-timeout", launcher.DefaultInitTimeout, "NCCL init deadline from CMD's start; 0 turns the watchdog off")
	f.DurationVar(&o.Grace, "grace", launcher.DefaultGrace, "time between SIGTERM and SIGKILL when ending CMD's process group")
	f.StringVar(&o.ReadyPattern, "ready-pattern", "", "regular expression: CMD is ready when a line of its output matches (NCCL or not)")
	f.StringVar(&o.ReadyFile, "ready-file", "", "CMD is ready when this file exists")
	f.IntVar(&o.LocalRanks, "local-ranks", 0, "processes that must report NCCL Init COMPLETE (default: torchrun --nproc-per-node, mpirun -np, else 1)")
	f.StringVar(&o.ExpectTransport, "expect-transport", "", "slowest acceptable NCCL path: p2p, shm or net (default: from the preflight)")
	f.BoolVar(&o.StrictTransport, "strict-transport", false, "make TRANSPORT_FALLBACK a failure (exit 1) instead of a warning")
	f.StringVar(&o.MPIHostfile, "mpi-hostfile", "", "MPI hostfile to check before CMD starts (MPIJob: /etc/mpi/hostfile)")
	f.IntVar(&o.SSHPort, "ssh-port", launcher.DefaultSSHPort, "TCP port every hostfile host must accept")
	f.DurationVar(&o.HostsTimeout, "hosts-timeout", launcher.DefaultHostsTimeout, "how long to wait for the hostfile's hosts")
	f.StringVar(&o.ReportFile, "report-file", "", "when launch ends, write one report of the whole launch to this file, atomically (JSON; YAML with -o yaml); /dev/fd/N for an open descriptor")
	f.Lookup("output").Usage = "format of the preflight report on stderr and of --report-file (text: the file is JSON): " + formatList
	o.progressOptions.addFlags(f)
	o.gangOptions.addFlags(f)
	return cmd
}

func (a *App) runLaunch(ctx context.Context, o *launchOptions, argv []string) error {
	opts, err := o.launcherOptions(argv)
	if err != nil {
		return err
	}
	opts.Stdin, opts.Stdout, opts.Stderr = a.Streams.In, a.Streams.Out, a.Streams.Err
	rep := newLaunchReport(argv)
	err = a.launch(ctx, o, opts, rep)
	if o.ReportFile != "" {
		rep.finish(err)
		a.writeLaunchReport(o.ReportFile, rep, o.Output)
	}
	return err
}

// launcherOptions checks launch's flags (usage errors, exit 2, before
// anything runs) and turns them into the launcher's options.
func (o *launchOptions) launcherOptions(argv []string) (launcher.Options, error) {
	opts := launcher.Options{
		Command:         argv,
		Grace:           o.Grace,
		InitTimeout:     o.InitTimeout,
		ReadyFile:       o.ReadyFile,
		LocalRanks:      o.LocalRanks,
		StrictTransport: o.StrictTransport,
		MPIHostfile:     o.MPIHostfile,
		SSHPort:         o.SSHPort,
		HostsTimeout:    o.HostsTimeout,
		TerminationLog:  o.TerminationLog,
		Subreaper:       launchSubreaper,
		Progress:        o.interval(),
		Quiet:           o.Quiet,
	}
	if p := o.ReadyPattern; p != "" {
		re, err := regexp.Compile(p)
		if err != nil {
			return opts, verdict.Exitf(verdict.ExitUsage, "--ready-pattern: %v", err)
		}
		opts.ReadyPattern = re
	}
	want, err := launcher.ParseTransport(o.ExpectTransport)
	if err != nil {
		return opts, verdict.Exitf(verdict.ExitUsage, "--expect-transport: %v", err)
	}
	opts.ExpectTransport = want
	if opts.LocalRanks < 0 || opts.SSHPort <= 0 || opts.SSHPort > 65535 {
		return opts, verdict.Exitf(verdict.ExitUsage, "--local-ranks must not be negative and --ssh-port must be a TCP port")
	}
	if err := checkFormat(o.Output); err != nil {
		return opts, err
	}
	if err := o.progressOptions.check(); err != nil {
		return opts, err
	}
	if o.ReportFile == "-" {
		return opts, verdict.Exitf(verdict.ExitUsage, "--report-file -: stdout is CMD's; name a file, or /dev/fd/N for a descriptor the caller opened")
	}
	return opts, nil
}

// launch waits for the gang, runs the preflight and then CMD, recording
// what it learns in rep.
func (a *App) launch(ctx context.Context, o *launchOptions, opts launcher.Options, rep *launchReport) error {
	// Subscribe before anything slow: a signal during the preflight or the
	// host wait must not kill rankgate with CMD half set up.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	opts.Signals = sigs

	if o.Gang {
		resp, err := a.awaitGang(ctx, &o.gangOptions, &o.progressOptions, o.TerminationLog)
		rep.gang(resp)
		if err != nil {
			if exit, ok := interrupted(ctx, err); ok {
				return exit
			}
			return err
		}
	}
	if o.NoPreflight {
		devs, err := a.launchDevices(ctx, o.Devices)
		if err != nil {
			return err
		}
		opts.Devices = devs
	} else {
		r, _, err := a.rankPreflight(ctx, &o.preflightOptions)
		if err != nil {
			return err
		}
		// CMD inherits this environment: its NCCL settings against the
		// rank's devices and the node's network.
		r = judgeNCCLSettings(ownEnv(), r, o.offline())
		// CMD's stdout stays CMD's: the report goes to stderr.
		if err := verdict.Write(a.Streams.Err, r, o.Output); err != nil {
			return err
		}
		rep.Preflight = &r
		opts.Preflight = &r
		opts.Devices = r.Devices
		if opts.ExpectTransport == launcher.TransportUnknown {
			opts.ExpectTransport = launcher.DeriveTransport(&r)
			opts.ExpectDerived = opts.ExpectTransport != launcher.TransportUnknown
		}
	}
	// A signal before CMD starts ends the launch (exit 128+N).
	if err := ctx.Err(); err != nil {
		if exit, ok := interrupted(ctx, err); ok {
			return exit
		}
		return verdict.WithCode(verdict.ExitTimeout, err)
	}
	// From here every signal is forwarded to CMD's group through
	// opts.Signals, and the end is bounded by --grace: a second signal must
	// not make rankgate exit and leave CMD's processes behind. The
	// context's own cancellation would send CMD a second one.
	takeOverSignals(ctx)
	res, err := launcher.Run(context.WithoutCancel(ctx), opts)
	rep.result(res)
	if err != nil {
		return verdict.WithCode(res.ExitCode, err)
	}
	if res.ExitCode != 0 {
		return verdict.Silent(res.ExitCode)
	}
	return nil
}

// launchDevices finds the rank's devices without the preflight, for the
// NPROC_EXCEEDS_DEVICES check: --devices, else NVIDIA_VISIBLE_DEVICES or
// CUDA_VISIBLE_DEVICES, never the kubelet (nothing slow: this runs on the
// start-up path). nil (check skipped) when they are unknown or "all".
func (a *App) launchDevices(ctx context.Context, devices string) ([]verdict.DeviceSummary, error) {
	alloc, err := topology.ResolveAllocation(ctx, topology.AllocationQuery{Devices: devices})
	if err != nil {
		if devices != "" {
			return nil, err
		}
		return nil, nil // unknown devices only skip a check
	}
	return launcher.AllocatedDevices(alloc), nil
}
