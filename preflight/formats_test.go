package preflight

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

const (
	driversOldHeader = "\nversion: rankgate.io/v1\n"
	driversNewHeader = "\napiVersion: rankgate.io/v1\nkind: KnownBadDrivers\n"
)

// testdata/legacy/known-bad-drivers.yaml is the embedded table as shipped
// before the header had a kind: `version: rankgate.io/v1`.
func legacyDriverTable(tb testing.TB) string {
	b, err := os.ReadFile("testdata/legacy/known-bad-drivers.yaml")
	require.NoError(tb, err)
	return string(b)
}

func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	require.Equal(t, 1, strings.Count(s, old), "want exactly one %q", old)
	return strings.Replace(s, old, new, 1)
}

func TestDriverTableFormats(t *testing.T) {
	old := legacyDriverTable(t)
	cur := replaceOnce(t, old, driversOldHeader, driversNewHeader)
	want, err := ParseDriverTable([]byte(cur))
	require.NoError(t, err)
	require.Len(t, want.Entries, 2)
	asJSON, err := yaml.YAMLToJSON([]byte(cur))
	require.NoError(t, err)
	oldJSON, err := yaml.YAMLToJSON([]byte(old))
	require.NoError(t, err)

	for _, tc := range []struct {
		name, data string
		wantErr    string // empty: parses to want
	}{
		{"new form", cur, ""},
		{"old form", old, ""},
		{"new form, JSON", string(asJSON), ""},
		{"old form, JSON", string(oldJSON), ""},
		{"wrong kind", replaceOnce(t, cur, "kind: KnownBadDrivers", "kind: MIGProfileCatalog"), "known-bad driver table: the file has kind MIGProfileCatalog, not KnownBadDrivers"},
		{"a catalog", "apiVersion: rankgate.io/v1\nkind: MIGProfileCatalog\nmodels:\n- name: A30-24GB\n  match: [A30]\n  slices: 4\n  memorySlices: 4\n", "the file has kind MIGProfileCatalog, not KnownBadDrivers"},
		{"a snapshot", `{"apiVersion":"rankgate.io/v1","kind":"NodeInventory","gpus":[]}`, "the file has kind NodeInventory, not KnownBadDrivers"},
		{"unknown apiVersion", replaceOnce(t, cur, "apiVersion: rankgate.io/v1", "apiVersion: rankgate.io/v1beta1"), `apiVersion "rankgate.io/v1beta1" is not supported by this build (want apiVersion: rankgate.io/v1)`},
		{"unknown old version", replaceOnce(t, old, "version: rankgate.io/v1", "version: v0"), `version "v0" is not supported (want apiVersion: rankgate.io/v1 and kind: KnownBadDrivers)`},
		{"unknown key, new form", replaceOnce(t, cur, "\nentries:\n", "\nentrys:\n"), `unknown field "entrys"`},
		{"unknown key, old form", replaceOnce(t, old, "\nentries:\n", "\nentrys:\n"), `unknown field "entrys"`},
		{"unknown entry key", replaceOnce(t, cur, "    condition: mig-mixed-with-full\n", "    condition: mig-mixed-with-full\n    since: 570.124.06\n"), `unknown field "since"`},
		{"missing kind", replaceOnce(t, cur, "kind: KnownBadDrivers\n", ""), "missing kind (want kind: KnownBadDrivers)"},
		{"no header", "entries: []\n", "missing apiVersion and kind"},
		{"both headers", replaceOnce(t, cur, driversNewHeader, driversOldHeader+"apiVersion: rankgate.io/v1\nkind: KnownBadDrivers\n"), "both version (the old form) and apiVersion/kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl, err := ParseDriverTable([]byte(tc.data))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, want, tbl)
			require.Equal(t, DriverTableAPIVersion, tbl.APIVersion)
			require.Equal(t, DriverTableKind, tbl.Kind)
		})
	}
}

func TestEmbeddedDriverTableHeader(t *testing.T) {
	tbl := DefaultDriverTable()
	require.Equal(t, DriverTableAPIVersion, tbl.APIVersion)
	require.Equal(t, DriverTableKind, tbl.Kind)
}

func FuzzParseDriverTable(f *testing.F) {
	f.Add([]byte(legacyDriverTable(f)))
	f.Add([]byte(strings.Replace(legacyDriverTable(f), driversOldHeader, driversNewHeader, 1)))
	f.Add([]byte(driversNewHeader + "entries:\n- {id: x, drivers: [\"1\"], condition: \"model:H100 profile:1g.10gb\", severity: warn, fix: f, source: s}\n"))
	f.Add([]byte(`{"apiVersion":"rankgate.io/v1","kind":"KnownBadDrivers","entries":[]}`))
	f.Add([]byte("apiVersion: rankgate.io/v1\nkind: MIGProfileCatalog\nmodels: []\n"))
	f.Add([]byte("entries: [\n"))
	shapes := []NodeShape{
		{Driver: "570.148.08", HasMIG: true, HasFull: true},
		{Driver: "580.1", HasMIG: true, Products: []string{"NVIDIA GH200 480GB"}, Profiles: []string{"1g.12gb"}},
		{},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tbl, err := ParseDriverTable(data)
		if err != nil {
			return
		}
		require.Equal(t, DriverTableAPIVersion, tbl.APIVersion)
		require.Equal(t, DriverTableKind, tbl.Kind)
		// What parses must match without panics, and only its own entries.
		for _, s := range shapes {
			for _, e := range tbl.Match(s) {
				require.Contains(t, tbl.Entries, e)
			}
		}
	})
}
