package topology

import (
	"fmt"
	"sort"
	"strings"
)

// Allocation is the set of devices one rank was given, before resolution
// against the inventory.
// FromDefault is Allocation.From when nothing named the rank's devices (no
// --devices, nothing in the environment, no pod): every device of the node.
const FromDefault = "default (all devices of the node)"

type Allocation struct {
	// From says where the list came from: "--devices",
	// "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "podresources".
	From string `json:"from"`
	// Refs are device identifiers (UUIDs, N, N:M), sharing suffixes kept.
	Refs []string `json:"refs,omitempty"`
	// All is NVIDIA_VISIBLE_DEVICES=all: every device of the node.
	All bool `json:"all,omitempty"`
}

// Env is the environment as a lookup function, for tests.
type Env func(key string) (string, bool)

// ParseDeviceList splits a comma-separated device list and checks the form
// of each entry. Empty entries are refused: "0,,1" is a typo, not two GPUs.
func ParseDeviceList(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, fmt.Errorf("device list %q has an empty entry", s)
		}
		if err := CheckDeviceRef(p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// CheckDeviceRef checks an identifier's form without an inventory.
func CheckDeviceRef(ref string) error {
	_, err := (&Inventory{}).Resolve(ref)
	if err == nil {
		return nil
	}
	if isNotFound(err) {
		return nil
	}
	return err
}

func isNotFound(err error) bool {
	for e := err; e != nil; {
		if e == ErrDeviceNotFound {
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

// VolumeMountsDir is where the NVIDIA container toolkit's volume-mounts
// strategy puts one empty file per device, named by its ID.
const VolumeMountsDir = "/var/run/nvidia-container-devices"

// AllocationFromEnv reads the rank's devices from the environment:
// NVIDIA_VISIBLE_DEVICES (ids, all, none, void, or the volume-mounts
// directory) first, then CUDA_VISIBLE_DEVICES. ok is false when neither is
// set. listDir lists a directory's entry names (the volume-mounts form).
func AllocationFromEnv(env Env, listDir func(string) ([]string, error)) (a Allocation, ok bool, err error) {
	if v, set := env("NVIDIA_VISIBLE_DEVICES"); set {
		a.From = "NVIDIA_VISIBLE_DEVICES"
		v = strings.TrimSpace(v)
		switch strings.ToLower(v) {
		case "all":
			a.All = true
			return a, true, nil
		case "none", "void", "":
			return a, true, nil
		}
		if strings.HasPrefix(v, "/") {
			if strings.TrimRight(v, "/") != VolumeMountsDir {
				return a, true, fmt.Errorf("NVIDIA_VISIBLE_DEVICES=%q: a path must be %s (volume-mounts strategy)", v, VolumeMountsDir)
			}
			names, err := listDir(VolumeMountsDir)
			if err != nil {
				return a, true, fmt.Errorf("NVIDIA_VISIBLE_DEVICES=%s: %w", v, err)
			}
			sort.Strings(names)
			for _, n := range names {
				if strings.EqualFold(n, "all") {
					a.All = true
					return a, true, nil
				}
				if err := CheckDeviceRef(n); err != nil {
					return a, true, fmt.Errorf("%s/%s: %w", VolumeMountsDir, n, err)
				}
				a.Refs = append(a.Refs, n)
			}
			return a, true, nil
		}
		refs, err := ParseDeviceList(v)
		if err != nil {
			return a, true, fmt.Errorf("NVIDIA_VISIBLE_DEVICES: %w", err)
		}
		a.Refs = refs
		return a, true, nil
	}
	if v, set := env("CUDA_VISIBLE_DEVICES"); set {
		a.From = "CUDA_VISIBLE_DEVICES"
		v = strings.TrimSpace(v)
		// CUDA stops at the first invalid entry; -1 and empty hide all GPUs.
		if v == "" || v == "-1" {
			return a, true, nil
		}
		refs, err := ParseDeviceList(v)
		if err != nil {
			return a, true, fmt.Errorf("CUDA_VISIBLE_DEVICES: %w", err)
		}
		a.Refs = refs
		return a, true, nil
	}
	return a, false, nil
}

// Devices resolves an allocation against the inventory. Refs that resolve
// to nothing are returned separately with the reason.
func (inv *Inventory) Devices(a Allocation) (found []Device, missing map[string]error) {
	if a.All {
		return inv.AllDevices(), nil
	}
	missing = map[string]error{}
	seen := map[string]bool{}
	for _, r := range a.Refs {
		d, err := inv.Resolve(r)
		if err != nil {
			missing[r] = err
			continue
		}
		// Time-slicing replicas of one device ("GPU-x::0", "GPU-x::1") are
		// one device.
		if seen[d.ID()] {
			continue
		}
		seen[d.ID()] = true
		found = append(found, d)
	}
	return found, missing
}
