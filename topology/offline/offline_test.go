package offline

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/configs"
	"github.com/rankgate/rankgate/topology"
)

const fixtures = "../../testdata/fixtures/nvidia-smi/"

func TestLoadCombinesOutputs(t *testing.T) {
	// -L names devices and UUIDs; the plain table adds GI IDs, SMs and memory.
	inv, err := Load(context.Background(), []string{
		fixtures + "01_smi-L_h100-80gb-hbm3_mig-mixed_590.48.01.txt",
		fixtures + "03_smi-table_h100-80gb-hbm3_mig-mixed_590.48.01.txt",
	}, nil, topology.DefaultCatalog())
	require.NoError(t, err)
	require.Len(t, inv.GPUs, 1)
	g := inv.GPUs[0]
	require.Len(t, g.MIGDevices, 4)
	require.Equal(t, "3g.40gb", g.MIGDevices[0].Profile)
	require.Equal(t, 60, g.MIGDevices[0].SMs)
	require.Equal(t, "MIG-00000000-0000-0000-0000-000000000000", g.MIGDevices[0].UUID)
	require.Equal(t, "590.48.01", inv.DriverVersion)
}

func TestLoadSnapshot(t *testing.T) {
	data, ok := configs.Sample("h100-mig")
	require.True(t, ok)
	p := filepath.Join(t.TempDir(), "node.json")
	require.NoError(t, os.WriteFile(p, data, 0o644))
	inv, err := Load(context.Background(), []string{p}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, "snapshot:"+p, inv.Source)
	require.Len(t, inv.GPUs, 2)

	// A snapshot already holds the whole node: mixing it with outputs is refused.
	_, err = Load(context.Background(), []string{p, fixtures + "01_smi-L_h100-80gb-hbm3_mig-mixed_590.48.01.txt"}, nil, nil)
	var ie *topology.InputError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, p, ie.File)
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.txt")
	f, err := os.Create(big)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(MaxFileSize+1))
	require.NoError(t, f.Close())
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for name, paths := range map[string][]string{
		"none":        nil,
		"missing":     {filepath.Join(dir, "absent")},
		"too big":     {big},
		"named pipe":  {fifo},
		"device":      {"/dev/zero"},
		"directory":   {dir},
		"stdin, none": {"-"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(context.Background(), paths, nil, nil)
			var ie *topology.InputError
			require.ErrorAs(t, err, &ie)
		})
	}
}
