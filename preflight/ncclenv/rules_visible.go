package ncclenv

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rankgate/rankgate/verdict"
)

const (
	envCUDAVisible   = "CUDA_VISIBLE_DEVICES"
	envNVIDIAVisible = "NVIDIA_VISIBLE_DEVICES"
)

const visibleFix = "remove the hand-set variable: the device plugin hands each container its devices, and torchrun or mpirun give each local rank its own"

func ruleVisibleDevices(in Input) []verdict.Finding {
	var out []verdict.Finding
	for _, r := range in.Ranks {
		if f, ok := cudaVisible(in.Scope, r); ok {
			out = append(out, f)
		}
		if in.Scope == ScopeLocal {
			continue // in the container the variable is the device plugin's own
		}
		if f, ok := nvidiaVisible(r); ok {
			out = append(out, f)
		}
	}
	return out
}

// cudaVisible judges a hand-set CUDA_VISIBLE_DEVICES against the devices
// the rank gets: CUDA numbers the container's devices 0..n-1, so an index
// of n or more, or a UUID the rank was not given, leaves a local rank
// without its GPU ("invalid device ordinal", "no CUDA-capable device").
func cudaVisible(scope Scope, r Rank) (verdict.Finding, bool) {
	s, set, known := r.Env.String(envCUDAVisible)
	if !set || !known {
		return verdict.Finding{}, false
	}
	if scope == ScopeLocal && !containerRenumbers(r.Env) {
		return verdict.Finding{}, false // CUDA sees every GPU of the host: the indices are the host's
	}
	entries := splitList(s)
	n, ids, devicesKnown := r.GPUs, map[string]bool{}, scope != ScopeTemplate && r.DevicesKnown
	if devicesKnown {
		n = len(r.Devices)
		for _, d := range r.Devices {
			ids[d.ID] = true
		}
	}
	if n <= 0 && !devicesKnown {
		return verdict.Finding{}, false // a template asking for no GPU
	}
	var bad []string
	for _, e := range entries {
		if i, err := strconv.Atoi(e); err == nil {
			if i < 0 || i >= n {
				bad = append(bad, e)
			}
			continue
		}
		if isUUID(e) && (!devicesKnown || !ids[e]) {
			bad = append(bad, e)
		}
	}
	what := fmt.Sprintf("%d devices", n)
	if r.mig() {
		what += " (MIG: CUDA shows one per process)"
	}
	switch {
	case len(bad) > 0:
		why := "the container sees only its own devices, numbered from 0"
		if !devicesKnown && hasUUID(bad) {
			why = "a pod template cannot know which device a pod will get"
		}
		return finding(verdict.RuleVisibleDevicesMismatch, verdict.SeverityFail, []Rank{r},
			fmt.Sprintf("%s sets %s=%s, naming %s outside the rank's %s: %s, so local ranks will not get their GPU", r.label(), envCUDAVisible, s, strings.Join(bad, ","), what, why),
			visibleFix), true
	case len(entries) < n:
		return finding(verdict.RuleVisibleDevicesMismatch, verdict.SeverityWarn, []Rank{r},
			fmt.Sprintf("%s sets %s=%s: %d of the rank's %s stay unused and local ranks beyond them find no GPU", r.label(), envCUDAVisible, s, n-len(entries), what),
			visibleFix), true
	}
	return verdict.Finding{}, false
}

// nvidiaVisible judges NVIDIA_VISIBLE_DEVICES set in a pod template: the
// device plugin sets it for containers that request GPUs; set by hand in
// one that requests none, the NVIDIA runtime hands the container GPUs the
// scheduler never gave it (shared with whichever pod holds them).
func nvidiaVisible(r Rank) (verdict.Finding, bool) {
	s, set, known := r.Env.String(envNVIDIAVisible)
	if !set || !known || r.Rank >= 0 && r.DevicesKnown {
		return verdict.Finding{}, false
	}
	switch v := strings.ToLower(strings.TrimSpace(s)); {
	case v == "void" || v == "none":
		return verdict.Finding{}, false
	case r.GPUs == 0:
		return finding(verdict.RuleVisibleDevicesMismatch, verdict.SeverityFail, []Rank{r},
			fmt.Sprintf("%s sets %s=%s and requests no GPU: the container runtime exposes those GPUs outside the scheduler's allocation, where other pods run", r.label(), envNVIDIAVisible, s),
			"request nvidia.com/gpu or a nvidia.com/mig-* resource and remove NVIDIA_VISIBLE_DEVICES"), true
	}
	return finding(verdict.RuleVisibleDevicesMismatch, verdict.SeverityWarn, []Rank{r},
		fmt.Sprintf("%s sets %s=%s by hand: the device plugin sets it to the devices it allocates, so the value is replaced or, where it wins, names devices other pods hold", r.label(), envNVIDIAVisible, s),
		visibleFix), true
}

// containerRenumbers: NVIDIA_VISIBLE_DEVICES names the container's devices,
// so CUDA inside numbers them from 0.
func containerRenumbers(e *Env) bool {
	v, set, known := e.String(envNVIDIAVisible)
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "all", "void", "none":
		return false
	}
	return set && known
}

func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

func isUUID(s string) bool { return strings.HasPrefix(s, "GPU-") || strings.HasPrefix(s, "MIG-") }

func hasUUID(l []string) bool {
	for _, e := range l {
		if isUUID(e) {
			return true
		}
	}
	return false
}
