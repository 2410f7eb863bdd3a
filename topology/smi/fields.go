package smi

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rankgate/rankgate/topology"
)

// Field parsing shared by the parsers: indices, UUIDs, sizes, bus IDs,
// modes, and the GPU model a (possibly truncated) name stands for.

// modelFor finds the catalog model of a GPU. The plain table truncates long
// names ("NVIDIA A100-SXM...", "NVIDIA A100 80G..."); then the family word
// (A100, H100, ...) and the memory size pick the model when only one fits.
func modelFor(cat *topology.Catalog, name string, memMiB uint64) *topology.GPUModel {
	if name == "" {
		return nil
	}
	if m, ok := cat.Model(name); ok {
		return m
	}
	stem, truncated := strings.CutSuffix(strings.TrimSpace(name), "...")
	if !truncated || memMiB == 0 {
		return nil
	}
	var family string
	for _, w := range strings.FieldsFunc(strings.ToUpper(stem), func(r rune) bool { return r == ' ' || r == '-' }) {
		if isFamilyWord(w) {
			family = w
			break
		}
	}
	if family == "" {
		return nil
	}
	var found *topology.GPUModel
	for i := range cat.Models {
		m := &cat.Models[i]
		named := m.NamesWord(family)
		diff := float64(m.MemoryMiB) - float64(memMiB)
		if !named || diff > 0.08*float64(m.MemoryMiB) || -diff > 0.08*float64(m.MemoryMiB) {
			continue
		}
		if found != nil {
			return nil
		}
		found = m
	}
	return found
}

// isFamilyWord reports whether w looks like a GPU family: letters then
// digits, "A100", "GH200", "B200".
func isFamilyWord(w string) bool {
	i := 0
	for i < len(w) && w[i] >= 'A' && w[i] <= 'Z' {
		i++
	}
	if i == 0 || i > 3 || len(w)-i < 2 {
		return false
	}
	_, err := strconv.Atoi(w[i:])
	return err == nil
}

// parseIndex reads a non-negative decimal below max.
func parseIndex(s string, max int) (int, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n >= max || strings.HasPrefix(s, "+") {
		return 0, fmt.Errorf("%q is not a number from 0 to %d", clip(s), max-1)
	}
	return n, nil
}

// parseUUID checks a GPU-/MIG- UUID. Masked UUIDs people write into
// reports ("GPU-xxxxxxxx-...", "GPU-<redacted>") read as unknown, so two
// masked GPUs do not look like one.
func parseUUID(u, prefix string) (string, error) {
	u = strings.TrimSpace(u)
	if u == "" || strings.Trim(u, ".…*") == "" || strings.HasPrefix(u, "<") && strings.HasSuffix(u, ">") {
		return "", nil // "(UUID: ...)", "(UUID: <redacted>)"
	}
	if len(u) < len(prefix) || !strings.EqualFold(u[:len(prefix)], prefix) {
		return "", fmt.Errorf("UUID %q does not start with %s", clip(u), prefix)
	}
	rest := u[len(prefix):]
	if rest == "" {
		return "", nil
	}
	for _, c := range rest {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == '-') {
			return "", nil
		}
	}
	return u, nil
}

// parseProfile checks a MIG profile name ("3g.40gb", "1c.3g.40gb",
// "1g.10gb+me").
func parseProfile(name string) (int, int, error) {
	return topology.ParseProfileName(name)
}

// notAvailable reports whether a field holds one of the words nvidia-smi
// prints instead of a value it cannot read: "N/A", "[N/A]", "Not
// Supported", "[Insufficient Permissions]", "[Unknown Error]", ... (drivers
// differ in which columns and versions print which). Such a field says
// nothing; it is never an error.
func notAvailable(v string) bool {
	t := strings.TrimSpace(v)
	if strings.HasPrefix(t, "[") && strings.HasSuffix(t, "]") {
		t = strings.TrimSpace(t[1 : len(t)-1])
	}
	switch strings.ToLower(t) {
	case "", "n/a", "na", "not supported", "not available", "insufficient permissions",
		"unknown error", "unknown", "gpu requires reset", "gpu is lost", "no permission",
		"requested functionality has been deprecated", "err!":
		return true
	}
	return false
}

// parseMiB reads "81559 MiB" or "81559MiB"; "N/A" and the like are
// unknown.
func parseMiB(v string) (uint64, bool, error) {
	v = strings.TrimSpace(v)
	if notAvailable(v) {
		return 0, false, nil
	}
	num, ok := strings.CutSuffix(v, "MiB")
	if !ok {
		return 0, false, fmt.Errorf("%q is not a size in MiB", clip(v))
	}
	n, err := strconv.ParseUint(strings.TrimSpace(num), 10, 64)
	if err != nil || n > 1<<40 {
		return 0, false, fmt.Errorf("%q is not a size in MiB", clip(v))
	}
	return n, true, nil
}

// normBusID writes a PCI bus ID as NVML does: "00000000:00:09.0". Inputs
// carry 4- or 8-digit domains, any case.
func normBusID(s string) (string, error) {
	s = strings.ToUpper(strings.TrimSpace(s))
	bad := fmt.Errorf("%q is not a PCI bus ID like 00000000:3B:00.0", clip(s))
	parts := strings.Split(s, ":")
	if len(parts) == 2 {
		parts = append([]string{"0"}, parts...)
	}
	if len(parts) != 3 {
		return "", bad
	}
	dev, fn, ok := strings.Cut(parts[2], ".")
	if !ok {
		return "", bad
	}
	hex := func(x string, max int) (uint64, bool) {
		if x == "" || len(x) > max {
			return 0, false
		}
		n, err := strconv.ParseUint(x, 16, 32)
		return n, err == nil
	}
	d, ok1 := hex(parts[0], 8)
	bus, ok2 := hex(parts[1], 2)
	dv, ok3 := hex(dev, 2)
	f, ok4 := hex(fn, 1)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return "", bad
	}
	return fmt.Sprintf("%08X:%02X:%02X.%X", d, bus, dv, f), nil
}

// parseMIGMode reads "Enabled", "Disabled" and "N/A" (a GPU without MIG);
// other words nvidia-smi prints for a field it cannot read
// ("[Insufficient Permissions]") are unknown. A trailing asterisk is
// dropped: see parseMIGModeCell for what it means.
func parseMIGMode(v string) (topology.MIGMode, bool) {
	t := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "*"))
	switch strings.ToLower(strings.Trim(t, "[]")) {
	case "enabled":
		return topology.ModeEnabled, true
	case "disabled":
		return topology.ModeDisabled, true
	case "n/a", "not supported":
		return topology.ModeUnsupported, true
	}
	if notAvailable(t) {
		return topology.ModeUnknown, true
	}
	return topology.ModeUnknown, false
}

// parseMIGModeCell reads a MIG mode as the table and -q print it. An
// asterisk ("Enabled*", "Disabled*") marks a mode change that waits for a
// GPU reset: the word is the pending mode and the GPU still runs in the
// other one. "Disabled*" is a GPU in MIG mode now (no CUDA work without
// instances), "Enabled*" one not yet in MIG mode (full-GPU work still
// runs). Without an asterisk the mode is current, and pending is unknown
// unless star says otherwise.
func parseMIGModeCell(v string) (current, pending topology.MIGMode, ok bool) {
	mode, ok := parseMIGMode(v)
	if !ok {
		return topology.ModeUnknown, topology.ModeUnknown, false
	}
	if !strings.HasSuffix(strings.TrimSpace(v), "*") {
		return mode, topology.ModeUnknown, true
	}
	switch mode {
	case topology.ModeEnabled:
		return topology.ModeDisabled, topology.ModeEnabled, true
	case topology.ModeDisabled:
		return topology.ModeEnabled, topology.ModeDisabled, true
	}
	return mode, topology.ModeUnknown, true
}

// parseOnOff reads persistence mode: "Enabled"/"On" and "Disabled"/"Off".
func parseOnOff(v string) *bool {
	var b bool
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "enabled", "on":
		b = true
	case "disabled", "off":
	default:
		return nil
	}
	return &b
}

// cmdIndices returns the GPU indices an `-i 0,3` option selected, so that a
// -q output of selected GPUs is numbered right.
func cmdIndices(args []string) []int {
	var v string
	for i, a := range args {
		switch {
		case (a == "-i" || a == "--id") && i+1 < len(args):
			v = args[i+1]
		case strings.HasPrefix(a, "--id="):
			v = strings.TrimPrefix(a, "--id=")
		case strings.HasPrefix(a, "-i") && len(a) > 2 && a[2] >= '0' && a[2] <= '9':
			v = a[2:]
		}
	}
	if v == "" {
		return nil
	}
	var out []int
	for _, p := range strings.Split(v, ",") {
		n, err := parseIndex(p, maxGPUs)
		if err != nil {
			return nil // a UUID or bus ID: no index to learn
		}
		out = append(out, n)
	}
	return out
}
