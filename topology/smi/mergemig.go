package smi

import (
	"fmt"
	"sort"
	"strings"

	"github.com/rankgate/rankgate/topology"
)

// buildMIG merges what the outputs say about one GPU's MIG devices. Outputs
// that number devices (-L, table, -q) are merged by index; `mig -lci` rows
// by GPU/compute instance ID; `mig -lgi` rows by GPU instance ID. When no
// output numbers the devices, they are numbered in ascending GPU instance
// then compute instance ID, the order nvidia-smi lists them in.
func (b *builder) buildMIG(gs *gpuState) error {
	cis, gis, err := gs.mergeNumbered()
	if err != nil {
		return err
	}
	seen, err := gs.instances()
	if err != nil {
		return err
	}
	if err := gs.mergeCIs(cis, seen); err != nil {
		return err
	}
	if err := gs.mergeGIs(gis); err != nil {
		return err
	}
	gs.inferProfiles(modelFor(b.cat, gs.g.Name, gs.g.MemoryMiB))
	sort.SliceStable(gs.devs, func(i, j int) bool { return gs.devs[i].d.Index < gs.devs[j].d.Index })
	return nil
}

// devName names a MIG device in conflict messages.
func (gs *gpuState) devName(d *devState) string {
	return fmt.Sprintf("MIG device %d:%d", gs.g.Index, d.d.Index)
}

func (gs *gpuState) devByIndex(i int) *devState {
	for _, d := range gs.devs {
		if d.d.Index == i {
			return d
		}
	}
	return nil
}

// newDev adds MIG device i, first seen at a.
func (gs *gpuState) newDev(i int, a at) *devState {
	d := &devState{d: topology.MIGDevice{Index: i, GPUInstanceID: -1, ComputeInstanceID: -1}, from: map[string]at{"index": a}}
	gs.devs = append(gs.devs, d)
	return d
}

// mergeNumbered merges the facts of outputs that number MIG devices and
// returns the others: `mig -lci` and `mig -lgi` rows.
func (gs *gpuState) mergeNumbered() (cis, gis []fileMIG, err error) {
	for _, f := range gs.migs {
		switch f.kind {
		case migCI:
			cis = append(cis, f)
			continue
		case migGIWhole:
			gis = append(gis, f)
			continue
		}
		d := gs.devByIndex(f.index)
		if f.uuid != "" {
			for _, o := range gs.devs {
				if o != d && strings.EqualFold(o.d.UUID, f.uuid) {
					return nil, nil, conflict("MIG "+f.uuid, "device index", o.d.Index, o.from["index"], f.index, f.at())
				}
			}
		}
		if d == nil {
			d = gs.newDev(f.index, f.at())
		}
		if err := mergeDev(gs.devName(d), d, f); err != nil {
			return nil, nil, err
		}
	}
	return cis, gis, nil
}

// instances maps GPU/compute instance IDs to the devices that carry them;
// two devices with the same IDs are a conflict.
func (gs *gpuState) instances() (map[[2]int]*devState, error) {
	seen := map[[2]int]*devState{}
	for _, d := range gs.devs {
		if d.d.GPUInstanceID < 0 || d.d.ComputeInstanceID < 0 {
			continue
		}
		k := [2]int{d.d.GPUInstanceID, d.d.ComputeInstanceID}
		if o := seen[k]; o != nil {
			return nil, conflict(gs.devName(d), "GPU/compute instance", fmt.Sprintf("%d/%d (also device %d)", k[0], k[1], o.d.Index), o.from["gi"], fmt.Sprintf("%d/%d", k[0], k[1]), d.from["gi"])
		}
		seen[k] = d
	}
	return seen, nil
}

// mergeCIs merges compute instances from mig -lci: by GPU/compute instance
// ID, else in order onto the devices without instance IDs, else as new
// devices when no output numbers any.
func (gs *gpuState) mergeCIs(cis []fileMIG, seen map[[2]int]*devState) error {
	var left []fileMIG
	for _, f := range cis {
		if d := seen[[2]int{f.gi, f.ci}]; d != nil {
			if err := mergeDev(gs.devName(d), d, f); err != nil {
				return err
			}
			continue
		}
		left = append(left, f)
	}
	if len(left) == 0 {
		return nil
	}
	sortByInstance(left)
	unnumbered := devsWithoutGI(gs.devs)
	switch {
	case len(gs.devs) == 0:
		for i, f := range left {
			d := gs.newDev(i, f.at())
			if err := mergeDev(gs.devName(d), d, f); err != nil {
				return err
			}
		}
	case len(unnumbered) == len(left):
		for i, f := range left {
			if err := mergeDev(gs.devName(unnumbered[i]), unnumbered[i], f); err != nil {
				return err
			}
		}
	default:
		f := left[0]
		return &topology.InputError{File: f.file, Line: f.line, Msg: fmt.Sprintf(
			"GPU %d: compute instance %d of GPU instance %d is no MIG device in the other outputs (they list %d devices)",
			gs.g.Index, f.ci, f.gi, len(gs.devs))}
	}
	return nil
}

// mergeGIs merges GPU instances from mig -lgi: placements, and the profile
// of a device that is the only one in its GPU instance.
func (gs *gpuState) mergeGIs(gis []fileMIG) error {
	var left []fileMIG
	for _, f := range gis {
		var in []*devState
		for _, d := range gs.devs {
			if d.d.GPUInstanceID == f.gi {
				in = append(in, d)
			}
		}
		if len(in) == 0 {
			left = append(left, f)
			continue
		}
		for _, d := range in {
			if err := mergeGI(gs.devName(d), d, f, len(in) == 1); err != nil {
				return err
			}
		}
	}
	if len(left) == 0 {
		return nil
	}
	sortByInstance(left)
	unnumbered := devsWithoutGI(gs.devs)
	switch {
	case len(gs.devs) == 0:
		// Only -lgi: each GPU instance is taken as one MIG device with a
		// compute instance spanning it (what `-cgi ... -C` creates); its
		// compute instance ID stays unknown.
		for i, f := range left {
			d := gs.newDev(i, f.at())
			d.d.GPUInstanceID = f.gi
			d.from["gi"] = f.at()
			if err := mergeGI(gs.devName(d), d, f, true); err != nil {
				return err
			}
		}
	case len(unnumbered) == len(left):
		for i, f := range left {
			d := unnumbered[i]
			if p := d.d.Profile; p != "" && topology.GIProfileName(p) != f.profile {
				return conflict(gs.devName(d), "GPU instance profile", p, d.from["profile"], f.profile, f.at())
			}
			d.d.GPUInstanceID = f.gi
			d.from["gi"] = f.at()
			if err := mergeGI(gs.devName(d), d, f, true); err != nil {
				return err
			}
		}
	}
	// Otherwise the left GPU instances hold no compute instance (no MIG
	// device) or cannot be told apart; nothing is guessed.
	return nil
}

// inferProfiles names devices whose outputs gave no profile from the GPU
// model, SMs and memory, and applies `mig -lgip` rows (P2P support, SMs).
//
// A pasted `mig -lgip` is the GPU's own table: its profiles (name, SMs,
// memory, instance count) are kept on the GPU and name devices before the
// catalog does, so that a GPU the catalog lacks is read too.
func (gs *gpuState) inferProfiles(model *topology.GPUModel) {
	gs.g.MIGProfiles = learnedProfiles(gs.profiles)
	// "+me" and "+gfx" variants share the memory and SMs of their base
	// profile: they would make every inference ambiguous.
	learned := &topology.GPUModel{}
	for _, p := range gs.g.MIGProfiles {
		if !strings.Contains(p.Name, "+") {
			learned.Profiles = append(learned.Profiles, p)
		}
	}
	for _, d := range gs.devs {
		if d.d.Profile == "" && len(learned.Profiles) > 0 {
			if p, ok := learned.InferProfile(d.d.SMs, d.d.MemoryMiB); ok {
				d.d.Profile = p
			}
		}
		if d.d.Profile == "" && model != nil {
			if p, ok := model.InferProfile(d.d.SMs, d.d.MemoryMiB); ok {
				d.d.Profile = p
			}
		}
		for _, p := range gs.profiles {
			if p.name != topology.GIProfileName(d.d.Profile) {
				continue
			}
			v := p.p2p
			d.d.P2PSupported = &v
			if d.d.SMs == 0 && d.d.Profile == p.name {
				d.d.SMs = p.sms
			}
		}
		// No output said the SM count (-L, the table): the catalog's for
		// the profile, unless the device is a compute instance that holds
		// only part of its GPU instance ("1c.3g.40gb").
		if d.d.SMs == 0 && model != nil && d.d.Profile != "" && d.d.Profile == topology.GIProfileName(d.d.Profile) {
			if p, ok := model.Profile(d.d.Profile); ok {
				d.d.SMs = p.SMs
			}
		}
	}
}

func sortByInstance(fs []fileMIG) {
	sort.SliceStable(fs, func(i, j int) bool {
		if fs[i].gi != fs[j].gi {
			return fs[i].gi < fs[j].gi
		}
		return fs[i].ci < fs[j].ci
	})
}

func devsWithoutGI(devs []*devState) []*devState {
	var out []*devState
	for _, d := range devs {
		if d.d.GPUInstanceID < 0 {
			out = append(out, d)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].d.Index < out[j].d.Index })
	return out
}

func mergeDev(obj string, d *devState, f fileMIG) error {
	a := f.at()
	m := &d.d
	for _, err := range []error{
		merge(obj, "UUID", &m.UUID, d.from, f.uuid, "", a, strings.EqualFold),
		merge(obj, "GPU instance ID", &m.GPUInstanceID, d.from, f.gi, -1, a, nil),
		merge(obj, "compute instance ID", &m.ComputeInstanceID, d.from, f.ci, -1, a, nil),
		merge(obj, "profile", &m.Profile, d.from, f.profile, "", a, nil),
		merge(obj, "SM count", &m.SMs, d.from, f.sms, 0, a, nil),
		merge(obj, "memory (MiB)", &m.MemoryMiB, d.from, f.memMiB, 0, a, nil),
		mergePlacement(obj, d, f.placement, a),
	} {
		if err != nil {
			return err
		}
	}
	if _, ok := d.from["gi"]; !ok && f.gi >= 0 {
		d.from["gi"] = a
	}
	return nil
}

// mergeGI applies a `mig -lgi` row to a device of that GPU instance. The
// GPU instance profile names the device only when the device is alone in
// its GPU instance.
func mergeGI(obj string, d *devState, f fileMIG, alone bool) error {
	a := f.at()
	if err := mergePlacement(obj, d, f.placement, a); err != nil {
		return err
	}
	switch {
	case d.d.Profile == "" && alone:
		d.d.Profile = f.profile
		d.from["profile"] = a
	case d.d.Profile != "" && topology.GIProfileName(d.d.Profile) != f.profile:
		return conflict(obj, "GPU instance profile", d.d.Profile, d.from["profile"], f.profile, a)
	}
	return nil
}

func mergePlacement(obj string, d *devState, p *topology.Placement, a at) error {
	return mergePtr(obj, "placement", &d.d.Placement, d.from, p, a)
}

// learnedProfiles turns `mig -lgip` rows into profiles, one per name (the
// first output wins), in the order nvidia-smi listed them.
func learnedProfiles(fs []profileFact) []topology.Profile {
	var out []topology.Profile
	seen := map[string]bool{}
	for _, f := range fs {
		if seen[f.name] {
			continue
		}
		seen[f.name] = true
		slices, _, err := topology.ParseProfileName(f.name)
		if err != nil {
			continue
		}
		out = append(out, topology.Profile{Name: f.name, Slices: slices, SMs: f.sms, MemoryMiB: f.memMiB, MaxInstances: f.maxInstances})
	}
	return out
}
