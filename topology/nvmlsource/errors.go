//go:build linux && cgo

package nvmlsource

import (
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// class is what a person needs to know about one kind of failure.
type class struct {
	name        string
	message     string
	remediation string
}

// returnClasses maps the NVML return codes that need distinct handling
// (domain.md section 6). Everything else is ClassUnknown.
var returnClasses = map[nvml.Return]class{
	nvml.ERROR_DRIVER_NOT_LOADED: {verdict.ClassDriverNotLoaded,
		"the NVIDIA kernel driver is not loaded",
		"Load the driver on the node: the GPU Operator's driver pod must be Running (or run `modprobe nvidia` on a host install); `dmesg | grep -i nvrm` tells why it failed to load."},
	nvml.ERROR_LIBRARY_NOT_FOUND: {verdict.ClassLibraryNotFound,
		"the NVML library libnvidia-ml.so.1 could not be loaded",
		"Run the container with the NVIDIA runtime so the driver libraries are mounted (runtimeClassName: nvidia, or the NVIDIA Container Toolkit with NVIDIA_DRIVER_CAPABILITIES including utility); on a host, install the driver or put its library directory on the loader path."},
	nvml.ERROR_LIB_RM_VERSION_MISMATCH: {verdict.ClassLibRMVersionMismatch,
		"the NVML library and the loaded kernel driver have different versions: the driver was upgraded without a reboot",
		"Drain the node and reboot it (or unload and reload the nvidia kernel modules) so that the kernel driver matches the user-space libraries."},
	nvml.ERROR_GPU_IS_LOST: {verdict.ClassGPUIsLost,
		"the GPU has fallen off the bus or is otherwise inaccessible",
		"Cordon and drain the node, look for Xid 79 in `dmesg`, then reset the GPU (`nvidia-smi -r`) or reboot; replace the GPU if it happens again."},
	nvml.ERROR_RESET_REQUIRED: {verdict.ClassResetRequired,
		"the GPU must be reset before it can be used",
		"Stop the GPU's workloads and reset it (`nvidia-smi -r -i <index>`), or drain and reboot the node."},
	nvml.ERROR_CORRUPTED_INFOROM: {verdict.ClassCorruptedInfoROM,
		"the GPU's infoROM is corrupted",
		"Cordon the node and have the GPU's infoROM reflashed or the board replaced by its vendor; `nvidia-smi -q` shows the infoROM state."},
	nvml.ERROR_IRQ_ISSUE: {verdict.ClassIRQIssue,
		"the NVIDIA kernel driver detected an interrupt problem with the GPU",
		"Check `dmesg` for NVRM interrupt errors and the BIOS/kernel MSI and IOMMU settings; reboot the node and escalate to hardware support if it returns."},
	nvml.ERROR_OPERATING_SYSTEM: {verdict.ClassOperatingSystem,
		"the operating system blocked the NVML call",
		"Check that the container sees /dev/nvidiactl and /dev/nvidia<N> and that its cgroup still allows them: a `systemctl daemon-reload` on the host can drop the device rules the NVIDIA Container Toolkit set (restart the pod); SELinux or AppArmor may also deny access."},
	nvml.ERROR_NO_PERMISSION: {verdict.ClassNoPermission,
		"the process lacks permission for the NVML call",
		"Give the pod the devices it inspects by requesting the GPU resource (nvidia.com/gpu or nvidia.com/mig-<profile>) rather than running privileged; check the permissions of /dev/nvidia* in the container."},
	nvml.ERROR_TIMEOUT: {verdict.ClassTimeout,
		"the driver timed out answering the NVML call (transient)",
		"Retry discovery; if it keeps timing out, check the GPU's health (`nvidia-smi`, Xid errors in `dmesg`) and enable persistence mode."},
	nvml.ERROR_NOT_READY: {verdict.ClassNotReady,
		"the GPU or the driver is not ready yet (transient: still initializing or being reconfigured)",
		"Retry in a few seconds; if mig-manager is reconfiguring the node (label nvidia.com/mig.config.state=pending), wait until it reports success."},
	nvml.ERROR_NOT_FOUND: {verdict.ClassNotFound,
		"an NVML object disappeared during discovery (a GPU or MIG instance was removed or reconfigured)",
		"Retry once MIG reconfiguration has finished (nvidia.com/mig.config.state=success); if it persists, compare `nvidia-smi -L` with the devices the pod was given."},
	nvml.ERROR_GPU_NOT_FOUND: {verdict.ClassGPUNotFound,
		"NVML found no GPU",
		"Check that the pod requests a GPU resource and that NVIDIA_VISIBLE_DEVICES is not void or none; on the node, `nvidia-smi -L` must list the GPUs."},
}

const (
	remediationUnknown = "Check the GPU and the driver (`nvidia-smi`, Xid errors in `dmesg`); a container that reports 'Unknown Error' after a `systemctl daemon-reload` on the host must be restarted."
	remediationHung    = "The GPU or the driver is wedged: look for Xid errors and hung tasks in `dmesg`, then drain the node and reset the GPU or reboot. If only the first call is slow (no persistence mode), enable persistence mode (nvidia-persistenced) or raise the call timeout."
	remediationPanic   = "This is a defect in the NVML binding or in rankgate; report it with the NVML driver version."
)

// Classes lists every class Inventory can fail with, for documentation and
// tests: the NVML return code classes, UNKNOWN and CALL_HUNG.
func Classes() []string {
	return []string{
		verdict.ClassDriverNotLoaded, verdict.ClassLibraryNotFound, verdict.ClassLibRMVersionMismatch,
		verdict.ClassGPUIsLost, verdict.ClassResetRequired, verdict.ClassCorruptedInfoROM, verdict.ClassIRQIssue,
		verdict.ClassOperatingSystem, verdict.ClassNoPermission, verdict.ClassTimeout, verdict.ClassNotReady,
		verdict.ClassNotFound, verdict.ClassGPUNotFound, verdict.ClassUnknown, verdict.ClassCallHung,
	}
}

// classify turns a failed call into a DiscoveryError. Err is the NVML
// return code, so errors.Is(err, nvml.ERROR_GPU_IS_LOST) works.
func classify(o op, r nvml.Return) *topology.DiscoveryError {
	c, ok := returnClasses[r]
	if !ok {
		c = class{verdict.ClassUnknown, "the NVML call failed: " + r.Error(), remediationUnknown}
	}
	return &topology.DiscoveryError{
		Class:       c.name,
		Op:          o.String(),
		Message:     o.subject() + c.message,
		Remediation: c.remediation,
		Err:         r,
	}
}

func hungError(o op, waited time.Duration, cause error) *topology.DiscoveryError {
	return &topology.DiscoveryError{
		Class:       verdict.ClassCallHung,
		Op:          o.String(),
		Message:     fmt.Sprintf("%sthe NVML call did not return within its deadline (waited %s); discovery stopped there", o.subject(), waited.Round(time.Millisecond)),
		Remediation: remediationHung,
		Hung:        true,
		Err:         cause,
	}
}
