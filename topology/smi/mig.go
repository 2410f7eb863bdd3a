package smi

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/rankgate/rankgate/topology"
)

// The `nvidia-smi mig` listings are boxed tables: a title ("GPU instances:"),
// column headers, a "|====|" rule, then one row per entry, some with a
// second continuation row:
//
//	-lgi:  |   0  MIG 1g.6gb          14        3          0:1     |
//	-lci:  |   0      7       MIG 1g.10gb          0         0          0:1     |
//	-lgip: |   0  MIG 1g.6gb        14     0/4        5.81       No     14     1     0   |
//	       |                                                             1     0     0   |
//
// Older drivers print -lgi and -lci without the Placement column. -lgipp
// prints placement lines ("GPU  0 Profile ID 14 Placements: {0,1,2,3}:1");
// they are read with -lgip and checked, but the model has no place for
// possible placements.
//
// What is kept: -lgi gives GPU instance IDs, profiles and placements; -lci
// gives compute instances (one MIG device each) with their profile names,
// "1c.3g.40gb" when the compute instance is a part of its GPU instance; the
// -lci placement is inside the GPU instance and is not kept. -lgip gives
// each profile's P2P support and SM count, kept on the devices of that
// profile. All three exist only with MIG enabled, which they imply.

// boxRows calls fn with the fields of each data row of the boxed tables in
// the section: rows after a "|===|" rule, without the bars. Other lines must
// be box lines, titles, blank, or what allow accepts.
func boxRows(s section, allow func(i int, t string) (bool, error), fn func(i int, f []string) error) error {
	inData := false
	for k, l := range s.body() {
		i := s.first + k
		t := strings.TrimSpace(l)
		switch {
		case isBlank(l):
		case strings.HasPrefix(t, "+"):
		case strings.HasPrefix(t, "|="):
			inData = true
		case strings.HasPrefix(t, "|"):
			inner := strings.Trim(t, "|")
			if strings.HasSuffix(strings.TrimSpace(inner), ":") {
				inData = false // a title: the next box starts
				continue
			}
			if !inData {
				continue // column headers
			}
			if err := fn(i, strings.Fields(inner)); err != nil {
				return err
			}
		default:
			if allow != nil {
				ok, err := allow(i, t)
				if err != nil {
					return err
				}
				if ok {
					continue
				}
			}
			if msg, ok := smiFailure(t); ok {
				return s.errAt(i, msg)
			}
			return s.errAt(i, fmt.Sprintf("%q is not part of an `nvidia-smi mig` table", clip(t)))
		}
	}
	return nil
}

// noInstances accepts the lines nvidia-smi prints for an empty listing.
func noInstances(_ int, t string) (bool, error) {
	return strings.HasPrefix(t, "No GPU instances found") || strings.HasPrefix(t, "No compute instances found"), nil
}

// migGPU returns the report's fact for GPU i, creating it.
func migGPU(s section, r *report, i, line int) *gpuFact {
	for _, g := range r.gpus {
		if g.index == i {
			return g
		}
	}
	g := r.addGPU(newGPUFact(line, i))
	g.migOn = true
	return g
}

// migName reads "MIG" and a profile name from f.
func migName(s section, i int, f []string) (string, error) {
	if len(f) < 2 || f[0] != "MIG" {
		return "", s.errAt(i, "want \"MIG <profile>\" in this column")
	}
	if _, _, err := parseProfile(f[1]); err != nil {
		return "", s.errAt(i, err.Error())
	}
	return strings.ToLower(f[1]), nil
}

func parsePlacement(v string) (*topology.Placement, error) {
	a, b, ok := strings.Cut(v, ":")
	st, err1 := parseIndex(a, 64)
	sz, err2 := parseIndex(b, 65)
	if !ok || err1 != nil || err2 != nil || sz == 0 {
		return nil, fmt.Errorf("%q is not a placement Start:Size", clip(v))
	}
	return &topology.Placement{Start: st, Size: sz}, nil
}

func parseLGI(s section, r *report) error {
	seen := map[[2]int]bool{}
	return boxRows(s, noInstances, func(i int, f []string) error {
		if len(f) != 5 && len(f) != 6 {
			return s.errAt(i, "a `mig -lgi` row is: GPU, MIG <profile>, profile ID, instance ID, placement")
		}
		gpu, err := parseIndex(f[0], maxGPUs)
		if err != nil {
			return s.errAt(i, "GPU index: "+err.Error())
		}
		name, err := migName(s, i, f[1:3])
		if err != nil {
			return err
		}
		if _, err := parseIndex(f[3], maxInstanceID); err != nil {
			return s.errAt(i, "profile ID: "+err.Error())
		}
		gi, err := parseIndex(f[4], maxInstanceID)
		if err != nil {
			return s.errAt(i, "GPU instance ID: "+err.Error())
		}
		if seen[[2]int{gpu, gi}] {
			return s.errAt(i, fmt.Sprintf("GPU %d instance %d is listed twice", gpu, gi))
		}
		seen[[2]int{gpu, gi}] = true
		m := newMIGFact(i)
		m.kind, m.gi, m.profile = migGIWhole, gi, name
		if len(f) == 6 {
			if m.placement, err = parsePlacement(f[5]); err != nil {
				return s.errAt(i, err.Error())
			}
		}
		g := migGPU(s, r, gpu, i)
		if len(g.migs) >= maxMIGDevices {
			return s.errAt(i, "too many GPU instances")
		}
		g.migs = append(g.migs, m)
		return nil
	})
}

func parseLCI(s section, r *report) error {
	seen := map[[3]int]bool{}
	return boxRows(s, noInstances, func(i int, f []string) error {
		if len(f) != 6 && len(f) != 7 {
			return s.errAt(i, "a `mig -lci` row is: GPU, GPU instance ID, MIG <profile>, profile ID, instance ID, placement")
		}
		gpu, err := parseIndex(f[0], maxGPUs)
		if err != nil {
			return s.errAt(i, "GPU index: "+err.Error())
		}
		gi, err := parseIndex(f[1], maxInstanceID)
		if err != nil {
			return s.errAt(i, "GPU instance ID: "+err.Error())
		}
		name, err := migName(s, i, f[2:4])
		if err != nil {
			return err
		}
		if _, err := parseIndex(f[4], maxInstanceID); err != nil {
			return s.errAt(i, "profile ID: "+err.Error())
		}
		ci, err := parseIndex(f[5], maxInstanceID)
		if err != nil {
			return s.errAt(i, "compute instance ID: "+err.Error())
		}
		if len(f) == 7 {
			if _, err := parsePlacement(f[6]); err != nil {
				return s.errAt(i, err.Error())
			}
		}
		if seen[[3]int{gpu, gi, ci}] {
			return s.errAt(i, fmt.Sprintf("GPU %d instance %d compute instance %d is listed twice", gpu, gi, ci))
		}
		seen[[3]int{gpu, gi, ci}] = true
		m := newMIGFact(i)
		m.kind, m.gi, m.ci, m.profile = migCI, gi, ci, name
		g := migGPU(s, r, gpu, i)
		if len(g.migs) >= maxMIGDevices {
			return s.errAt(i, "too many compute instances")
		}
		g.migs = append(g.migs, m)
		return nil
	})
}

// isPlacementLine recognises a `mig -lgipp` line.
func isPlacementLine(t string) bool {
	f := strings.Fields(t)
	return len(f) >= 6 && f[0] == "GPU" && f[2] == "Profile" && f[3] == "ID" && strings.HasPrefix(f[5], "Placement")
}

// checkPlacementLine validates "GPU  0 Profile ID 14 Placements: {0,1,2,3}:1".
func checkPlacementLine(t string) error {
	f := strings.Fields(t)
	bad := fmt.Errorf("malformed `mig -lgipp` line (want \"GPU N Profile ID P Placements: {0,1}:1\")")
	if !isPlacementLine(t) {
		return bad
	}
	if _, err := parseIndex(f[1], maxGPUs); err != nil {
		return bad
	}
	if _, err := parseIndex(f[4], maxInstanceID); err != nil {
		return bad
	}
	_, v, ok := strings.Cut(t, ":")
	v = strings.TrimSpace(v)
	set, size, ok2 := strings.Cut(v, "}:")
	if !ok || !ok2 || !strings.HasPrefix(set, "{") {
		return bad
	}
	for _, p := range strings.Split(strings.TrimPrefix(set, "{"), ",") {
		if _, err := parseIndex(p, 64); err != nil {
			return bad
		}
	}
	if _, err := parseIndex(size, 65); err != nil {
		return bad
	}
	return nil
}

func parseLGIP(s section, r *report) error {
	// -lgipp lines: checked, and they say which GPUs have MIG on.
	placements := func(i int, t string) (bool, error) {
		if !isPlacementLine(t) {
			return false, nil
		}
		if err := checkPlacementLine(t); err != nil {
			return false, s.errAt(i, err.Error())
		}
		gpu, _ := parseIndex(strings.Fields(t)[1], maxGPUs)
		migGPU(s, r, gpu, i)
		return true, nil
	}
	return boxRows(s, placements, func(i int, f []string) error {
		if len(f) == 3 {
			for _, v := range f {
				if _, err := strconv.Atoi(v); err != nil {
					return s.errAt(i, "a `mig -lgip` continuation row holds CE, JPEG and OFA counts")
				}
			}
			return nil
		}
		if len(f) != 10 {
			return s.errAt(i, "a `mig -lgip` row is: GPU, MIG <profile>, ID, free/total, memory, P2P, SM, DEC, ENC")
		}
		gpu, err := parseIndex(f[0], maxGPUs)
		if err != nil {
			return s.errAt(i, "GPU index: "+err.Error())
		}
		name, err := migName(s, i, f[1:3])
		if err != nil {
			return err
		}
		if _, err := parseIndex(f[3], maxInstanceID); err != nil {
			return s.errAt(i, "profile ID: "+err.Error())
		}
		free, total, ok := strings.Cut(f[4], "/")
		nf, err1 := parseIndex(free, maxMIGDevices)
		nt, err2 := parseIndex(total, maxMIGDevices)
		if !ok || err1 != nil || err2 != nil || nf > nt {
			return s.errAt(i, fmt.Sprintf("%q is not instances free/total", clip(f[4])))
		}
		gib, err := strconv.ParseFloat(f[5], 64)
		if err != nil || gib < 0 || gib > 1<<20 {
			return s.errAt(i, fmt.Sprintf("%q is not a memory size in GiB", clip(f[5])))
		}
		var p2p bool
		switch f[6] {
		case "Yes":
			p2p = true
		case "No":
		default:
			return s.errAt(i, fmt.Sprintf("P2P is %q, want Yes or No", clip(f[6])))
		}
		sms, err := parseIndex(f[7], 1024)
		if err != nil {
			return s.errAt(i, "SM count: "+err.Error())
		}
		g := migGPU(s, r, gpu, i)
		for _, p := range g.profiles {
			if p.name == name {
				return s.errAt(i, fmt.Sprintf("GPU %d profile %s is listed twice", gpu, name))
			}
		}
		if len(g.profiles) >= maxMIGDevices {
			return s.errAt(i, "too many profiles")
		}
		g.profiles = append(g.profiles, profileFact{name: name, sms: sms, p2p: p2p, memMiB: uint64(math.Round(gib * 1024)), maxInstances: nt})
		return nil
	})
}
