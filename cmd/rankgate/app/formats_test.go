package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

const (
	embeddedCatalog = "../../../configs/mig-profiles.yaml"
	embeddedDrivers = "../../../configs/known-bad-drivers.yaml"
	// Copies of the data files as shipped with the old header,
	// `version: rankgate.io/v1`.
	legacySnapshot = "../../../topology/testdata/legacy/h100-mig.json"
	legacyCatalog  = "../../../topology/testdata/legacy/mig-profiles.yaml"
	legacyDrivers  = "../../../preflight/testdata/legacy/known-bad-drivers.yaml"
)

// inspect writes the snapshot header; preflight --inventory on that file
// gives the verdict preflight gives on the node itself, and inspect on the
// file writes the file again.
func TestInspectSnapshotRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		sample  string
		devices string
		code    int
	}{
		{"h100-mig", "0:0", 0},
		{"h100-mig", "0:0,1:0", verdict.ExitFail},
		{"a100-full", "0,1,2,3", 0},
	} {
		t.Run(tc.sample+" "+tc.devices, func(t *testing.T) {
			code, snap, stderr := run(t, nil, "inspect", "--sample", tc.sample, "-o", "json")
			require.Equal(t, 0, code, stderr)
			require.True(t, strings.HasPrefix(snap, "{\n  \"apiVersion\": \"rankgate.io/v1\",\n  \"kind\": \"NodeInventory\",\n"), snap[:min(len(snap), 120)])
			require.NotContains(t, snap, `"version"`)
			p := filepath.Join(t.TempDir(), "node.json")
			require.NoError(t, os.WriteFile(p, []byte(snap), 0o644))

			code, direct, _ := run(t, nil, "preflight", "--sample", tc.sample, "--devices", tc.devices, "-o", "json")
			require.Equal(t, tc.code, code, direct)
			code, fromFile, _ := run(t, nil, "preflight", "--inventory", p, "--devices", tc.devices, "-o", "json")
			require.Equal(t, tc.code, code, fromFile)
			require.Equal(t, decodeReport(t, direct), decodeReport(t, fromFile))

			code, again, stderr := run(t, nil, "inspect", "--inventory", p, "-o", "json")
			require.Equal(t, 0, code, stderr)
			require.Equal(t, strings.Replace(snap, `"source": "sample:`+tc.sample+`"`, `"source": "snapshot:`+p+`"`, 1), again)
		})
	}
}

// Files with the old header load through every flag and give the same
// verdicts; inspect rewrites an old snapshot in the new form.
func TestOldFormatFilesLoad(t *testing.T) {
	for _, devices := range []string{"0:0", "0:0,0:1", "1:0"} {
		wantCode, want, _ := run(t, nil, "preflight", "--sample", "h100-mig", "--devices", devices, "-o", "json")
		code, out, stderr := run(t, nil, "preflight", "--inventory", legacySnapshot, "--catalog", legacyCatalog, "--known-bad-drivers", legacyDrivers, "--devices", devices, "-o", "json")
		require.Equal(t, wantCode, code, stderr)
		require.Equal(t, decodeReport(t, want), decodeReport(t, out), devices)
	}

	code, snap, stderr := run(t, nil, "inspect", "--inventory", legacySnapshot, "-o", "json")
	require.Equal(t, 0, code, stderr)
	inv, err := topology.DecodeSnapshot("out", []byte(snap))
	require.NoError(t, err)
	require.Equal(t, topology.SnapshotKind, inv.Kind)
	require.True(t, strings.HasPrefix(snap, "{\n  \"apiVersion\": \"rankgate.io/v1\",\n  \"kind\": \"NodeInventory\",\n"))
}

// A data file given to the wrong flag is refused with exit 2 by its kind,
// naming both kinds; so are an unknown apiVersion and an unknown key.
func TestDataFileKinds(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	catalogJSON := write("catalog.json", `{"apiVersion":"rankgate.io/v1","kind":"MIGProfileCatalog","models":[]}`)
	driversV2 := write("drivers-v2.yaml", "apiVersion: rankgate.io/v2\nkind: KnownBadDrivers\nentries: []\nseverityOverrides: {}\n")
	catalogTypo := write("catalog-typo.yaml", "apiVersion: rankgate.io/v1\nkind: MIGProfileCatalog\nmodel: []\n")
	sample := []string{"--sample", "h100-mig"}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"catalog as driver table", append(sample, "--known-bad-drivers", embeddedCatalog), []string{"mig-profiles.yaml: known-bad driver table: the file has kind MIGProfileCatalog, not KnownBadDrivers"}},
		{"driver table as catalog", append(sample, "--catalog", embeddedDrivers), []string{"known-bad-drivers.yaml: MIG profile catalog: the file has kind KnownBadDrivers, not MIGProfileCatalog"}},
		{"catalog as inventory", []string{"--inventory", catalogJSON}, []string{"catalog.json: inventory snapshot: the file has kind MIGProfileCatalog, not NodeInventory"}},
		{"unknown apiVersion", append(sample, "--known-bad-drivers", driversV2), []string{"drivers-v2.yaml", `apiVersion "rankgate.io/v2" is not supported`}},
		{"unknown key", append(sample, "--catalog", catalogTypo), []string{"catalog-typo.yaml", `unknown field "model"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, nil, append([]string{"preflight", "--devices", "0:0"}, tc.args...)...)
			require.Equal(t, verdict.ExitUsage, code, stderr)
			for _, w := range tc.want {
				require.Contains(t, stderr, w)
			}
		})
	}
}
