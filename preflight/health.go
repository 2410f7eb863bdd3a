package preflight

import (
	"fmt"
	"strings"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// HealthRules lists the rank rules about a GPU's own health and its NVLink
// fabric. The gang rule GANG_HEALTH_MIXED reads a rank's findings of these
// rules as that rank's health verdict.
var HealthRules = []string{
	verdict.RuleGPULost, verdict.RuleGPUResetRequired, verdict.RuleGPURemapFailed, verdict.RuleGPURemapPending,
	verdict.RuleGPUECCUncorrected, verdict.RuleGPURetiredPagesPending, verdict.RuleNVLinkFabricNotReady,
	verdict.RuleNVLinkFabricFailed, verdict.RulePersistenceOff, verdict.RuleClocksThrottled, verdict.RuleGPUReadError,
}

// IsHealthRule reports whether id is one of HealthRules.
func IsHealthRule(id string) bool {
	for _, r := range HealthRules {
		if r == id {
			return true
		}
	}
	return false
}

// persistenceCost is the reason PERSISTENCE_OFF gives. Without persistence
// the driver tears a GPU down when its last client exits; the next
// process's first CUDA or NVML call brings it up again (driver state, and
// on ECC GPUs a scrub of memory), which NVIDIA's driver persistence
// documentation puts at seconds per GPU, paid by every rank at every
// start and by rankgate's own checks before it. (The cost has not been
// measured by rankgate; hack/device-smoke.sh records the first NVML call's
// time on a lent GPU.)
const persistenceCost = "without persistence the driver tears the GPU down whenever no process holds it, so each process's first CUDA call re-initializes it, which takes seconds per GPU on data-center GPUs (driver state, and the memory scrub on ECC GPUs), paid by every rank at every start"

// healthRules: the node-health rank rules for the GPUs behind the rank's
// devices (a MIG device's parent GPU included).
func healthRules(gpus []*topology.GPU) []verdict.Finding {
	var f []verdict.Finding
	for _, g := range gpus {
		dev := []string{gpuName(g)}
		add := func(rule string, sev verdict.Severity, msg, fix string) {
			f = append(f, verdict.Finding{Rule: rule, Severity: sev, Devices: dev, Message: msg, Remediation: fix})
		}
		h := g.Health
		if h == nil {
			h = &topology.Health{}
		}
		reasons := resetReasons(g)
		also := ""
		if g.MIGCurrent != topology.ModeUnknown && g.MIGPending != topology.ModeUnknown && g.MIGCurrent != g.MIGPending {
			also = " (the same reset applies the pending MIG mode, MIG_MODE_PENDING)"
		}
		if h.Lost {
			add(verdict.RuleGPULost, verdict.SeverityFail, lostMessage(g),
				fmt.Sprintf("cordon and drain the node, look for Xid 79 in `dmesg`, then reset GPU %d (`nvidia-smi -r -i %d`) or reboot; replace it if it happens again", g.Index, g.Index))
		}
		if len(h.ErrFields) > 0 {
			sev, msg, fix := readErrorFinding(g)
			add(verdict.RuleGPUReadError, sev, msg, fix)
		}
		if h.ResetRequired != nil && *h.ResetRequired {
			add(verdict.RuleGPUResetRequired, verdict.SeverityFail, resetRequiredMessage(g, reasons), resetFix(g)+also)
		}
		if h.RemapFailure != nil && *h.RemapFailure {
			add(verdict.RuleGPURemapFailed, verdict.SeverityFail,
				fmt.Sprintf("GPU %d failed a row remap: a bad memory row could not be replaced by a spare, so memory errors on it will recur", g.Index),
				fmt.Sprintf("drain the node and run NVIDIA's field diagnostic on GPU %d; a validated remap failure is an RMA (NVIDIA's A100/H100 memory error management guide)", g.Index))
		}
		if h.RemapPending != nil && *h.RemapPending {
			add(verdict.RuleGPURemapPending, verdict.SeverityFail,
				fmt.Sprintf("GPU %d has a row remap pending: the bad memory row stays in use until the GPU is reset, and the next uncorrectable error on it kills the job (Xid 63/94)", g.Index),
				resetFix(g)+also)
		}
		if h.VolatileUncorrectedECC != nil && *h.VolatileUncorrectedECC > 0 {
			add(verdict.RuleGPUECCUncorrected, verdict.SeverityFail,
				fmt.Sprintf("GPU %d counts %d uncorrectable ECC error(s) since its last reset: the process that hit them crashed, and the memory they hit is suspect until the reset remaps or retires it", g.Index, *h.VolatileUncorrectedECC),
				resetFix(g)+also+"; check Xid 48/63/64/94/95 in `dmesg` and drain the node if the errors return")
		}
		if h.RetiredPagesPending != nil && *h.RetiredPagesPending {
			add(verdict.RuleGPURetiredPagesPending, verdict.SeverityFail,
				fmt.Sprintf("GPU %d has memory pages waiting to be retired: they stay in use until the GPU is reset", g.Index),
				resetFix(g)+also)
		}
		if fb := g.Fabric; fb.Supported() {
			switch {
			case fb.State != topology.FabricCompleted:
				add(verdict.RuleNVLinkFabricNotReady, verdict.SeverityFail,
					fmt.Sprintf("GPU %d: NVLink fabric registration is %s, not completed: CUDA fails with error 802 (system not yet initialized) or NCCL hangs in init until it completes", g.Index, strings.ReplaceAll(string(fb.State), "_", " ")),
					fabricFix(fb))
			case fb.Failed():
				add(verdict.RuleNVLinkFabricFailed, verdict.SeverityFail,
					fmt.Sprintf("GPU %d: NVLink fabric registration completed with status %q: the GPU cannot use NVLink P2P", g.Index, fb.Status),
					fabricFix(fb)+"; read its log for the cause, then reset the GPUs")
			}
		}
		if g.Persistence != nil && !*g.Persistence {
			add(verdict.RulePersistenceOff, verdict.SeverityWarn,
				fmt.Sprintf("GPU %d has persistence mode off: %s", g.Index, persistenceCost),
				"run nvidia-persistenced on the node (the GPU Operator's driver container does), or `nvidia-smi -pm 1` as root")
		}
		if len(h.Throttle) > 0 {
			add(verdict.RuleClocksThrottled, verdict.SeverityWarn,
				fmt.Sprintf("GPU %d's clocks are held down at check time (%s): a throttled GPU paces every collective of the job", g.Index, strings.Join(h.Throttle, ", ")),
				"check the node's cooling, fans and power supply (`nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER`); the power brake is an external signal from the chassis or PSU")
		}
	}
	return f
}

// sensorFields are the values whose ERR! alone is a sensor that could not
// be read, often transient; anything else the driver fails to read (memory,
// ECC, MIG mode, persistence) means the GPU itself does not answer.
var sensorFields = map[string]bool{"fan": true, "temperature": true, "power": true, "performance state": true, "utilization": true}

// readErrorFinding: GPU_READ_ERROR, a warning for one or two sensors, a
// failure for more or for the GPU's own state.
func readErrorFinding(g *topology.GPU) (verdict.Severity, string, string) {
	fields := g.Health.ErrFields
	sev := verdict.SeverityWarn
	for _, f := range fields {
		if !sensorFields[f] {
			sev = verdict.SeverityFail
		}
	}
	if len(fields) > 2 {
		sev = verdict.SeverityFail
	}
	msg := fmt.Sprintf("GPU %d: nvidia-smi printed ERR! for its %s: the driver failed to read them from the GPU", g.Index, strings.Join(fields, ", "))
	fix := fmt.Sprintf("check `nvidia-smi -q -i %d` (GPU Recovery Action) and `dmesg` for Xid errors; a single sensor error can be transient, recheck before acting", g.Index)
	if sev == verdict.SeverityFail {
		msg += "; the GPU is not answering the driver and jobs on it fail or hang"
		fix = fmt.Sprintf("cordon and drain the node, look for Xid errors in `dmesg`, then reset GPU %d (`nvidia-smi -r -i %d`) or reboot; follow the GPU Recovery Action of `nvidia-smi -q -i %d` when it names one", g.Index, g.Index, g.Index)
	}
	return sev, msg, fix
}

// resetRequiredMessage says that g must be reset, the action the driver
// recommends, and what else the reset clears.
func resetRequiredMessage(g *topology.GPU, reasons []string) string {
	msg := fmt.Sprintf("GPU %d reports that it must be reset before use", g.Index)
	if a := g.Health.RecoveryAction; a != "" {
		msg += fmt.Sprintf(" (GPU Recovery Action: %s)", a)
	}
	if len(reasons) > 0 {
		msg += "; the reset also clears: " + strings.Join(reasons, ", ")
	}
	return msg
}

// lostMessage says which GPU is lost and how the source said so.
func lostMessage(g *topology.GPU) string {
	who := fmt.Sprintf("GPU %d", g.Index)
	if g.PCIBusID != "" {
		who += fmt.Sprintf(" (bus %s)", g.PCIBusID)
	}
	if r := g.Health.LostReason; r != "" {
		return fmt.Sprintf("%s is lost: the driver cannot open it (%s); it has most likely fallen off the bus, and no CUDA work can run on it", who, r)
	}
	return who + " has fallen off the bus: NVML answers GPU_IS_LOST; no CUDA work can run on it"
}

// resetReasons lists what a reset of g clears, for GPU_RESET_REQUIRED.
func resetReasons(g *topology.GPU) []string {
	var out []string
	if h := g.Health; h != nil {
		if h.RemapPending != nil && *h.RemapPending {
			out = append(out, "a pending row remap")
		}
		if h.RetiredPagesPending != nil && *h.RetiredPagesPending {
			out = append(out, "pages pending retirement")
		}
		if h.VolatileUncorrectedECC != nil && *h.VolatileUncorrectedECC > 0 {
			out = append(out, "the volatile uncorrectable ECC count")
		}
	}
	if g.MIGCurrent != topology.ModeUnknown && g.MIGPending != topology.ModeUnknown && g.MIGCurrent != g.MIGPending {
		out = append(out, "the pending MIG mode")
	}
	return out
}

// resetFix is the reset every reset-needing rule asks for, in the words
// MIG_MODE_PENDING uses.
func resetFix(g *topology.GPU) string {
	return fmt.Sprintf("stop the work on GPU %d, then reset it with `nvidia-smi -r -i %d` (or drain and reboot the node)", g.Index, g.Index)
}

// fabricFix names the service that registers the GPU: the IMEX service
// (with the fabric manager) on multi-node NVLink systems, the fabric
// manager on single-node NVSwitch systems.
func fabricFix(fb *topology.Fabric) string {
	if fb.MultiNode() {
		return "check the NVLink fabric services: nvidia-fabricmanager on the NVSwitch trays and nvidia-imex on the compute nodes (`systemctl status nvidia-imex`, `nvidia-imex-ctl -N`); registration completes once they run"
	}
	return "start nvidia-fabricmanager (`systemctl enable --now nvidia-fabricmanager`; its version must match the driver's) and wait until `nvidia-smi -q` shows Fabric State Completed, Status Success"
}
