package launcher

import "github.com/rankgate/rankgate/preflight"

// Rule IDs that launch adds to the preflight's: a public vocabulary
// (README, rankgate launch). Never rename one.
const (
	// RuleNCCLInitTimeout: NCCL did not report Init COMPLETE (nor did the
	// ready pattern or file show up) within the init deadline. Exit 4.
	RuleNCCLInitTimeout = "NCCL_INIT_TIMEOUT"
	// RuleNCCLFatal: a fatal NCCL or CUDA line during init. Exit 1.
	RuleNCCLFatal = "NCCL_FATAL"
	// RuleTransportFallback: NCCL connected ranks over a slower path than
	// expected. Warn, or fail (exit 1) with --strict-transport.
	RuleTransportFallback = "TRANSPORT_FALLBACK"
	// RuleNprocExceedsDevices: torchrun would start more local processes
	// than the rank has devices. Exit 1 before the command starts.
	RuleNprocExceedsDevices = "NPROC_EXCEEDS_DEVICES"
	// RuleHostUnreachable: an MPI hostfile host did not resolve or accept
	// TCP on the ssh port within --hosts-timeout. Exit 4.
	RuleHostUnreachable = "HOST_UNREACHABLE"
	// RuleHostfileSlots: the hostfile's slots do not cover mpirun -np.
	// Exit 1.
	RuleHostfileSlots = "HOSTFILE_SLOTS"
	// RuleHostfileInvalid: the hostfile cannot be read or parsed. Exit 2.
	RuleHostfileInvalid = "HOSTFILE_INVALID"
	// RuleNCCLDebugHidden: the environment hides the NCCL lines the init
	// watchdog waits for, so the watchdog is off. Warn.
	RuleNCCLDebugHidden = "NCCL_DEBUG_HIDDEN"
)

// exitCodeFor is the exit code a failing launch finding gives.
func exitCodeFor(rule string) int {
	switch rule {
	case RuleNCCLInitTimeout, RuleHostUnreachable:
		return preflight.ExitTimeout
	case RuleHostfileInvalid:
		return preflight.ExitUsage
	}
	return preflight.ExitFail
}
