package preflight

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/smi"
	"github.com/rankgate/rankgate/verdict"
)

func smiNode(t *testing.T, files ...string) *topology.Inventory {
	t.Helper()
	return smiNodeWith(t, nil, files...)
}

// smiNodeWith imports with the given catalog (nil: the built-in one).
func smiNodeWith(t *testing.T, cat *topology.Catalog, files ...string) *topology.Inventory {
	t.Helper()
	var in []smi.Input
	for _, f := range files {
		data, err := os.ReadFile("../topology/smi/testdata/" + f)
		require.NoError(t, err)
		in = append(in, smi.Input{Name: f, Data: data})
	}
	inv, err := smi.Import(in, cat)
	require.NoError(t, err)
	return inv
}

// catalogWithout is the built-in catalog less the named models.
func catalogWithout(names ...string) *topology.Catalog {
	cat := topology.DefaultCatalog()
	kept := cat.Models[:0]
	for _, m := range cat.Models {
		drop := false
		for _, n := range names {
			drop = drop || m.Name == n
		}
		if !drop {
			kept = append(kept, m)
		}
	}
	cat.Models = kept
	return cat
}

// TestProfileFromPastedLGIP: with the GPU's own -lgip, a GPU the catalog
// lacks (a catalog without its H100 NVL entry) gets PROFILE_MISMATCH with SM
// counts; without it, PROFILE_UNKNOWN names the command to paste. The
// built-in catalog knows the H100 NVL and needs no -lgip.
func TestProfileFromPastedLGIP(t *testing.T) {
	cat := catalogWithout("H100-NVL-94GB")
	run := func(inv *topology.Inventory, cat *topology.Catalog) verdict.Report {
		return RankRules(RankInput{Inventory: inv, Allocation: topology.Allocation{From: "--devices", Refs: []string{"0:0"}},
			ExpectProfile: "2g.24gb", Catalog: cat})
	}
	r := run(smiNodeWith(t, cat, "lgip_h100-nvl_excerpt_gpuop900.txt", "table_h100-nvl_mig-1g.24gb_variant.txt"), cat)
	require.Equal(t, []string{"PROFILE_MISMATCH/fail"}, rules(r))
	require.Contains(t, r.Findings[0].Message, "26 SMs instead of 32")

	r = run(smiNodeWith(t, cat, "table_h100-nvl_mig-1g.24gb_variant.txt"), cat)
	require.Equal(t, []string{"PROFILE_UNKNOWN/warn"}, rules(r))
	require.Contains(t, r.Findings[0].Remediation, "`nvidia-smi mig -lgip`")
	require.Contains(t, r.Findings[0].Message, `no entry for "NVIDIA H100 NVL"`)

	r = run(smiNode(t, "table_h100-nvl_mig-1g.24gb_variant.txt"), topology.DefaultCatalog())
	require.Equal(t, []string{"PROFILE_MISMATCH/fail"}, rules(r))
	require.Contains(t, r.Findings[0].Message, "26 SMs instead of 32")
}

// TestPendingModeFromTable: Disabled* on a MIG GPU warns with the reset.
func TestPendingModeFromTable(t *testing.T) {
	inv := smiNode(t, "table_h100_mig-disabled-pending_535.104.12.txt")
	r := RankRules(RankInput{Inventory: inv, Allocation: topology.Allocation{From: "--devices", Refs: []string{"0:0"}}, Catalog: topology.DefaultCatalog()})
	require.Equal(t, []string{"MIG_MODE_PENDING/warn"}, rules(r))
	require.Contains(t, r.Findings[0].Message, "still in MIG mode")
	require.Contains(t, r.Findings[0].Remediation, "`nvidia-smi -r -i 0`")
}
