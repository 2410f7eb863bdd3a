package nvmlsource_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/nvmlsource"
	"github.com/rankgate/rankgate/verdict"
)

// liveEnv names the environment variable that runs TestLiveNVML against
// the machine's real driver; without it, that test is skipped.
const liveEnv = "RANKGATE_NVML_LIVE"

// TestLiveNVML discovers the machine's GPUs through libnvidia-ml.so.1.
// Run it on a GPU machine: RANKGATE_NVML_LIVE=1 go test -run TestLiveNVML -v.
// With RANKGATE_NVML_LIVE_OUT=<file> it also writes the inventory there.
func TestLiveNVML(t *testing.T) {
	if os.Getenv(liveEnv) == "" {
		t.Skip("set " + liveEnv + "=1 to discover the real GPUs")
	}
	log := &recordingLogger{}
	src := nvmlsource.NewDefault(nvmlsource.WithLogger(log), nvmlsource.WithCallTimeout(30*time.Second))
	start := time.Now()
	inv, err := src.Inventory(context.Background())
	took := time.Since(start)
	require.NoError(t, err)
	out, err := json.MarshalIndent(inv, "", "  ")
	require.NoError(t, err)
	t.Logf("discovery took %s\n%s", took, out)
	for _, l := range log.lines {
		t.Log(l)
	}
	if f := os.Getenv(liveEnv + "_OUT"); f != "" {
		require.NoError(t, os.WriteFile(f, out, 0o644))
	}
	require.NotEmpty(t, inv.GPUs)
	require.NotEmpty(t, inv.DriverVersion)
	require.NoError(t, inv.Validate())
	for _, g := range inv.GPUs {
		require.True(t, strings.HasPrefix(g.UUID, "GPU-"), g.UUID)
		require.NotEmpty(t, g.Name)
		require.NotEmpty(t, g.PCIBusID)
		require.NotZero(t, g.MemoryMiB)
		for _, m := range g.MIGDevices {
			require.True(t, strings.HasPrefix(m.UUID, "MIG-"), m.UUID)
			_, _, err := topology.ParseProfileName(m.Profile)
			require.NoError(t, err)
		}
	}

	// A second discovery gives the same answer.
	again, err := src.Inventory(context.Background())
	require.NoError(t, err)
	require.Equal(t, inv, again)
}

// TestDefaultWithoutLibrary: where libnvidia-ml.so.1 is absent (CI, a
// laptop), discovery fails with LIBRARY_NOT_FOUND at Init.
func TestDefaultWithoutLibrary(t *testing.T) {
	if os.Getenv(liveEnv) != "" {
		t.Skip("live run: " + liveEnv + " is set")
	}
	_, err := nvmlsource.NewDefault().Inventory(context.Background())
	if err == nil {
		t.Skip("this machine has a working NVML")
	}
	de := discoveryError(t, err)
	if de.Class != verdict.ClassLibraryNotFound {
		t.Skipf("this machine has an NVML library that fails otherwise: %v", err)
	}
	require.Equal(t, "nvmlInit()", de.Op)
	require.Equal(t, "NVML_LIBRARY_NOT_FOUND", de.Rule())
}
