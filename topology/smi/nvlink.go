package smi

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rankgate/rankgate/topology"
)

// `nvidia-smi nvlink -s` (--status) prints each GPU's -L line, then one
// indented line per NVLink with its speed, or <inactive> for a link that
// is down or not wired:
//
//	GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)
//	         Link 0: 26.562 GB/s
//	         Link 1: <inactive>
//
// Links read N/A or Not Supported where the driver cannot say; they are
// left out. An elision line ("...", "....", "[...]") that people put in
// place of GPUs or links they cut is skipped and recorded as a gap.

// isNVLinkLine reports whether t is a link line of nvlink -s, or the
// line newer drivers print instead of the links of a GPU without active
// NVLinks ("NVML: Unable to retrieve NVLink information as all links are
// inActive").
func isNVLinkLine(t string) bool {
	_, _, ok := splitNVLinkLine(t)
	return ok || noNVLinkLine(t)
}

func noNVLinkLine(t string) bool {
	return strings.Contains(t, "Unable to retrieve NVLink information")
}

// splitNVLinkLine splits "Link 3: 25.781 GB/s" into the link number and
// its value.
func splitNVLinkLine(t string) (int, string, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(t), "Link ")
	if !ok {
		return 0, "", false
	}
	num, val, ok := strings.Cut(rest, ":")
	if !ok {
		return 0, "", false
	}
	n, err := strconv.Atoi(strings.TrimSpace(num))
	if err != nil || n < 0 || n >= maxNVLinks {
		return 0, "", false
	}
	return n, strings.TrimSpace(val), true
}

// maxNVLinks bounds the link number: 18 on Hopper and Blackwell GPUs.
const maxNVLinks = 64

// isElision reports whether a line stands for lines that were cut from a
// paste: "...", "....", "[...]", "(...)", "[... 6 more GPUs ...]".
func isElision(t string) bool {
	t = strings.TrimSpace(t)
	if strings.HasPrefix(t, "[") && strings.HasSuffix(t, "]") || strings.HasPrefix(t, "(") && strings.HasSuffix(t, ")") {
		t = strings.TrimSpace(t[1 : len(t)-1])
		return strings.HasPrefix(t, "...") || strings.HasPrefix(t, "…") || strings.HasSuffix(t, "...")
	}
	return len(t) >= 3 && strings.Trim(t, ".") == "" || t == "…"
}

// nvlinkStatusAt reports whether the GPU line at i starts an nvlink -s
// output: its next line that is not blank is a link line.
func nvlinkStatusAt(lines []string, i, end int) bool {
	for j := i + 1; j < end && j < i+4; j++ {
		if isBlank(lines[j]) {
			continue
		}
		return isNVLinkLine(lines[j])
	}
	return false
}

func parseNVLinkStatus(s section, r *report) error {
	var cur *gpuFact
	seen := map[int]bool{}
	for k, l := range s.body() {
		i := s.first + k
		t := strings.TrimSpace(l)
		switch {
		case isBlank(l):
		case noNVLinkLine(t):
			// A GPU without active links: no link to judge.
		case isElision(t):
			r.gaps = append(r.gaps, fmt.Sprintf("%s:%d: an elision (%q) in the `nvidia-smi nvlink -s` output: the GPUs and links it stands for are not judged", r.file, lineNo(i), clip(t)))
		case isListLine(t):
			g, err := parseListGPU(s, i, t)
			if err != nil {
				return err
			}
			cur, seen = r.addGPU(g), map[int]bool{}
		case strings.HasPrefix(t, "Link "):
			if cur == nil {
				return s.errAt(i, "an NVLink line before any GPU line")
			}
			n, val, ok := splitNVLinkLine(t)
			if !ok {
				return s.errAt(i, "malformed NVLink line (want \"Link N: <speed> GB/s\" or \"Link N: <inactive>\")")
			}
			if seen[n] {
				return s.errAt(i, fmt.Sprintf("GPU %d: link %d is listed twice", cur.index, n))
			}
			seen[n] = true
			active, known, err := nvlinkActive(val)
			if err != nil {
				return s.errAt(i, fmt.Sprintf("GPU %d link %d: %v", cur.index, n, err))
			}
			if known {
				cur.nvlinks = append(cur.nvlinks, topology.NVLink{Link: n, Active: active})
			}
		default:
			if msg, ok := smiFailure(t); ok {
				return s.errAt(i, msg)
			}
			return s.errAt(i, "not a line of `nvidia-smi nvlink -s` (want \"GPU N: <name> (UUID: GPU-...)\" or \"Link N: <speed> GB/s\")")
		}
	}
	if len(r.gpus) == 0 {
		return s.errAt(s.first, "the nvidia-smi nvlink -s output lists no GPU")
	}
	return nil
}

// nvlinkActive reads a link's value: a speed ("26.562 GB/s") is an active
// link, "<inactive>" (or a speed of 0) one that is down; N/A and the like
// are unknown.
func nvlinkActive(val string) (active, known bool, err error) {
	v := strings.TrimSpace(val)
	if strings.EqualFold(strings.Trim(v, "<>"), "inactive") {
		return false, true, nil
	}
	if notAvailable(v) {
		return false, false, nil
	}
	f := strings.Fields(v)
	if len(f) == 2 && strings.HasSuffix(f[1], "B/s") {
		n, err := strconv.ParseFloat(f[0], 64)
		if err == nil && n >= 0 && n < 1e6 {
			return n > 0, true, nil
		}
	}
	return false, false, fmt.Errorf("%q is not a link speed (\"26.562 GB/s\") or <inactive>", clip(v))
}
