package ncclenv

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// MIGMinVersion is the first NCCL with (experimental) MIG support: shared
// memory between instances of one GPU, the network across GPUs
// (NVIDIA/nccl#1716; NCCL 2.31 user guide, "Using MIG instances").
var MIGMinVersion = version{2, 31, 0}

// ngcBeforeMIG: NGC framework containers are tagged YY.MM and ship the NCCL
// released before that month. The newest NCCL on PyPI up to 2026-06-09
// was 2.30.7 (nvidia-nccl-cu12 release history), so every NGC release up
// to 26.06 ships an NCCL older than 2.31. Later releases are not judged
// from the tag.
var ngcBeforeMIG = [2]int{26, 6}

// ngcFrameworks are the NGC images tagged by release (YY.MM); other images
// of nvcr.io/nvidia (cuda: 12.4.1-...) number differently.
var ngcFrameworks = map[string]bool{"pytorch": true, "tensorflow": true, "jax": true, "nemo": true, "paxml": true}

var ngcTag = regexp.MustCompile(`^(\d{2})\.(\d{2})(?:\.\d+)?(?:-.*)?$`)

type version [3]int

func (v version) less(o version) bool {
	for i := range v {
		if v[i] != o[i] {
			return v[i] < o[i]
		}
	}
	return false
}

func (v version) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// parseVersion reads "2.21.5", "2.21.5-1", "2.31.2+cuda13.3".
func parseVersion(s string) (version, bool) {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(strings.TrimPrefix(s, "v"), "V")
	if i := strings.IndexAny(s, "-+ "); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 4 {
		return version{}, false
	}
	var v version
	for i := 0; i < 3 && i < len(parts); i++ {
		n, err := strconv.Atoi(parts[i])
		if err != nil || n < 0 {
			return version{}, false
		}
		v[i] = n
	}
	return v, v[0] == 2 // NCCL 2 is the only NCCL that reads these settings
}

// ncclVersion is what is known of a rank's NCCL.
type ncclVersion struct {
	// known: the version (or that it is older than MIGMinVersion) is known.
	known bool
	// beforeMIG: it is older than MIGMinVersion.
	beforeMIG bool
	// what says the version and where it comes from.
	what string
}

// versionOf reads the rank's NCCL version: the one it reported, the
// NCCL_VERSION its image sets (NGC and CUDA images do), or an NGC
// framework image's release tag.
func versionOf(r Rank) ncclVersion {
	if v, ok := parseVersion(r.NCCLVersion); ok {
		return ncclVersion{known: true, beforeMIG: v.less(MIGMinVersion), what: "NCCL " + v.String() + " (reported)"}
	}
	if s, set, known := r.Env.String("NCCL_VERSION"); set && known {
		if v, ok := parseVersion(s); ok {
			return ncclVersion{known: true, beforeMIG: v.less(MIGMinVersion), what: "NCCL " + v.String() + " (NCCL_VERSION=" + s + ")"}
		}
	}
	if yy, mm, ok := ngcRelease(r.Image); ok {
		if yy < ngcBeforeMIG[0] || (yy == ngcBeforeMIG[0] && mm <= ngcBeforeMIG[1]) {
			return ncclVersion{known: true, beforeMIG: true, what: fmt.Sprintf("image %s (NGC release %02d.%02d ships an NCCL older than %s)", r.Image, yy, mm, MIGMinVersion)}
		}
	}
	return ncclVersion{}
}

// VersionFromEnv is the NCCL version that e's NCCL_VERSION names (NGC and
// CUDA images set it; NCCL itself ignores it), as "2.x.y"; "" when it is
// unset, unreadable, or not an NCCL 2 version.
func VersionFromEnv(e *Env) string {
	s, set, known := e.String("NCCL_VERSION")
	if !set || !known {
		return ""
	}
	v, ok := parseVersion(s)
	if !ok {
		return ""
	}
	return v.String()
}

// ngcRelease reads YY.MM from nvcr.io/nvidia/<framework>:YY.MM-... .
func ngcRelease(image string) (yy, mm int, ok bool) {
	name, tag, found := strings.Cut(image, ":")
	if !found || strings.Contains(tag, "/") {
		return 0, 0, false
	}
	repo, isNGC := strings.CutPrefix(name, "nvcr.io/nvidia/")
	if !isNGC || !ngcFrameworks[repo] {
		return 0, 0, false
	}
	tag, _, _ = strings.Cut(tag, "@")
	m := ngcTag.FindStringSubmatch(tag)
	if m == nil {
		return 0, 0, false
	}
	yy, _ = strconv.Atoi(m[1])
	mm, _ = strconv.Atoi(m[2])
	return yy, mm, mm >= 1 && mm <= 12
}

// versionHowTo tells how to find a container's NCCL version.
const versionHowTo = "run the image with NCCL_DEBUG=VERSION (NCCL prints \"NCCL version 2.x.y\"), or `python -c 'import torch; print(torch.cuda.nccl.version())'` in it; set NCCL_VERSION to it in the pod template (NCCL ignores the variable; NGC images set it) to let rankgate judge it"
