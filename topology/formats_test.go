package topology

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// Files in testdata/legacy are copies of the embedded files as they were
// shipped before the header had a kind: `version: rankgate.io/v1`.
func readLegacy(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/legacy/" + name)
	require.NoError(t, err)
	return string(b)
}

const (
	snapshotOldHeader = `"version": "rankgate.io/v1",`
	snapshotNewHeader = `"apiVersion": "rankgate.io/v1",
  "kind": "NodeInventory",`
	catalogOldHeader = "\nversion: rankgate.io/v1\n"
	catalogNewHeader = "\napiVersion: rankgate.io/v1\nkind: MIGProfileCatalog\n"
)

func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	require.Equal(t, 1, strings.Count(s, old), "want exactly one %q", old)
	return strings.Replace(s, old, new, 1)
}

func TestSnapshotFormats(t *testing.T) {
	old := readLegacy(t, "h100-mig.json")
	cur := replaceOnce(t, old, snapshotOldHeader, snapshotNewHeader)
	want, err := DecodeSnapshot("new.json", []byte(cur))
	require.NoError(t, err)
	require.Len(t, want.AllDevices(), 6)

	for _, tc := range []struct {
		name, data string
		wantErr    string // empty: decodes to want
	}{
		{"new form", cur, ""},
		{"old form", old, ""},
		{"new form, compact", `{"kind":"NodeInventory","apiVersion":"rankgate.io/v1","gpus":[]}`, ""},
		{"old form, compact", `{"version":"rankgate.io/v1","gpus":[]}`, ""},
		{"wrong kind", replaceOnce(t, cur, `"NodeInventory"`, `"MIGProfileCatalog"`), `inventory snapshot: the file has kind MIGProfileCatalog, not NodeInventory`},
		{"a catalog as JSON", `{"apiVersion":"rankgate.io/v1","kind":"MIGProfileCatalog","models":[]}`, `inventory snapshot: the file has kind MIGProfileCatalog, not NodeInventory`},
		{"unknown apiVersion", replaceOnce(t, cur, `"rankgate.io/v1"`, `"rankgate.io/v2"`), `apiVersion "rankgate.io/v2" is not supported by this build (want apiVersion: rankgate.io/v1)`},
		{"unknown apiVersion with new keys", `{"apiVersion":"rankgate.io/v2","kind":"NodeInventory","racks":[]}`, `apiVersion "rankgate.io/v2" is not supported`},
		{"unknown old version", replaceOnce(t, old, `"rankgate.io/v1"`, `"rankgate.io/v0"`), `version "rankgate.io/v0" is not supported (want apiVersion: rankgate.io/v1 and kind: NodeInventory)`},
		{"unknown key, new form", replaceOnce(t, cur, `"driverVersion"`, `"driverVersoin"`), `unknown field "driverVersoin"`},
		{"unknown key, old form", replaceOnce(t, old, `"driverVersion"`, `"driverVersoin"`), `unknown field "driverVersoin"`},
		{"missing kind", replaceOnce(t, cur, `"kind": "NodeInventory",`, ``), `missing kind (want kind: NodeInventory)`},
		{"missing apiVersion", replaceOnce(t, cur, `"apiVersion": "rankgate.io/v1",`, ``), `missing apiVersion (want apiVersion: rankgate.io/v1)`},
		{"no header", `{"gpus":[]}`, `missing apiVersion and kind`},
		{"both headers", replaceOnce(t, cur, `"kind": "NodeInventory",`, `"kind": "NodeInventory", "version": "rankgate.io/v1",`), `both version (the old form) and apiVersion/kind`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv, err := DecodeSnapshot("node.json", []byte(tc.data))
			if tc.wantErr != "" {
				var ie *InputError
				require.ErrorAs(t, err, &ie)
				require.Equal(t, "node.json", ie.File)
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			// Whatever header was read, the inventory carries the current one.
			require.Equal(t, SnapshotAPIVersion, inv.APIVersion)
			require.Equal(t, SnapshotKind, inv.Kind)
			if strings.Contains(tc.data, "sample-h100-mig") {
				require.Equal(t, want, inv)
			}
		})
	}
}

// The writer writes the new header first and never the old one, and what it
// writes from an old file reads back the same.
func TestEncodeSnapshotHeader(t *testing.T) {
	inv, err := DecodeSnapshot("old.json", []byte(readLegacy(t, "h100-mig.json")))
	require.NoError(t, err)
	b, err := EncodeSnapshot(inv)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), "{\n  "+snapshotNewHeader+"\n"), string(b[:80]))
	require.NotContains(t, string(b), `"version"`)
	back, err := DecodeSnapshot("new.json", b)
	require.NoError(t, err)
	require.Equal(t, inv, back)
}

func TestCatalogFormats(t *testing.T) {
	old := readLegacy(t, "mig-profiles.yaml")
	cur := replaceOnce(t, old, catalogOldHeader, catalogNewHeader)
	want, err := ParseCatalog([]byte(cur))
	require.NoError(t, err)
	require.NotEmpty(t, want.Models)
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
		{"wrong kind", replaceOnce(t, cur, "kind: MIGProfileCatalog", "kind: KnownBadDrivers"), "MIG profile catalog: the file has kind KnownBadDrivers, not MIGProfileCatalog"},
		{"a driver table", "apiVersion: rankgate.io/v1\nkind: KnownBadDrivers\nentries: []\n", "the file has kind KnownBadDrivers, not MIGProfileCatalog"},
		{"a snapshot", `{"apiVersion":"rankgate.io/v1","kind":"NodeInventory","gpus":[]}`, "the file has kind NodeInventory, not MIGProfileCatalog"},
		{"unknown apiVersion", replaceOnce(t, cur, "apiVersion: rankgate.io/v1", "apiVersion: rankgate.io/v2"), `apiVersion "rankgate.io/v2" is not supported by this build (want apiVersion: rankgate.io/v1)`},
		{"unknown old version", replaceOnce(t, old, "version: rankgate.io/v1", "version: v1"), `version "v1" is not supported (want apiVersion: rankgate.io/v1 and kind: MIGProfileCatalog)`},
		{"unknown key, new form", replaceOnce(t, cur, "\nmodels:\n", "\nmodel:\n"), `unknown field "model"`},
		{"unknown key, old form", replaceOnce(t, old, "\nmodels:\n", "\nmodel:\n"), `unknown field "model"`},
		{"unknown nested key", replaceOnce(t, cur, "    memoryMiB: 40960\n", "    memoryMB: 40960\n"), `unknown field "memoryMB"`},
		{"missing kind", replaceOnce(t, cur, "kind: MIGProfileCatalog\n", ""), "missing kind (want kind: MIGProfileCatalog)"},
		{"no header", "models: []\n", "missing apiVersion and kind"},
		{"empty", "", "missing apiVersion and kind"},
		{"both headers", replaceOnce(t, cur, catalogNewHeader, catalogNewHeader+"version: rankgate.io/v1\n"), "both version (the old form) and apiVersion/kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseCatalog([]byte(tc.data))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, want, c)
			require.Equal(t, CatalogAPIVersion, c.APIVersion)
			require.Equal(t, CatalogKind, c.Kind)
		})
	}
}

func TestEmbeddedCatalogHeader(t *testing.T) {
	c := DefaultCatalog()
	require.Equal(t, CatalogAPIVersion, c.APIVersion)
	require.Equal(t, CatalogKind, c.Kind)
}

func FuzzParseCatalog(f *testing.F) {
	f.Add(readLegacyF(f, "mig-profiles.yaml"))
	f.Add([]byte(catalogNewHeader + "models: []\n"))
	f.Add([]byte(catalogNewHeader + "models:\n- {name: X, match: [X], slices: 7, memorySlices: 8, profiles: [{name: 1g.10gb, slices: 1, maxInstances: 7, starts: [0,1,2,3,4,5,6], size: 1}]}\n"))
	f.Add([]byte(`{"apiVersion":"rankgate.io/v1","kind":"MIGProfileCatalog","models":[]}`))
	f.Add([]byte("apiVersion: rankgate.io/v1\nkind: KnownBadDrivers\nentries: []\n"))
	f.Add([]byte("version: [\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCatalog(data)
		if err != nil {
			return
		}
		require.Equal(t, CatalogAPIVersion, c.APIVersion)
		require.Equal(t, CatalogKind, c.Kind)
		// What parses must answer questions without panics.
		for i := range c.Models {
			m := &c.Models[i]
			_, _ = c.Model(m.Name)
			for _, p := range m.Profiles {
				_ = m.Fits(Layout{p.Name: 1})
				_, _ = m.InferProfile(p.SMs, p.MemoryMiB)
			}
		}
	})
}

func readLegacyF(f *testing.F, name string) []byte {
	b, err := os.ReadFile("testdata/legacy/" + name)
	if err != nil {
		f.Fatal(err)
	}
	return b
}
