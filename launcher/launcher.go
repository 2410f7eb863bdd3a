// Package launcher runs a distributed training command (torchrun, python,
// mpirun) behind rankgate: pre-launch checks, a process group it owns,
// byte-exact pass-through of the command's output while scanning it for
// NCCL's init lines, an init watchdog, signal forwarding and a clean end
// with no orphan left. It depends on preflight only for findings and exit
// codes; the CLI (rankgate launch) fills Options.
package launcher

import (
	"io"
	"os"
	"regexp"
	"time"

	"github.com/rankgate/rankgate/verdict"
)

// Defaults of the CLI flags.
const (
	DefaultGrace        = 30 * time.Second
	DefaultInitTimeout  = 120 * time.Second
	DefaultHostsTimeout = 2 * time.Minute
	DefaultSSHPort      = 22
)

// Options is one launch.
type Options struct {
	// Command is CMD and its arguments.
	Command []string
	// Env is CMD's environment; nil means this process's.
	Env []string
	Dir string

	Stdin io.Reader
	// Stdout and Stderr receive CMD's output byte for byte; rankgate's own
	// lines go to Stderr, prefixed "rankgate: ". nil discards.
	Stdout, Stderr io.Writer

	// Signals are forwarded to CMD's process group (the CLI subscribes
	// SIGINT, SIGTERM, SIGHUP, SIGQUIT). The first one starts the grace
	// period, after which the group is killed.
	Signals <-chan os.Signal
	// Grace is the time between SIGTERM (or a forwarded signal) and
	// SIGKILL; 0 kills at once.
	Grace time.Duration

	// InitTimeout is the NCCL init deadline, from CMD's start; 0 turns the
	// watchdog off (fatal lines still abort until CMD is ready).
	InitTimeout time.Duration
	// ReadyPattern, when set, makes CMD ready when a line of its output
	// matches, NCCL or not.
	ReadyPattern *regexp.Regexp
	// ReadyFile, when set, makes CMD ready when the file exists.
	ReadyFile string
	// LocalRanks is how many processes must report NCCL Init COMPLETE;
	// 0 derives it: torchrun's --nproc-per-node, mpirun's -np, else 1.
	LocalRanks int

	// Progress, when positive, is the interval of a progress line while
	// the init watchdog waits ("waiting for NCCL init: 2 of 4 local ranks
	// ..."); 0 prints none. Quiet also leaves out the "ready after" line.
	Progress time.Duration
	Quiet    bool

	// ExpectTransport is the slowest acceptable NCCL path; unknown skips
	// the check. ExpectDerived marks an expectation derived from the
	// preflight rather than asked for: it then applies only when NCCL sees
	// a single node.
	ExpectTransport Transport
	ExpectDerived   bool
	// StrictTransport turns TRANSPORT_FALLBACK into a failure (exit 1).
	StrictTransport bool

	// Preflight is the rank preflight's report; nil when skipped. A fail
	// verdict stops before CMD starts (exit 1); its findings go into the
	// init diagnosis.
	Preflight *verdict.Report
	// Devices are the rank's devices (for NPROC_EXCEEDS_DEVICES); nil when
	// unknown, which skips that check.
	Devices []verdict.DeviceSummary

	// MPIHostfile, when set, is checked before CMD starts: every host must
	// resolve and accept TCP on SSHPort within HostsTimeout, and its slots
	// must cover mpirun's -np.
	MPIHostfile  string
	SSHPort      int
	HostsTimeout time.Duration
	// Resolver and Dialer default to the net package's.
	Resolver Resolver
	Dialer   Dialer

	// TerminationLog, when set, receives the reason when rankgate fails
	// the launch (Kubernetes: /dev/termination-log).
	TerminationLog string

	// Subreaper (Linux) makes rankgate the reaper of CMD's orphaned
	// descendants, so that processes that left the process group
	// (setsid, double fork) are found and ended too. It changes the whole
	// process: set it only in a process that runs one launch (the CLI).
	Subreaper bool
}

// Result is how a launch ended.
type Result struct {
	// ExitCode is rankgate's exit code: CMD's own (128+signal when a
	// signal ended it), or 1 / 2 / 4 when rankgate failed the launch.
	ExitCode int
	// Reason is set when rankgate failed the launch: the termination
	// message.
	Reason string
	// Findings are the launch's findings (preflight's first).
	Findings []verdict.Finding
	// Started reports whether CMD was started; Ready whether it became
	// ready (NCCL Init COMPLETE, the ready pattern or file), and when.
	Started    bool
	Ready      bool
	ReadyAfter time.Duration
	// Elapsed runs from CMD's start until its whole process group was gone.
	Elapsed time.Duration
	// Transports counts NCCL channel connections per transport name
	// ("P2P/IPC", "NET/Socket/0", "SHM/direct/direct", "NVLS").
	Transports map[string]int
}

// Report is the result as a report, for -o json and tests.
func (r Result) Report(subject string) verdict.Report {
	return verdict.NewReport(subject, append([]verdict.Finding(nil), r.Findings...))
}

// DeriveTransport is the path NCCL should find between a rank's devices,
// from its preflight: two or more full GPUs that showed no P2P problem
// should connect over P2P. It returns unknown otherwise (one device, MIG,
// or a P2P_UNSUPPORTED finding).
func DeriveTransport(r *verdict.Report) Transport {
	if r == nil || len(r.Devices) < 2 {
		return TransportUnknown
	}
	for _, d := range r.Devices {
		if d.Kind != "gpu" {
			return TransportUnknown
		}
	}
	for _, f := range r.Findings {
		if f.Rule == verdict.RuleP2PUnsupported {
			return TransportUnknown
		}
	}
	return TransportP2P
}
