package preflight

// Exit codes of preflight, init and launch: a public contract (README).
const (
	ExitPass        = 0 // pass, warnings allowed
	ExitFail        = 1 // verdict fail
	ExitUsage       = 2 // usage or bad input
	ExitEnvironment = 3 // NVML missing, driver error, API unreachable
	ExitTimeout     = 4 // gang wait or NCCL init deadline
)

// ExitCode maps a report's verdict to the process exit code.
func (r Report) ExitCode() int {
	if r.Failed() {
		return ExitFail
	}
	return ExitPass
}
