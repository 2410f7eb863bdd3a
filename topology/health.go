package topology

import "strings"

// Health is what a GPU says about its own state: memory errors waiting for
// a reset, whether the GPU needs a reset at all, and clock slowdowns at the
// time of the check. Pointer fields are nil when the source did not say;
// Unsupported lists what the GPU or driver answered "not supported" for,
// which is an answer, not a failure.
type Health struct {
	// RemapPending: a row remap is waiting for a GPU reset (A100 and later).
	RemapPending *bool `json:"remapPending,omitempty"`
	// RemapFailure: a row remap failed; the GPU is out of spare rows.
	RemapFailure *bool `json:"remapFailure,omitempty"`
	// VolatileUncorrectedECC counts uncorrectable ECC errors since the last
	// reset or driver load.
	VolatileUncorrectedECC *uint64 `json:"volatileUncorrectedEcc,omitempty"`
	// RetiredPagesPending: pages are waiting to be retired at the next
	// reset (page retirement, before A100).
	RetiredPagesPending *bool `json:"retiredPagesPending,omitempty"`
	// ResetRequired: the GPU itself says it must be reset.
	ResetRequired *bool `json:"resetRequired,omitempty"`
	// Lost: the GPU has fallen off the bus (NVML GPU_IS_LOST on a health
	// query).
	Lost bool `json:"lost,omitempty"`
	// LostReason is what the source said when it could not reach the GPU
	// (nvidia-smi's "Unable to determine the device handle ..." line);
	// empty for NVML's GPU_IS_LOST.
	LostReason string `json:"lostReason,omitempty"`
	// RecoveryAction is the driver's recommended recovery action when it
	// is not None ("Reset", "Reboot", "Drain P2P", ...: -q's GPU Recovery
	// Action); ResetRequired is set with it.
	RecoveryAction string `json:"recoveryAction,omitempty"`
	// ErrFields names the values nvidia-smi could not read and printed as
	// ERR! (fan, temperature, power, memory, ...): the driver failed to
	// query the GPU for them.
	ErrFields []string `json:"errFields,omitempty"`
	// Throttle lists the clock-slowdown reasons active at the check among
	// those the rank rules judge (Throttle* constants).
	Throttle []string `json:"throttle,omitempty"`
	// Unsupported names the health queries the GPU or driver does not
	// support (Query* constants).
	Unsupported []string `json:"unsupported,omitempty"`
}

// Clock slowdown reasons the rank rules judge: hardware slowdown, thermal
// slowdown (hardware or software) and the power brake. Idle, application
// clocks, the software power cap and sync boost are normal operation.
const (
	ThrottleHWSlowdown        = "hw_slowdown"
	ThrottleHWThermalSlowdown = "hw_thermal_slowdown"
	ThrottleHWPowerBrake      = "hw_power_brake_slowdown"
	ThrottleSWThermalSlowdown = "sw_thermal_slowdown"
)

// Health queries, as Health.Unsupported names them.
const (
	QueryRemappedRows = "remapped_rows"
	QueryVolatileECC  = "volatile_ecc"
	QueryRetiredPages = "retired_pages"
	QueryFabric       = "fabric"
	QueryClocks       = "clocks_event_reasons"
)

// FabricState is a GPU's NVLink fabric registration state (NVML
// nvmlGpuFabricState_t, nvidia-smi -q's Fabric/State).
type FabricState string

// Fabric states. A GPU whose driver does not report the fabric has no
// Fabric at all.
const (
	FabricNotSupported FabricState = "not_supported"
	FabricNotStarted   FabricState = "not_started"
	FabricInProgress   FabricState = "in_progress"
	FabricCompleted    FabricState = "completed"
)

// FabricStatusSuccess is the status of a registration that worked.
const FabricStatusSuccess = "success"

// Fabric is a GPU's registration with the NVLink fabric: on NVSwitch
// systems the fabric manager registers each GPU; on multi-node NVLink
// systems (GB200 NVL72 and the like) the GPU also belongs to a cluster and
// a clique, and GPUs talk over NVLink only within one cluster and clique.
type Fabric struct {
	State FabricState `json:"state"`
	// Status is "success", or what failed (NVML's return text, or
	// nvidia-smi's word); empty when not reported yet.
	Status string `json:"status,omitempty"`
	// ClusterUUID is the fabric cluster; empty when the GPU reports none
	// (all zeros: a single-node NVSwitch system).
	ClusterUUID string `json:"clusterUuid,omitempty"`
	// CliqueID is the GPU's clique within the cluster; nil when unknown.
	CliqueID *uint32 `json:"cliqueId,omitempty"`
}

// Supported reports whether the GPU takes part in an NVLink fabric.
func (f *Fabric) Supported() bool { return f != nil && f.State != FabricNotSupported && f.State != "" }

// Failed reports a registration that ended with a failure status.
func (f *Fabric) Failed() bool {
	return f.Supported() && f.Status != "" && !strings.EqualFold(f.Status, FabricStatusSuccess)
}

// MultiNode reports whether the GPU belongs to a multi-node NVLink
// cluster: it reports a cluster UUID.
func (f *Fabric) MultiNode() bool { return f != nil && f.ClusterUUID != "" }

// NormalizeClusterUUID returns "" for an unset cluster UUID (all zeros, N/A)
// and the lower-case UUID otherwise.
func NormalizeClusterUUID(u string) string {
	u = strings.ToLower(strings.TrimSpace(u))
	if u == "" || u == "n/a" || strings.Trim(u, "0-") == "" {
		return ""
	}
	return u
}
