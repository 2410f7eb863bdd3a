package sources

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

func TestNewChoosesTheSource(t *testing.T) {
	src, err := New(Options{Sample: "a100-full"})
	require.NoError(t, err)
	inv, err := src.Inventory(context.Background())
	require.NoError(t, err)
	require.Equal(t, "sample:a100-full", inv.Source)
	require.Len(t, inv.GPUs, 8)

	src, err = New(Options{Files: []string{"../../configs/samples/h100-mig.json"}, Catalog: topology.DefaultCatalog()})
	require.NoError(t, err)
	inv, err = src.Inventory(context.Background())
	require.NoError(t, err)
	require.Len(t, inv.GPUs, 2)

	_, err = New(Options{Sample: "a100-full", Files: []string{"x"}})
	require.Equal(t, verdict.ExitUsage, verdict.Code(err))
	require.ErrorContains(t, err, "exclude")
	_, err = New(Options{Sample: "nope"})
	require.Equal(t, verdict.ExitUsage, verdict.Code(err))
	require.ErrorContains(t, err, "unknown sample")

	src, err = New(Options{})
	require.NoError(t, err)
	require.IsType(t, nodeSource{}, src, "with neither files nor a sample: NVML")
}
