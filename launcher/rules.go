package launcher

import "github.com/rankgate/rankgate/verdict"

// Rule IDs that launch adds to the preflight's: a public vocabulary
// (README, rankgate launch). Never rename one.
const (
// RuleNCCLInitTimeout: NCCL did not report Init COMPLETE (nor did the
// ready pattern or file show up) within the init deadline. Exit 4.
// expected. Warn, or fail (exit 1) with --strict-transport.
// than the rank has devices. Exit 1 before the command starts.
// TCP on the ssh port within --hosts-timeout. Exit 4.
// Exit 1.
// watchdog waits for, so the watchdog is off. Warn.
)

// exitCodeFor is the exit code a failing launch finding gives.
func exitCodeFor(rule string) int {
	switch rule {
	case verdict.RuleNCCLInitTimeout, verdict.RuleHostUnreachable:
		return verdict.ExitTimeout
	case verdict.RuleHostfileInvalid:
		return verdict.ExitUsage
	}
	return verdict.ExitFail
}
