package smi

import (
	"strconv"
	"strings"
)

// `nvidia-smi -L` prints one line per GPU and, under a MIG-enabled GPU, one
// indented line per MIG device, numbered as the N:M device notation and
// CUDA_VISIBLE_DEVICES index them:
//
//	GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-7fdaf0a5-...)
//	  MIG 1g.10gb     Device  0: (UUID: MIG-feb88891-...)
//
// Drivers before R470 print legacy MIG UUIDs, MIG-GPU-<parent>/<gi>/<ci>,
// which carry the GPU and compute instance IDs; newer ones do not.

// isListLine reports whether a line is a `nvidia-smi -L` GPU line.
func isListLine(t string) bool {
	rest, ok := strings.CutPrefix(t, "GPU ")
	if !ok {
		return false
	}
	num, tail, ok := strings.Cut(rest, ":")
	if !ok || (tail != "" && tail[0] != ' ') {
		return false
	}
	_, err := strconv.Atoi(num)
	return err == nil
}

func parseList(s section, r *report) error {
	var cur *gpuFact
	for k, l := range s.body() {
		i := s.first + k
		t := strings.TrimSpace(l)
		switch {
		case isBlank(l):
		case strings.HasPrefix(t, "GPU "):
			g, err := parseListGPU(s, i, t)
			if err != nil {
				return err
			}
			cur = r.addGPU(g)
		case strings.HasPrefix(t, "MIG "):
			if cur == nil {
				return s.errAt(i, "MIG device line before any GPU line")
			}
			m, err := parseListMIG(s, i, t, cur.uuid)
			if err != nil {
				return err
			}
			cur.migs = append(cur.migs, m)
		default:
			if msg, ok := smiFailure(t); ok {
				return s.errAt(i, msg)
			}
			return s.errAt(i, "not a line of `nvidia-smi -L` (want \"GPU N: <name> (UUID: GPU-...)\" or \"MIG <profile> Device N: (UUID: MIG-...)\")")
		}
	}
	return nil
}

// parseListGPU reads "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)".
func parseListGPU(s section, i int, t string) (*gpuFact, error) {
	bad := func() (*gpuFact, error) {
		return nil, s.errAt(i, "malformed GPU line (want \"GPU N: <name> (UUID: GPU-...)\")")
	}
	rest := strings.TrimPrefix(t, "GPU ")
	num, desc, ok := strings.Cut(rest, ":")
	if !ok {
		return bad()
	}
	idx, err := parseIndex(num, maxGPUs)
	if err != nil {
		return nil, s.errAt(i, "GPU index: "+err.Error())
	}
	g := newGPUFact(i, idx)
	desc = strings.TrimSpace(desc)
	if j := strings.LastIndex(desc, "(UUID:"); j >= 0 {
		u, ok := strings.CutSuffix(strings.TrimSpace(desc[j+len("(UUID:"):]), ")")
		if !ok {
			return bad()
		}
		g.uuid, err = parseUUID(u, "GPU-")
		if err != nil {
			return nil, s.errAt(i, err.Error())
		}
		desc = strings.TrimSpace(desc[:j])
	}
	if desc == "" {
		return bad()
	}
	g.name = desc
	return g, nil
}

// parseListMIG reads "MIG 3g.40gb Device 0: (UUID: MIG-...)", legacy UUIDs
// included.
func parseListMIG(s section, i int, t, parent string) (migFact, error) {
	m := newMIGFact(i)
	f := strings.Fields(t)
	if len(f) < 5 || f[0] != "MIG" || f[2] != "Device" || !strings.HasSuffix(f[3], ":") {
		return m, s.errAt(i, "malformed MIG device line (want \"MIG <profile> Device N: (UUID: MIG-...)\")")
	}
	if _, _, err := parseProfile(f[1]); err != nil {
		return m, s.errAt(i, err.Error())
	}
	m.profile = strings.ToLower(f[1])
	idx, err := parseIndex(strings.TrimSuffix(f[3], ":"), maxMIGDevices)
	if err != nil {
		return m, s.errAt(i, "MIG device index: "+err.Error())
	}
	m.index = idx
	rest := strings.Join(f[4:], " ")
	u, ok := strings.CutPrefix(rest, "(UUID:")
	if !ok || !strings.HasSuffix(u, ")") {
		return m, s.errAt(i, "malformed MIG device line: no (UUID: ...)")
	}
	u = strings.TrimSpace(strings.TrimSuffix(u, ")"))
	if strings.HasPrefix(strings.ToUpper(u), "MIG-GPU-") {
		// Legacy form MIG-GPU-<parent uuid>/<gi>/<ci>.
		parts := strings.Split(u[len("MIG-"):], "/")
		if len(parts) != 3 {
			return m, s.errAt(i, "legacy MIG UUID is MIG-GPU-<uuid>/<gi>/<ci>")
		}
		gi, err1 := parseIndex(parts[1], maxInstanceID)
		ci, err2 := parseIndex(parts[2], maxInstanceID)
		pu, err3 := parseUUID(parts[0], "GPU-")
		if err1 != nil || err2 != nil || err3 != nil {
			return m, s.errAt(i, "legacy MIG UUID is MIG-GPU-<uuid>/<gi>/<ci>")
		}
		if parent != "" && pu != "" && !strings.EqualFold(pu, parent) {
			return m, s.errAt(i, "legacy MIG UUID names GPU "+pu+", not its parent "+parent)
		}
		m.gi, m.ci = gi, ci
		if pu != "" {
			m.uuid = u
		}
		return m, nil
	}
	m.uuid, err = parseUUID(u, "MIG-")
	if err != nil {
		return m, s.errAt(i, err.Error())
	}
	return m, nil
}
