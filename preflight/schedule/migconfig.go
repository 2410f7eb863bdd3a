package schedule

import (
	"strings"

	"github.com/rankgate/rankgate/topology"
)

// target is what a node's nvidia.com/mig.config asks mig-manager for, per
// GPU, when the name is one of mig-parted's default configs.
type target struct {
	known    bool
	disabled bool // all-disabled: full GPUs
	// layout per GPU; a count of 0 means the profile is present but the
	// count is unknown (GPU model not in the catalog).
	layout topology.Layout
}

// targetOf interprets mig-parted default config names: all-disabled,
// all-enabled (MIG on, no instances), all-<profile> and all-balanced.
// Custom names are unknown: rankgate cannot see the config map.
func targetOf(config string, m *topology.GPUModel) target {
	switch {
	case config == "":
		return target{}
	case config == "all-disabled":
		return target{known: true, disabled: true}
	case config == "all-enabled":
		return target{known: true, layout: topology.Layout{}}
	case config == "all-balanced":
		if m == nil {
			return target{}
		}
		return target{known: true, layout: balancedLayout(m)}
	case strings.HasPrefix(config, "all-"):
		p := strings.TrimPrefix(config, "all-")
		// mig-parted spells media-extension configs all-1g.10gb.me.
		p = strings.Replace(p, ".me", "+me", 1)
		if _, _, err := topology.ParseProfileName(p); err != nil {
			return target{}
		}
		n := 0
		if m != nil {
			prof, ok := m.Profile(p)
			if !ok {
				// The config names a profile this GPU does not have:
				// mig-manager will fail; nothing is created.
				return target{known: true, layout: topology.Layout{}}
			}
			n = prof.MaxInstances
		}
		return target{known: true, layout: topology.Layout{p: n}}
	}
	return target{}
}

// balancedLayout is mig-parted's all-balanced for a model: two of the
// smallest 1g profile, one 2g and one 3g, as far as the model has them.
func balancedLayout(m *topology.GPUModel) topology.Layout {
	l := topology.Layout{}
	pick := func(slices, n int) {
		var best *topology.Profile
		for i := range m.Profiles {
			p := &m.Profiles[i]
			if p.Slices == slices && !strings.Contains(p.Name, "+") && (best == nil || p.MemoryMiB < best.MemoryMiB) {
				best = p
			}
		}
		if best != nil {
			l[best.Name] = n
			if !m.Fits(l) {
				delete(l, best.Name)
			}
		}
	}
	pick(1, 2)
	pick(2, 1)
	pick(3, 1)
	return l
}

// offers reports whether the target layout creates resource r, and how many
// per GPU (0: unknown count).
func (t target) offers(r string) (bool, int) {
	if !t.known {
		return false, 0
	}
	if r == ResourceGPU {
		return t.disabled, 1
	}
	p, ok := MIGProfileOf(r)
	if !ok || t.disabled {
		return false, 0
	}
	n, ok := t.layout[p]
	return ok, n
}

// maxLayout is the layout with as many instances of profile p as one GPU
// of model m holds, or false when m has no such profile.
func maxLayout(m *topology.GPUModel, p string) (topology.Layout, bool) {
	prof, ok := m.Profile(p)
	if !ok {
		return nil, false
	}
	for n := prof.MaxInstances; n > 0; n-- {
		l := topology.Layout{prof.Name: n}
		if m.Fits(l) {
			return l, true
		}
	}
	return nil, false
}
