package preflight_test

import (
	"context"
	"flag"
	"os"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/topology/nvmlsource"
	"github.com/rankgate/rankgate/topology/nvmlsource/nvmltest"
	"github.com/rankgate/rankgate/verdict"
)

// splitDGXA100 is an 8-GPU DGX A100 mock with every GPU split into seven 1g.5gb
// instances: 56 MIG devices.
func splitDGXA100(tb testing.TB) *nvmltest.Server {
	s := nvmltest.NewServer(tb, "dgxa100")
	for g := 0; g < s.GPUCount(); g++ {
		s.CreateMIG(g, "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb")
	}
	return s
}

// BenchmarkPreflight56MIG is a whole rank preflight on the mock: NVML
// discovery of 8 GPUs and 56 MIG devices, then the rank rules for one MIG
// device. The mock answers from memory, so ns/op is rankgate's own CPU plus
// the mock's (cheap) function calls; nvml-calls/op counts NVML calls.
func BenchmarkPreflight56MIG(b *testing.B) {
	s := splitDGXA100(b)
	var calls atomic.Int64
	src := nvmlsource.New(s.Interface(), nvmlsource.WithCallCounter(&calls))
	cat, drivers := topology.DefaultCatalog(), preflight.DefaultDriverTable()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		inv, err := src.Inventory(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		r := preflight.RankRules(preflight.RankInput{Inventory: inv, Allocation: topology.Allocation{From: "bench", Refs: []string{"3:4"}},
			ExpectProfile: "1g.5gb", Catalog: cat, Drivers: drivers})
		if r.Verdict != verdict.VerdictPass {
			b.Fatalf("verdict %s: %+v", r.Verdict, r.Findings)
		}
	}
	b.ReportMetric(float64(calls.Load())/float64(b.N), "nvml-calls/op")
}

// BenchmarkRankRules56MIG is the rules alone, over all 56 devices (the
// worst case: every rule walks every device).
func BenchmarkRankRules56MIG(b *testing.B) {
	s := splitDGXA100(b)
	inv, err := nvmlsource.New(s.Interface()).Inventory(context.Background())
	require.NoError(b, err)
	cat, drivers := topology.DefaultCatalog(), preflight.DefaultDriverTable()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := preflight.RankRules(preflight.RankInput{Inventory: inv, Allocation: topology.Allocation{All: true},
			ExpectProfile: "1g.5gb", Catalog: cat, Drivers: drivers})
		if !r.Failed() {
			b.Fatal("56 MIG devices in one rank must fail")
		}
	}
}

// TestPreflightOnSplitMock: the whole path on the mock gives the verdicts a
// person expects.
func TestPreflightOnSplitMock(t *testing.T) {
	s := splitDGXA100(t)
	inv, err := nvmlsource.New(s.Interface()).Inventory(context.Background())
	require.NoError(t, err)
	require.Len(t, inv.AllDevices(), 56)
	in := preflight.RankInput{Inventory: inv, Catalog: topology.DefaultCatalog(), Drivers: preflight.DefaultDriverTable(), ExpectProfile: "1g.5gb"}
	in.Allocation = topology.Allocation{Refs: []string{"0:0"}}
	require.Equal(t, verdict.VerdictPass, preflight.RankRules(in).Verdict)
	in.Allocation = topology.Allocation{Refs: []string{"0:0", "5:3"}}
	r := preflight.RankRules(in)
	require.Equal(t, verdict.VerdictFail, r.Verdict)
	require.ElementsMatch(t, []string{"MIG_SPANS_GPUS", "MIG_MULTIPLE_PER_PROCESS"}, r.RuleIDs())
	in.ExpectProfile = "2g.20gb"
	in.Allocation = topology.Allocation{Refs: []string{"0:0"}}
	require.Equal(t, verdict.RuleProfileMismatch, preflight.RankRules(in).Findings[0].Rule)
}

var writeSnapshot = flag.String("write-56mig-snapshot", "", "write the 56-MIG mock node as a snapshot to this file (for the RSS measurement in `make bench`)")

// TestWrite56MIGSnapshot regenerates testdata/dgxa100-56mig.json from the
// mock when asked; otherwise it checks that the committed file still
// decodes and holds 56 MIG devices.
func TestWrite56MIGSnapshot(t *testing.T) {
	if *writeSnapshot != "" {
		inv, err := nvmlsource.New(splitDGXA100(t).Interface()).Inventory(context.Background())
		require.NoError(t, err)
		inv.Hostname = "mock-dgxa100-56mig"
		b, err := topology.EncodeSnapshot(inv)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(*writeSnapshot, b, 0o644))
	}
	b, err := os.ReadFile("testdata/dgxa100-56mig.json")
	require.NoError(t, err)
	inv, err := topology.DecodeSnapshot("testdata/dgxa100-56mig.json", b)
	require.NoError(t, err)
	require.Len(t, inv.AllDevices(), 56)
}
