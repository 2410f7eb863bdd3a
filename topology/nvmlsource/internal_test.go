package nvmlsource

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
)

func TestProfileName(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name      string
		gi, ci    int
		memMiB    uint64
		totalMiB  uint64
		giProfile int
		want      string
	}{
		// Real drivers (testdata/fixtures/nvidia-smi 05 and 32).
		{"H100 3g", 3, 3, 40448, 81559, nvml.GPU_INSTANCE_PROFILE_3_SLICE, "3g.40gb"},
		{"H100 2g", 2, 2, 20096, 81559, nvml.GPU_INSTANCE_PROFILE_2_SLICE, "2g.20gb"},
		{"H100 1g", 1, 1, 9984, 81559, nvml.GPU_INSTANCE_PROFILE_1_SLICE, "1g.10gb"},
		{"A100-40GB 3g", 3, 3, 19968, 40960, nvml.GPU_INSTANCE_PROFILE_3_SLICE, "3g.20gb"},
		// go-nvml's mock tables.
		{"mock A100-40GB 1g", 1, 1, 4864, 40960, nvml.GPU_INSTANCE_PROFILE_1_SLICE, "1g.5gb"},
		{"mock A100-40GB 7g", 7, 7, 40192, 40960, nvml.GPU_INSTANCE_PROFILE_7_SLICE, "7g.40gb"},
		{"mock A100-80GB 1g", 1, 1, 9856, 81920, nvml.GPU_INSTANCE_PROFILE_1_SLICE, "1g.10gb"},
		{"mock H200 1g", 1, 1, 18432, 144384, nvml.GPU_INSTANCE_PROFILE_1_SLICE, "1g.18gb"},
		{"mock H200 1g rev2", 1, 1, 35840, 144384, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, "1g.35gb"},
		{"mock H200 3g", 3, 3, 72704, 144384, nvml.GPU_INSTANCE_PROFILE_3_SLICE, "3g.71gb"},
		{"mock H200 7g", 7, 7, 144384, 144384, nvml.GPU_INSTANCE_PROFILE_7_SLICE, "7g.141gb"},
		{"mock B200 1g", 1, 1, 23552, 184320, nvml.GPU_INSTANCE_PROFILE_1_SLICE, "1g.23gb"},
		{"mock B200 3g", 3, 3, 92160, 184320, nvml.GPU_INSTANCE_PROFILE_3_SLICE, "3g.90gb"},
		{"mock A30 1g", 1, 1, 5836, 24576, nvml.GPU_INSTANCE_PROFILE_1_SLICE, "1g.6gb"},
		// Compute instance smaller than its GPU instance.
		{"1c of 3g", 3, 1, 40448, 81559, nvml.GPU_INSTANCE_PROFILE_3_SLICE, "1c.3g.40gb"},
		{"2c of 4g", 4, 2, 40448, 81559, nvml.GPU_INSTANCE_PROFILE_4_SLICE, "2c.4g.40gb"},
		{"ci unknown", 3, 0, 40448, 81559, nvml.GPU_INSTANCE_PROFILE_3_SLICE, "3g.40gb"},
		// Engine variants.
		{"+me", 1, 1, 4864, 40960, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, "1g.5gb+me"},
		{"+gfx", 1, 1, 24576, 98304, nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, "1g.24gb+gfx"},
		{"-me", 1, 1, 24576, 98304, nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, "1g.24gb-me"},
		{"+me.all", 2, 2, 49152, 98304, nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME, "2g.48gb+me.all"},
		{"profile unknown", 1, 1, 4864, 40960, -1, "1g.5gb"},
		// Without the GPU's total: nearest GiB.
		{"no total", 3, 3, 40448, 0, -1, "3g.40gb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, profileName(tt.gi, tt.ci, tt.memMiB, tt.totalMiB*mib, tt.giProfile))
		})
	}
}

func TestBusKey(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:1B:00.0": "0000:1b:00.0",
		"0000:1b:00.0":     "0000:1b:00.0",
		"1b:00.0":          "0000:1b:00.0",
		"00000001:C4:00.0": "0001:c4:00.0",
		"":                 "",
	} {
		require.Equal(t, want, busKey(in), in)
	}
}

func TestOpString(t *testing.T) {
	require.Equal(t, "nvmlInit()", sysOp("nvmlInit").String())
	require.Equal(t, "nvmlDeviceGetUUID(GPU 3)", gpuOp("nvmlDeviceGetUUID", 3).String())
	require.Equal(t, "nvmlDeviceGetUUID(MIG 3:1)", op{fn: "nvmlDeviceGetUUID", gpu: 3, mig: 1, peer: -1, arg: -1}.String())
	require.Equal(t, "nvmlDeviceGetNvLinkState(GPU 2, link 17)", op{fn: "nvmlDeviceGetNvLinkState", gpu: 2, mig: -1, peer: -1, arg: 17, argName: "link"}.String())
	require.Equal(t, "nvmlDeviceGetP2PStatus(GPU 0, GPU 5, READ)", op{fn: "nvmlDeviceGetP2PStatus", gpu: 0, mig: -1, peer: 5, arg: -1, argName: "READ"}.String())
}

func TestCstr(t *testing.T) {
	var b [16]int8
	for i, c := range "0000:07:00.0" {
		b[i] = int8(c)
	}
	require.Equal(t, "0000:07:00.0", cstr(b[:]))
	require.Equal(t, "", cstr(nil))
}
