//go:build linux && cgo

package nvmlsource

import (
	"math"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// profileName names a MIG device the way nvidia-smi, GPU feature discovery
// and the device plugin's nvidia.com/mig-<profile> resources do:
// "<g>g.<gb>gb" plus a suffix for media-engine variants, with a "<c>c."
// prefix when the compute instance is smaller than its GPU instance.
// giProfileID is -1 when unknown (no suffix then).
func profileName(giSlices, ciSlices int, memMiB, totalBytes uint64, giProfileID int) string {
	name := strconv.Itoa(giSlices) + "g." + strconv.Itoa(profileMemoryGB(memMiB, totalBytes)) + "gb" + profileSuffix(giProfileID)
	if ciSlices > 0 && ciSlices < giSlices {
		name = strconv.Itoa(ciSlices) + "c." + name
	}
	return name
}

// profileMemoryGB is the "40gb" of "3g.40gb". The name states the instance's
// share of the GPU's memory in eighths (the memory slices), times the GPU's
// memory in whole GiB rounded up. Drivers report a little under the exact
// share: an H100 80GB HBM3 (81559 MiB) gives its 3g.40gb instance 40448 MiB,
// 3.97 eighths; an A100-SXM4-40GB (40960 MiB) gives 3g.20gb 19968 MiB, 3.9
// eighths (testdata/fixtures/nvidia-smi 05 and 32). go-nvml's mock tables
// are a little over: the H200's 1g.18gb is 18432 of 144384 MiB, 1.02
// eighths. Rounding to the nearest eighth names both as nvidia-smi does;
// rounding up (go-nvlib's way) would call the mock's profile 1g.35gb.
func profileMemoryGB(memMiB, totalBytes uint64) int {
	const mib, gib = 1 << 20, 1 << 30
	if totalBytes == 0 {
		return int(math.Round(float64(memMiB) / 1024))
	}
	eighths := math.Round(float64(memMiB) * mib * 8 / float64(totalBytes))
	if eighths < 1 {
		eighths = 1
	}
	totalGB := math.Ceil(float64(totalBytes) / gib)
	return int(math.Round(eighths * totalGB / 8))
}

// profileSuffix names the engine variants of a GPU-instance profile, as the
// MIG User Guide spells them.
func profileSuffix(giProfileID int) string {
	switch giProfileID {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:
		return "+me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX,
		nvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:
		return "+gfx"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
		return "-me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
		return "+me.all"
	}
	return ""
}
