package topology

import (
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/stretchr/testify/require"
)

func TestDefaultCatalogParses(t *testing.T) {
	c := DefaultCatalog()
	require.Len(t, c.Models, 15)
	for _, m := range c.Models {
		require.NotEmpty(t, m.Source, m.Name)
		for _, p := range m.Profiles {
			require.True(t, m.Fits(Layout{p.Name: p.MaxInstances}), "%s: %d x %s must fit", m.Name, p.MaxInstances, p.Name)
			require.False(t, m.Fits(Layout{p.Name: p.MaxInstances + 1}), "%s: %d x %s must not fit", m.Name, p.MaxInstances+1, p.Name)
		}
	}
}

func TestModelMatch(t *testing.T) {
	c := DefaultCatalog()
	for name, want := range map[string]string{
		"NVIDIA H100 80GB HBM3":   "H100-80GB",
		"NVIDIA A100-SXM4-80GB":   "A100-80GB",
		"NVIDIA A100 80GB PCIe":   "A100-80GB",
		"NVIDIA A100-SXM4-40GB":   "A100-40GB",
		"NVIDIA A100-PCIE-40GB":   "A100-40GB",
		"NVIDIA GH200 480GB":      "GH200-96GB",
		"NVIDIA H200":             "H200-141GB",
		"NVIDIA H200 141GB HBM3e": "H200-141GB",
		"NVIDIA B200":             "B200-180GB",
		"NVIDIA A30":              "A30-24GB",
		// A match is whole words: a model whose name contains another's
		// (GB200 and B200, GH200 and H200, H20 and H200) is its own.
		"NVIDIA GB200":            "GB200-186GB",
		"NVIDIA GB300":            "GB300-278GB",
		"NVIDIA B300 SXM6 AC":     "B300-269GB",
		"NVIDIA H100 NVL":         "H100-NVL-94GB",
		"NVIDIA H800 NVL":         "H100-NVL-94GB",
		"NVIDIA H100 PCIe":        "H100-80GB",
		"NVIDIA H800":             "H100-80GB",
		"NVIDIA H200 NVL":         "H200-NVL",
		"NVIDIA GH200 144G HBM3e": "GH200-144GB",
		"NVIDIA H20":              "H20-96GB",
		"NVIDIA A800-SXM4-80GB":   "A100-80GB",
		"NVIDIA A800-SXM4-40GB":   "A100-40GB",
		"NVIDIA-GB200":            "GB200-186GB", // GPU feature discovery's label
		"NVIDIA-H100-NVL":         "H100-NVL-94GB",
		"nvidia h200 nvl":         "H200-NVL",
		"NVIDIA RTX PRO 6000 Blackwell Server Edition":            "RTX-PRO-6000-Blackwell-96GB",
		"NVIDIA RTX PRO 6000 Blackwell Workstation Edition":       "RTX-PRO-6000-Blackwell-96GB",
		"NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition": "RTX-PRO-6000-Blackwell-96GB",
	} {
		m, ok := c.Model(name)
		require.True(t, ok, name)
		require.Equal(t, want, m.Name, name)
	}
	for _, name := range []string{"NVIDIA L40S", "NVIDIA RTX PRO 5000 Blackwell", "NVIDIA RTX 6000 Ada Generation", "NVIDIA H2", ""} {
		_, ok := c.Model(name)
		require.False(t, ok, name)
	}
}

// TestModelMatchWholeWords checks matching on a catalog that holds only the
// shorter names: a GB200 is not a B200, a GH200 not an H200, an H200 not an
// H20, even with nothing better to match.
func TestModelMatchWholeWords(t *testing.T) {
	c := &Catalog{Models: []GPUModel{
		{Name: "B200", Match: []string{"B200"}},
		{Name: "H200", Match: []string{"H200"}},
		{Name: "H20", Match: []string{"H20"}},
		{Name: "B300", Match: []string{"B300"}},
		{Name: "H100", Match: []string{"H100"}},
		{Name: "H100-NVL", Match: []string{"H100 NVL"}},
	}}
	for name, want := range map[string]string{
		"NVIDIA GB200": "", "NVIDIA GB300": "", "NVIDIA GH200 480GB": "",
		"NVIDIA B200": "B200", "NVIDIA H200": "H200", "NVIDIA H20": "H20", "NVIDIA B300": "B300",
		"NVIDIA H100 NVL": "H100-NVL", "NVIDIA H100 80GB HBM3": "H100", "NVIDIA-H100-NVL": "H100-NVL",
	} {
		m, ok := c.Model(name)
		if want == "" {
			require.False(t, ok, "%s matched %v", name, m)
			continue
		}
		require.True(t, ok, name)
		require.Equal(t, want, m.Name, name)
	}
}

// TestBuiltInCatalogCitesSources: every model of the embedded catalog says
// where its numbers come from (a user's own catalog may omit it).
func TestBuiltInCatalogCitesSources(t *testing.T) {
	for _, m := range DefaultCatalog().Models {
		require.NotEmpty(t, strings.TrimSpace(m.Source), "model %s has no source", m.Name)
	}
	_, err := ParseCatalog([]byte(`version: rankgate.io/v1
models:
  - name: X
    source: somewhere
    sourceURL: typo
    match: ["X"]
    slices: 7
    memorySlices: 8
`))
	require.Error(t, err, "unknown fields stay refused")
}

func TestInferProfile(t *testing.T) {
	c := DefaultCatalog()
	h100, _ := c.ModelByName("H100-80GB")
	a100, _ := c.ModelByName("A100-80GB")
	for _, tc := range []struct {
		m      *GPUModel
		sms    int
		mem    uint64
		want   string
		wantOK bool
	}{
		{h100, 60, 40448, "3g.40gb", true},
		{h100, 0, 40448, "", false}, // 3g.40gb and 4g.40gb share memory
		{h100, 64, 40448, "4g.40gb", true},
		{h100, 32, 20096, "2g.20gb", true},
		{h100, 26, 20096, "1g.20gb", true},
		{h100, 0, 9984, "1g.10gb", true},
		{a100, 14, 19968, "1g.20gb", true},
		{a100, 28, 19968, "2g.20gb", true},
		{a100, 0, 19968, "", false},
		{a100, 0, 0, "", false},
		{a100, 0, 555, "", false},
	} {
		t.Run(fmt.Sprintf("%s/%d/%d", tc.m.Name, tc.sms, tc.mem), func(t *testing.T) {
			got, ok := tc.m.InferProfile(tc.sms, tc.mem)
			require.Equal(t, tc.wantOK, ok)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestFitsPlacement(t *testing.T) {
	a100, _ := DefaultCatalog().ModelByName("A100-40GB")
	for _, tc := range []struct {
		l    Layout
		want bool
	}{
		{Layout{"1g.5gb": 7}, true},
		{Layout{"3g.20gb": 2}, true},
		{Layout{"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}, true},
		{Layout{"4g.20gb": 1, "3g.20gb": 1}, true},
		{Layout{"4g.20gb": 1, "3g.20gb": 1, "1g.5gb": 1}, false}, // 8 compute slices
		{Layout{"7g.40gb": 1, "1g.5gb": 1}, false},
		{Layout{"2g.10gb": 3, "1g.5gb": 1}, true},
		{Layout{"1g.10gb": 4}, true},
		{Layout{"1g.10gb": 4, "1g.5gb": 1}, false}, // memory slices exhausted
		{Layout{"9g.99gb": 1}, false},
		{Layout{"1g.5gb": -1}, false},
		{Layout{"1g.5gb": 0, "7g.40gb": 1}, true},
	} {
		require.Equal(t, tc.want, a100.Fits(tc.l), tc.l.String())
	}
}

func TestParseProfileName(t *testing.T) {
	for in, want := range map[string][2]int{"3g.40gb": {3, 40}, "1c.3g.71gb": {3, 71}, "1g.10gb+me": {1, 10}, "7g.141gb": {7, 141}} {
		s, g, err := ParseProfileName(in)
		require.NoError(t, err, in)
		require.Equal(t, want, [2]int{s, g}, in)
	}
	for _, bad := range []string{"", "full", "3g", "g.40gb", "0g.1gb", "3g.40", "99g.1gb", "3g.-1gb"} {
		_, _, err := ParseProfileName(bad)
		require.Error(t, err, bad)
	}
}

// TestCatalogAgainstGoNVMLMocks cross-checks the offline catalog with the
// GPU-instance profile tables go-nvml ships in its mock servers: every
// profile the mock offers for a model must exist in the catalog with the
// same number of compute slices and maximum instances, and placements must
// agree. SM counts are compared where both sides state one; go-nvml's mock
// tables simplify some H100/H200 SM counts, so differences are logged as
// data to review, not asserted.
func TestCatalogAgainstGoNVMLMocks(t *testing.T) {
	c := DefaultCatalog()
	for _, cfg := range []gpus.Config{gpus.A100_SXM4_40GB, gpus.A100_SXM4_80GB, gpus.A30_PCIE_24GB, gpus.H100_SXM5_80GB, gpus.H200_SXM5_141GB, gpus.B200_SXM5_180GB} {
		t.Run(cfg.Name, func(t *testing.T) {
			m, ok := c.Model(cfg.Name)
			require.True(t, ok, "catalog has no model for %q", cfg.Name)
			for id, info := range cfg.MIGProfiles.GpuInstanceProfiles {
				if id == nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1 || id == nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1 {
					continue // +me variants: one per GPU, not in the catalog
				}
				// The mock's sizes are the nominal ones of the profile
				// names (18432 MB for 1g.18gb); the catalog's are what
				// nvidia-smi mig -lgip prints, or 0 where none is public.
				var p *Profile
				for i := range m.Profiles {
					q := &m.Profiles[i]
					_, gb, err := ParseProfileName(q.Name)
					require.NoError(t, err)
					memRatio := float64(info.MemorySizeMB) / float64(gb*1024)
					if q.Slices == int(info.SliceCount) && memRatio > 0.9 && memRatio < 1.1 {
						p = q
					}
				}
				require.NotNil(t, p, "mock profile id %d (%d slices, %d MB) missing from catalog model %s", id, info.SliceCount, info.MemorySizeMB, m.Name)
				require.Equal(t, int(info.InstanceCount), p.MaxInstances, "%s max instances", p.Name)
				if placements, ok := cfg.MIGProfiles.GpuInstancePlacements[id]; ok {
					var starts []int
					size := 0
					for _, pl := range placements {
						starts = append(starts, int(pl.Start))
						size = int(pl.Size)
					}
					if memorySliceMock(cfg) {
						require.Equal(t, p.Size, size, "%s placement size", p.Name)
						require.ElementsMatch(t, starts, p.Starts, "%s placements", p.Name)
					} else if size != p.Size {
						t.Logf("placement of %s %s: catalog %v size %d (memory slices, as nvidia-smi mig -lgipp prints), go-nvml mock %v size %d (compute slices)", m.Name, p.Name, p.Starts, p.Size, starts, size)
					}
				}
				if p.SMs != 0 && int(info.MultiprocessorCount) != p.SMs {
					t.Logf("SM count differs for %s %s: catalog %d (public sources), go-nvml mock %d", m.Name, p.Name, p.SMs, info.MultiprocessorCount)
				}
			}
		})
	}
}

// memorySliceMock reports whether a go-nvml mock table places GPU instances
// in memory slices (8 on A100-class GPUs, as real drivers do). The H100,
// H200 and B200 mocks place them in compute slices (a 7g instance of size
// 7), a simplification; their placements are not compared.
func memorySliceMock(cfg gpus.Config) bool {
	for _, pl := range cfg.MIGProfiles.GpuInstancePlacements[nvml.GPU_INSTANCE_PROFILE_7_SLICE] {
		if pl.Size == 8 {
			return true
		}
	}
	return cfg.MIGProfiles.GpuInstancePlacements[nvml.GPU_INSTANCE_PROFILE_7_SLICE] == nil
}
