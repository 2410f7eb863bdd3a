package schedule

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Node labels written by NVIDIA GPU feature discovery (GFD) and the MIG
// manager (domain.md section 4).
const (
	LabelProduct        = "nvidia.com/gpu.product"
	LabelCount          = "nvidia.com/gpu.count"
	LabelMemory         = "nvidia.com/gpu.memory"
	LabelSMs            = "nvidia.com/gpu.multiprocessors"
	LabelMIGStrategy    = "nvidia.com/mig.strategy"
	LabelMIGCapable     = "nvidia.com/mig.capable"
	LabelMIGConfig      = "nvidia.com/mig.config"
	LabelMIGConfigState = "nvidia.com/mig.config.state"
	LabelDriverFull     = "nvidia.com/cuda.driver-version.full"
	labelDeployPrefix   = "nvidia.com/gpu.deploy."
	// PausedForMIGChange is the value mig-manager gives the
	// nvidia.com/gpu.deploy.* labels while it reconfigures a node.
	PausedForMIGChange = "paused-for-mig-change"
	// InvalidSuffix ends the product label under the single strategy when
	// the node's MIG layout cannot be advertised (gpu-operator#479).
	InvalidSuffix = "-MIG-INVALID"
)

// MIG strategies of the device plugin.
const (
	StrategyNone   = "none"
	StrategySingle = "single"
	StrategyMixed  = "mixed"
)

// mig-manager states (nvidia.com/mig.config.state).
const (
	MIGStatePending   = "pending"
	MIGStateRebooting = "rebooting"
	MIGStateSuccess   = "success"
	MIGStateFailed    = "failed"
)

// GPU is what GFD and mig-manager labels say about a node's GPUs.
type GPU struct {
	// Product as labelled: "NVIDIA-H100-80GB-HBM3"; under the single
	// strategy "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb" or "...-MIG-INVALID".
	Product   string
	Count     int
	MemoryMiB uint64
	SMs       int
	Strategy  string
	// MIGCapable from nvidia.com/mig.capable.
	MIGCapable bool
	// MIGConfig is the layout mig-manager is asked to apply (a mig-parted
	// config name such as all-1g.10gb or all-balanced); MIGConfigState is
	// its progress.
	MIGConfig      string
	MIGConfigState string
	// PausedForMIGChange: some nvidia.com/gpu.deploy.* label says
	// paused-for-mig-change (device plugin stopped during a change).
	PausedForMIGChange bool
	Driver             string
	// MIGProfiles from nvidia.com/mig-<profile>.{count,memory,multiprocessors}.
	MIGProfiles map[string]MIGProfileLabels
}

// MIGProfileLabels are GFD's per-profile labels.
type MIGProfileLabels struct {
	Count     int
	MemoryMiB uint64
	SMs       int
}

// BaseProduct is the product without a single-strategy "-MIG-..." suffix.
func (g GPU) BaseProduct() string {
	if i := strings.Index(g.Product, "-MIG-"); i >= 0 {
		return g.Product[:i]
	}
	return g.Product
}

// SingleProfile is the MIG profile a single-strategy node advertises as
// nvidia.com/gpu ("1g.10gb"), or "" when it advertises full GPUs.
func (g GPU) SingleProfile() string {
	if g.Strategy != StrategySingle || g.Invalid() {
		return ""
	}
	if i := strings.Index(g.Product, "-MIG-"); i >= 0 {
		return g.Product[i+len("-MIG-"):]
	}
	return ""
}

// Invalid: GFD labelled the product MIG-INVALID.
func (g GPU) Invalid() bool { return strings.HasSuffix(g.Product, InvalidSuffix) }

// ParseGPULabels reads GFD and mig-manager labels. A label that should be a
// number and is not is an error naming it.
func ParseGPULabels(labels map[string]string) (GPU, error) {
	var g GPU
	var errs []string
	atoi := func(key string) int {
		v, ok := labels[key]
		if !ok || v == "" {
			return 0
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Sprintf("label %s=%q is not a non-negative integer", key, v))
			return 0
		}
		return n
	}
	g.Product = labels[LabelProduct]
	g.Count = atoi(LabelCount)
	g.MemoryMiB = uint64(atoi(LabelMemory))
	g.SMs = atoi(LabelSMs)
	g.Strategy = labels[LabelMIGStrategy]
	g.MIGCapable = labels[LabelMIGCapable] == "true"
	g.MIGConfig = labels[LabelMIGConfig]
	g.MIGConfigState = labels[LabelMIGConfigState]
	g.Driver = labels[LabelDriverFull]
	if g.Driver == "" {
		// Older GFD: nvidia.com/cuda.driver.{major,minor,rev}.
		maj, min, rev := labels["nvidia.com/cuda.driver.major"], labels["nvidia.com/cuda.driver.minor"], labels["nvidia.com/cuda.driver.rev"]
		if maj != "" && min != "" {
			g.Driver = maj + "." + min
			if rev != "" {
				g.Driver += "." + rev
			}
		}
	}
	for k, v := range labels {
		if strings.HasPrefix(k, labelDeployPrefix) && v == PausedForMIGChange {
			g.PausedForMIGChange = true
		}
		if !strings.HasPrefix(k, MIGPrefix) {
			continue
		}
		rest := strings.TrimPrefix(k, MIGPrefix)
		var prof, field string
		for _, f := range []string{".count", ".memory", ".multiprocessors"} {
			if strings.HasSuffix(rest, f) {
				prof, field = strings.TrimSuffix(rest, f), f
				break
			}
		}
		if prof == "" || strings.ContainsAny(prof, "/=") {
			continue
		}
		if g.MIGProfiles == nil {
			g.MIGProfiles = map[string]MIGProfileLabels{}
		}
		p := g.MIGProfiles[prof]
		n := atoi(k)
		switch field {
		case ".count":
			p.Count = n
		case ".memory":
			p.MemoryMiB = uint64(n)
		case ".multiprocessors":
			p.SMs = n
		}
		g.MIGProfiles[prof] = p
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return g, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return g, nil
}
