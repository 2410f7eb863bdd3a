package smi

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rankgate/rankgate/topology"
)

// Health and fabric facts of `nvidia-smi -q` and `-q -x`. Both carry the
// same fields under different names:
//
//	-q                                          -q -x
//	Remapped Rows/Pending                       remapped_rows/remapped_row_pending
//	Remapped Rows/Remapping Failure Occurred    remapped_rows/remapped_row_failure
//	ECC Errors/Volatile/* Uncorrectable*        ecc_errors/volatile/*_uncorrectable*
//	Retired Pages/Pending Page Blacklist        retired_pages/pending_blacklist
//	GPU Reset Status/Reset Required             gpu_reset_status/reset_required
//	Fabric/State, Status, CliqueId, ClusterUUID fabric/state, status, cliqueId, clusterUuid
//	Clocks Event Reasons/HW Slowdown ...        clocks_event_reasons/clocks_event_reason_hw_slowdown ...
//
// (older drivers say "Clocks Throttle Reasons", <clocks_throttle_reasons>,
// and count volatile double-bit errors under Double Bit/Total). N/A is
// "not reported": the field stays unknown.

type healthKey int

const (
	hRemapPending healthKey = iota + 1
	hRemapFailure
	hVolatileUncorrected
	hPagesPending
	hResetRequired
	hFabricState
	hFabricStatus
	hFabricClique
	hFabricCluster
	hThrottle
	hRecovery
)

// throttleNames maps the -q keys and -q -x element suffixes of the judged
// slowdown reasons to their names in the model.
var throttleNames = map[string]string{
	"HW Slowdown":             topology.ThrottleHWSlowdown,
	"HW Thermal Slowdown":     topology.ThrottleHWThermalSlowdown,
	"HW Power Brake Slowdown": topology.ThrottleHWPowerBrake,
	"SW Thermal Slowdown":     topology.ThrottleSWThermalSlowdown,
	"hw_slowdown":             topology.ThrottleHWSlowdown,
	"hw_thermal_slowdown":     topology.ThrottleHWThermalSlowdown,
	"hw_power_brake_slowdown": topology.ThrottleHWPowerBrake,
	"sw_thermal_slowdown":     topology.ThrottleSWThermalSlowdown,
}

// queryHealthKey classifies a -q field by its section path below the GPU.
func queryHealthKey(path, key string) (healthKey, string) {
	if strings.EqualFold(path, "Retired Pages") {
		path = "Retired Pages"
	}
	if path == "" && key == "GPU Recovery Action" {
		return hRecovery, ""
	}
	switch path {
	case "Remapped Rows":
		switch key {
		case "Pending":
			return hRemapPending, ""
		case "Remapping Failure Occurred":
			return hRemapFailure, ""
		}
	case "ECC Errors/Volatile":
		if strings.Contains(key, "Uncorrectable") {
			return hVolatileUncorrected, ""
		}
	case "ECC Errors/Volatile/Double Bit":
		if key == "Total" {
			return hVolatileUncorrected, ""
		}
	case "Retired Pages":
		if strings.HasPrefix(key, "Pending") {
			return hPagesPending, ""
		}
	case "GPU Reset Status":
		if key == "Reset Required" {
			return hResetRequired, ""
		}
	case "Fabric":
		switch key {
		case "State":
			return hFabricState, ""
		case "Status":
			return hFabricStatus, ""
		case "CliqueId", "Clique ID":
			return hFabricClique, ""
		case "ClusterUUID", "Cluster UUID":
			return hFabricCluster, ""
		}
	case "Clocks Event Reasons", "Clocks Throttle Reasons", "Clocks Throttle Reasons/HW Slowdown", "Clocks Event Reasons/HW Slowdown":
		if n, ok := throttleNames[key]; ok {
			return hThrottle, n
		}
	}
	return 0, ""
}

// xmlHealthKey classifies a -q -x element by its path below <gpu>.
func xmlHealthKey(path []string) (healthKey, string) {
	switch len(path) {
	case 1:
		if path[0] == "gpu_recovery_action" {
			return hRecovery, ""
		}
	case 2:
		switch path[0] + "/" + path[1] {
		case "remapped_rows/remapped_row_pending":
			return hRemapPending, ""
		case "remapped_rows/remapped_row_failure":
			return hRemapFailure, ""
		case "retired_pages/pending_blacklist", "retired_pages/pending_retirement":
			return hPagesPending, ""
		case "gpu_reset_status/reset_required":
			return hResetRequired, ""
		case "fabric/state":
			return hFabricState, ""
		case "fabric/status":
			return hFabricStatus, ""
		case "fabric/cliqueId":
			return hFabricClique, ""
		case "fabric/clusterUuid":
			return hFabricCluster, ""
		}
		for _, p := range []string{"clocks_event_reasons/clocks_event_reason_", "clocks_throttle_reasons/clocks_throttle_reason_"} {
			if rest, ok := strings.CutPrefix(path[0]+"/"+path[1], p); ok {
				if n, ok := throttleNames[rest]; ok {
					return hThrottle, n
				}
			}
		}
	case 3:
		if path[0] == "ecc_errors" && path[1] == "volatile" && strings.Contains(path[2], "_uncorrectable") {
			return hVolatileUncorrected, ""
		}
	case 4:
		if path[0] == "ecc_errors" && path[1] == "volatile" && path[2] == "double_bit" && path[3] == "total" {
			return hVolatileUncorrected, ""
		}
	}
	return 0, ""
}

func (g *gpuFact) healthFact() *topology.Health {
	if g.health == nil {
		g.health = &topology.Health{}
	}
	return g.health
}

func (g *gpuFact) fabricFact() *topology.Fabric {
	if g.fabric == nil {
		g.fabric = &topology.Fabric{}
	}
	return g.fabric
}

// setHealth records one health or fabric value.
func (g *gpuFact) setHealth(k healthKey, name, val string) error {
	val = strings.TrimSpace(val)
	if k == 0 || notAvailable(val) || val == "" {
		return nil
	}
	yesNo := func(dst **bool) error {
		var b bool
		switch strings.ToLower(val) {
		case "yes":
			b = true
		case "no":
		default:
			return fmt.Errorf("%q is not Yes, No or N/A", clip(val))
		}
		*dst = &b
		return nil
	}
	switch k {
	case hRemapPending:
		return yesNo(&g.healthFact().RemapPending)
	case hRemapFailure:
		return yesNo(&g.healthFact().RemapFailure)
	case hPagesPending:
		h := g.healthFact()
		var p *bool
		if err := yesNo(&p); err != nil {
			return err
		}
		if h.RetiredPagesPending == nil || *p {
			h.RetiredPagesPending = p
		}
	case hResetRequired:
		return yesNo(&g.healthFact().ResetRequired)
	case hRecovery:
		g.setRecovery(val)
	case hVolatileUncorrected:
		n, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a count", clip(val))
		}
		h := g.healthFact()
		if h.VolatileUncorrectedECC == nil {
			h.VolatileUncorrectedECC = new(uint64)
		}
		*h.VolatileUncorrectedECC += n
	case hThrottle:
		if strings.EqualFold(val, "Active") {
			h := g.healthFact()
			for _, t := range h.Throttle {
				if t == name {
					return nil
				}
			}
			h.Throttle = append(h.Throttle, name)
		}
	default:
		return g.setFabric(k, val)
	}
	return nil
}

// setRecovery records the driver's recommended recovery action (-q's GPU
// Recovery Action, R575 and later; a table's "Recovery action" line): any
// action but None means the GPU must be reset (or the node rebooted, or
// drained) before use.
func (g *gpuFact) setRecovery(val string) {
	val = strings.TrimSpace(val)
	if val == "" || notAvailable(val) || strings.EqualFold(val, "None") {
		return
	}
	h := g.healthFact()
	t := true
	h.ResetRequired = &t
	h.RecoveryAction = val
}

// setFabric records one fabric value.
func (g *gpuFact) setFabric(k healthKey, val string) error {
	switch k {
	case hFabricState:
		switch strings.ToLower(val) {
		case "completed":
			g.fabricFact().State = topology.FabricCompleted
		case "in progress":
			g.fabricFact().State = topology.FabricInProgress
		case "not started":
			g.fabricFact().State = topology.FabricNotStarted
		case "not supported":
			g.fabricFact().State = topology.FabricNotSupported
		default:
			return fmt.Errorf("%q is not a fabric state (Completed, In Progress, Not Started, Not Supported, N/A)", clip(val))
		}
	case hFabricStatus:
		if strings.EqualFold(val, "Success") {
			val = topology.FabricStatusSuccess
		}
		g.fabricFact().Status = val
	case hFabricClique:
		n, err := strconv.ParseUint(val, 10, 32)
		if err != nil {
			return fmt.Errorf("%q is not a clique ID", clip(val))
		}
		c := uint32(n)
		g.fabricFact().CliqueID = &c
	case hFabricCluster:
		g.fabricFact().ClusterUUID = topology.NormalizeClusterUUID(val)
	}
	return nil
}

// finishHealth drops a fabric that says nothing (every field N/A) and
// orders the slowdown reasons.
func (g *gpuFact) finishHealth() {
	if g.fabric != nil && g.fabric.State == "" {
		g.fabric = nil
	}
	if g.health != nil {
		h := g.health
		var ordered []string
		for _, t := range []string{topology.ThrottleHWSlowdown, topology.ThrottleHWThermalSlowdown, topology.ThrottleHWPowerBrake, topology.ThrottleSWThermalSlowdown} {
			for _, x := range h.Throttle {
				if x == t {
					ordered = append(ordered, t)
				}
			}
		}
		h.Throttle = ordered
	}
}

// mergeHealth fills what the inventory does not know yet from another
// output's facts. Health counters move between outputs taken minutes
// apart, so a later output never conflicts with an earlier one: the first
// to say wins.
func mergeHealth(g *topology.GPU, h *topology.Health, f *topology.Fabric) {
	if h != nil {
		if g.Health == nil {
			c := *h
			g.Health = &c
		} else {
			cur := g.Health
			fill(&cur.RemapPending, h.RemapPending)
			fill(&cur.RemapFailure, h.RemapFailure)
			fill(&cur.VolatileUncorrectedECC, h.VolatileUncorrectedECC)
			fill(&cur.RetiredPagesPending, h.RetiredPagesPending)
			fill(&cur.ResetRequired, h.ResetRequired)
			if len(cur.Throttle) == 0 {
				cur.Throttle = h.Throttle
			}
			if cur.RecoveryAction == "" {
				cur.RecoveryAction = h.RecoveryAction
			}
			if len(cur.ErrFields) == 0 {
				cur.ErrFields = h.ErrFields
			}
		}
	}
	if f != nil && g.Fabric == nil {
		c := *f
		g.Fabric = &c
	}
}

func fill[T any](dst **T, v *T) {
	if *dst == nil && v != nil {
		*dst = v
	}
}
