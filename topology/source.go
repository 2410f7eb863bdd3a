package topology

import (
	"context"
	"fmt"

	"github.com/rankgate/rankgate/verdict"
)

// Source produces a node inventory. NVML discovery (topology/nvmlsource),
// nvidia-smi import (topology/smi) and snapshots (topology/offline) are
// Sources.
type Source interface {
	Inventory(ctx context.Context) (*Inventory, error)
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context) (*Inventory, error)

// Inventory calls f.
func (f SourceFunc) Inventory(ctx context.Context) (*Inventory, error) { return f(ctx) }

// DiscoveryError is a failure to read the node's truth from the driver. Class
// names the NVML return-code class ("DRIVER_NOT_LOADED", "TIMEOUT", ...); the
// rule ID of the finding is "NVML_" + Class.
type DiscoveryError struct {
	Class string
	// Op is the call that failed, e.g. "nvmlDeviceGetHandleByIndex(3)".
	Op          string
	Message     string
	Remediation string
	// Hung is true when the call did not return before its deadline.
	Hung bool
	Err  error
}

func (e *DiscoveryError) Error() string {
	return e.Rule() + ": " + e.Detail()
}

// Detail is the message and the call that failed, without the rule ID (a
// finding carries that in its own field).
func (e *DiscoveryError) Detail() string {
	if e.Op != "" {
		return e.Message + " (" + e.Op + ")"
	}
	return e.Message
}

func (e *DiscoveryError) Unwrap() error { return e.Err }

// ExitCode: a call that hung is a timeout (4), any other failure an
// environment failure (3).
func (e *DiscoveryError) ExitCode() int {
	if e.Hung {
		return verdict.ExitTimeout
	}
	return verdict.ExitEnvironment
}

// Rule is the finding's rule ID.
func (e *DiscoveryError) Rule() string { return "NVML_" + e.Class }

// InputError is malformed outside input: a snapshot or a pasted nvidia-smi
// output. It names the file and, where it can, the line.
type InputError struct {
	File string
	Line int // 1-based; 0 when the whole file is at fault
	Msg  string
	Err  error
}

func (e *InputError) Error() string {
	loc := e.File
	if loc == "" {
		loc = "<input>"
	}
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", loc, e.Line)
	}
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", loc, e.Msg, e.Err)
	}
	return fmt.Sprintf("%s: %s", loc, e.Msg)
}

func (e *InputError) Unwrap() error { return e.Err }

// ExitCode: bad input is exit 2.
func (e *InputError) ExitCode() int { return verdict.ExitUsage }
