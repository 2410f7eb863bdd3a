package topology

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// DeviceKind tells a full GPU from a MIG device.
type DeviceKind string

// Device kinds.
const (
	KindGPU DeviceKind = "gpu"
	KindMIG DeviceKind = "mig"
)

// Device is one device a rank was given, resolved against an inventory.
type Device struct {
	// Ref is the identifier the rank was given, as written.
	Ref  string     `json:"ref"`
	Kind DeviceKind `json:"kind"`
	// GPU is the physical GPU: the device itself, or a MIG device's parent.
	GPU *GPU       `json:"-"`
	MIG *MIGDevice `json:"-"`
}

// Name describes the device for people: "GPU 0 (GPU-8f...)" or
// "MIG 3g.40gb 0:1 (MIG-1c...)".
func (d Device) Name() string {
	if d.Kind == KindMIG && d.MIG != nil {
		p := d.MIG.Profile
		if p == "" {
			p = "device"
		}
		if d.MIG.UUID != "" {
			return fmt.Sprintf("MIG %s %d:%d (%s)", p, d.GPU.Index, d.MIG.Index, d.MIG.UUID)
		}
		return fmt.Sprintf("MIG %s %d:%d", p, d.GPU.Index, d.MIG.Index)
	}
	if d.GPU == nil {
		return d.Ref
	}
	if d.GPU.UUID != "" {
		return fmt.Sprintf("GPU %d (%s)", d.GPU.Index, d.GPU.UUID)
	}
	return fmt.Sprintf("GPU %d", d.GPU.Index)
}

// ID is the device's stable identifier: its UUID when known, else N or N:M.
func (d Device) ID() string {
	switch {
	case d.Kind == KindMIG && d.MIG != nil && d.MIG.UUID != "":
		return d.MIG.UUID
	case d.Kind == KindMIG && d.MIG != nil:
		return fmt.Sprintf("%d:%d", d.GPU.Index, d.MIG.Index)
	case d.GPU != nil && d.GPU.UUID != "":
		return d.GPU.UUID
	case d.GPU != nil:
		return strconv.Itoa(d.GPU.Index)
	}
	return d.Ref
}

// IsIndexID: id is the N or N:M form ID gives a device without a UUID.
func IsIndexID(id string) bool {
	gpu, mig, isMIG := strings.Cut(id, ":")
	digits := func(s string) bool {
		_, err := strconv.ParseUint(s, 10, 32)
		return err == nil
	}
	return digits(gpu) && (!isMIG || digits(mig))
}

// SMs is the device's SM count; 0 when unknown.
func (d Device) SMs() int {
	if d.Kind == KindMIG {
		return d.MIG.SMs
	}
	return d.GPU.SMs
}

// MemoryMiB is the device's memory; 0 when unknown.
func (d Device) MemoryMiB() uint64 {
	if d.Kind == KindMIG {
		return d.MIG.MemoryMiB
	}
	return d.GPU.MemoryMiB
}

// Profile is the MIG profile, or "full" for a whole GPU.
func (d Device) Profile() string {
	if d.Kind == KindMIG {
		return d.MIG.Profile
	}
	return "full"
}

// ErrDeviceNotFound is returned by Resolve for a well-formed identifier that
// names no device of the inventory.
var ErrDeviceNotFound = errors.New("device not found on this node")

// ErrBadDeviceRef is returned by Resolve for an identifier of no known form.
var ErrBadDeviceRef = errors.New("not a device identifier")

// StripSharing removes the time-slicing/MPS replica suffix "::N".
func StripSharing(ref string) string {
	if i := strings.Index(ref, "::"); i >= 0 {
		return ref[:i]
	}
	return ref
}

// Resolve finds the device an identifier names. Accepted forms: GPU-<uuid>,
// MIG-<uuid>, legacy MIG-GPU-<uuid>/<gi>/<ci>, a GPU index "N", a MIG
// device "N:M" (nvidia-smi numbering), each with an optional "::N" sharing
// suffix. UUIDs compare case-insensitively.
func (inv *Inventory) Resolve(ref string) (Device, error) {
	id := strings.TrimSpace(StripSharing(ref))
	out := Device{Ref: ref}
	if id == "" {
		return out, fmt.Errorf("%w: empty", ErrBadDeviceRef)
	}
	up := strings.ToUpper(id)
	switch {
	case strings.HasPrefix(up, "MIG-GPU-"):
		return inv.resolveLegacyMIG(out, id)
	case strings.HasPrefix(up, "GPU-") || strings.HasPrefix(up, "MIG-"):
		return inv.resolveUUID(out, id)
	}
	return inv.resolveIndex(out, id)
}

// resolveLegacyMIG resolves MIG-GPU-<parent uuid>/<gi>/<ci>.
func (inv *Inventory) resolveLegacyMIG(out Device, id string) (Device, error) {
	ref := out.Ref
	parts := strings.Split(id[len("MIG-"):], "/")
	if len(parts) != 3 {
		return out, fmt.Errorf("%w: %q (legacy MIG form is MIG-GPU-<uuid>/<gi>/<ci>)", ErrBadDeviceRef, ref)
	}
	gi, err1 := strconv.Atoi(parts[1])
	ci, err2 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil {
		return out, fmt.Errorf("%w: %q (legacy MIG form is MIG-GPU-<uuid>/<gi>/<ci>)", ErrBadDeviceRef, ref)
	}
	for gk := range inv.GPUs {
		g := &inv.GPUs[gk]
		if !strings.EqualFold(g.UUID, parts[0]) {
			continue
		}
		for mk := range g.MIGDevices {
			m := &g.MIGDevices[mk]
			if m.GPUInstanceID == gi && m.ComputeInstanceID == ci {
				out.Kind, out.GPU, out.MIG = KindMIG, g, m
				return out, nil
			}
		}
	}
	return out, fmt.Errorf("%w: %s", ErrDeviceNotFound, ref)
}

// resolveUUID resolves GPU-<uuid> and MIG-<uuid>.
func (inv *Inventory) resolveUUID(out Device, id string) (Device, error) {
	for gk := range inv.GPUs {
		g := &inv.GPUs[gk]
		if strings.EqualFold(g.UUID, id) {
			out.Kind, out.GPU = KindGPU, g
			return out, nil
		}
		for mk := range g.MIGDevices {
			if strings.EqualFold(g.MIGDevices[mk].UUID, id) {
				out.Kind, out.GPU, out.MIG = KindMIG, g, &g.MIGDevices[mk]
				return out, nil
			}
		}
	}
	return out, fmt.Errorf("%w: %s", ErrDeviceNotFound, out.Ref)
}

// resolveIndex resolves a GPU index "N" and a MIG device "N:M".
func (inv *Inventory) resolveIndex(out Device, id string) (Device, error) {
	ref := out.Ref
	gs, ms, isMIG := strings.Cut(id, ":")
	gi, err := strconv.Atoi(gs)
	if err != nil || gi < 0 {
		return out, fmt.Errorf("%w: %q (want GPU-<uuid>, MIG-<uuid>, N or N:M)", ErrBadDeviceRef, ref)
	}
	g, ok := inv.GPUByIndex(gi)
	if !isMIG {
		if !ok {
			return out, fmt.Errorf("%w: GPU index %d", ErrDeviceNotFound, gi)
		}
		out.Kind, out.GPU = KindGPU, g
		return out, nil
	}
	mi, err := strconv.Atoi(ms)
	if err != nil || mi < 0 {
		return out, fmt.Errorf("%w: %q (want GPU-<uuid>, MIG-<uuid>, N or N:M)", ErrBadDeviceRef, ref)
	}
	if !ok {
		return out, fmt.Errorf("%w: GPU index %d", ErrDeviceNotFound, gi)
	}
	for mk := range g.MIGDevices {
		if g.MIGDevices[mk].Index == mi {
			out.Kind, out.GPU, out.MIG = KindMIG, g, &g.MIGDevices[mk]
			return out, nil
		}
	}
	return out, fmt.Errorf("%w: MIG device %d:%d", ErrDeviceNotFound, gi, mi)
}

// AllDevices lists what a rank given "all" would get: every MIG device of a
// MIG-enabled GPU, every GPU otherwise.
func (inv *Inventory) AllDevices() []Device {
	var out []Device
	for gk := range inv.GPUs {
		g := &inv.GPUs[gk]
		if len(g.MIGDevices) > 0 {
			for mk := range g.MIGDevices {
				m := &g.MIGDevices[mk]
				d := Device{Kind: KindMIG, GPU: g, MIG: m}
				d.Ref = d.ID()
				out = append(out, d)
			}
			continue
		}
		d := Device{Kind: KindGPU, GPU: g}
		d.Ref = d.ID()
		out = append(out, d)
	}
	return out
}
