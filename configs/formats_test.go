package configs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/configs"
	"github.com/rankgate/rankgate/internal/fileformat"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/topology"
)

// Every embedded data file is written in the current form: apiVersion and
// kind of its own format, no old `version` header, and it loads with the
// reader of that format.
func TestEmbeddedFilesHeader(t *testing.T) {
	type file struct {
		name   string
		data   []byte
		format fileformat.Format
		load   func([]byte) error
	}
	files := []file{
		{"mig-profiles.yaml", configs.MIGProfiles, topology.CatalogFormat, func(b []byte) error { _, err := topology.ParseCatalog(b); return err }},
		{"known-bad-drivers.yaml", configs.KnownBadDrivers, preflight.DriverTableFormat, func(b []byte) error { _, err := preflight.ParseDriverTable(b); return err }},
	}
	for _, name := range configs.SampleNames() {
		data, ok := configs.Sample(name)
		require.True(t, ok)
		files = append(files, file{"samples/" + name + ".json", data, topology.SnapshotFormat, func(b []byte) error { _, err := topology.DecodeSnapshot(name, b); return err }})
	}
	require.Len(t, files, 4)
	for _, f := range files {
		t.Run(f.name, func(t *testing.T) {
			h, ok := fileformat.PeekYAML(f.data)
			require.True(t, ok)
			require.Equal(t, fileformat.Header{APIVersion: f.format.APIVersion, Kind: f.format.Kind}, h)
			require.NoError(t, f.load(f.data))
		})
	}
}
