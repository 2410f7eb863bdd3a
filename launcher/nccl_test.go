package launcher

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/rankgate/rankgate/verdict"
	"github.com/stretchr/testify/require"
)

const fixtureDir = "../testdata/fixtures/nccl"

// Real NCCL logs (testdata/fixtures/README.md).
var (
	fixture10 = filepath.Join(fixtureDir, "10_nccl_p4d_4pods-x-1gpu_same-node_NET-Libfabric.txt")
	fixture20 = filepath.Join(fixtureDir, "20_cuda-invalid-device-ordinal_multiple-MIG-visible_mlcommons442.txt")
	fixture40 = filepath.Join(fixtureDir, "40_nccl-errors_h200_4-ranks-on-1g.35gb-same-gpu_nccl1716.txt")
)

func readFixture(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

// feed runs data through a monitor the way a pump does, in chunks.
func feed(m *monitor, data []byte, chunk int) {
	s := newLineScanner(m.line)
	var seen int64
	for off := 0; off < len(data); off += chunk {
		end := min(off+chunk, len(data))
		s.scan(data[off:end], m.mode(seen))
		seen += int64(end - off)
	}
	s.flush(m.mode(seen))
}

func drainEvents(m *monitor) []event {
	var out []event
	for {
		select {
		case ev := <-m.events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func TestProcKeyAndTransportName(t *testing.T) {
	tests := []struct {
		line, key, via string
	}{
		{"llama-3-8b-node-0-0:188:585 [0] NCCL INFO ncclCommInitRankConfig comm 0x556d504b7460 rank 0 nranks 4 - Init COMPLETE", "llama-3-8b-node-0-0:188", ""},
		{"llama-3-8b-node-0-0:188:709 [0] NCCL INFO Channel 00/0 : 3[0] -> 0[0] [receive] via NET/Libfabric/0/GDRDMA", "llama-3-8b-node-0-0:188", "NET/Libfabric/0/GDRDMA"},
		{"[2026-01-02 10:00:00] gpu-7:12:13 [3] init.cc:1057 (initTransportsRank) NCCL WARN Multiple Ranks are using the same GPU", "gpu-7:12", ""},
		{"node:5:6 [1] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct", "node:5", "SHM/direct/direct"},
		{"[rank0]: no nccl prefix here", "", ""},
	}
	for _, tt := range tests {
		require.Equal(t, tt.key, string(procKey([]byte(tt.line))), tt.line)
		require.Equal(t, tt.via, string(transportName([]byte(tt.line))), tt.line)
	}
}

func TestClassifyTransport(t *testing.T) {
	for name, want := range map[string]Transport{
		"P2P/IPC":                TransportP2P,
		"P2P/CUMEM/read":         TransportP2P,
		"P2P/direct":             TransportP2P,
		"NVLS":                   TransportP2P,
		"SHM/direct/direct":      TransportSHM,
		"NET/Socket/0":           TransportNet,
		"NET/IB/0/GDRDMA":        TransportNet,
		"NET/Libfabric/0/GDRDMA": TransportNet,
		"COLLNET/IB/0":           TransportNet,
		"something":              TransportUnknown,
	} {
		require.Equal(t, want, classifyTransport([]byte(name)), name)
	}
}

func TestMatchFatalOnRealLines(t *testing.T) {
	fatal := []string{
		// fixture 40 (NVIDIA/nccl#1716), fixture 20 (mlcommons/training#442)
		`Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this.`,
		`NCCL_NVLS_ENABLE has been set to "1" and communicator has multiple ranks using the same NVML device`,
		`RuntimeError: cuda runtime error (101) : invalid device ordinal at /opt/pytorch/pytorch/torch/csrc/cuda/Module.cpp:33`,
		// NCCL's WARN format (src/debug.cc) and error strings.
		`node:1:2 [1] init.cc:974 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000`,
		`torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3`,
		`node:1:2 [0] transport.cc:1 NCCL WARN Cuda failure 'out of memory'`,
	}
	for _, l := range fatal {
		require.NotNil(t, matchFatal([]byte(l)), l)
	}
	harmless := []string{
		`node:1:2 [0] NCCL INFO Call to connect returned Connection refused, retrying`,
		`node:1:2 [0] NCCL INFO NET/Plugin: Failed to find ncclCollNetPlugin_v10 symbol.`,
		`node:1:2 [0] NCCL INFO cudaDev 0 nvmlDev 0 busId 59000 invalid device ordinal in an INFO line`,
		`step 100 | loss 1.0`,
	}
	for _, l := range harmless {
		m := newMonitor(nil, 1, TransportUnknown, false, false)
		m.line([]byte(l))
		require.Empty(t, drainEvents(m), l)
	}
}

func TestMonitorFixture10SeparatePodsFallBackToNetwork(t *testing.T) {
	m := newMonitor(nil, 1, TransportP2P, false, false)
	feed(m, readFixture(t, fixture10), 333)
	evs := drainEvents(m)
	require.Len(t, evs, 2)
	require.Equal(t, evReady, evs[0].kind, "Init COMPLETE comes before the channel lines")
	require.Equal(t, evFallback, evs[1].kind)
	f := evs[1].finding
	require.Equal(t, verdict.RuleTransportFallback, f.Rule)
	require.Equal(t, verdict.SeverityWarn, f.Severity)
	require.Contains(t, f.Message, "NET/Libfabric/0/GDRDMA")
	require.Contains(t, f.Remediation, "nNodes 4, localRanks 1")

	s := m.snapshot()
	require.Equal(t, []string{"rank 0/4 (llama-3-8b-node-0-0:188)"}, s.completed)
	require.Equal(t, 4, s.nNodes)
	require.Equal(t, 1, s.localRanks)
	require.Equal(t, []string{"NET/Libfabric/0/GDRDMA x24 (net)"}, s.transports)
	require.Len(t, s.last, ringSize)
}

func TestMonitorDerivedExpectationNeedsOneNode(t *testing.T) {
	// Derived from the preflight, P2P is expected only where NCCL sees a
	// single node: fixture 10 has nNodes 4, so no finding.
	m := newMonitor(nil, 1, TransportP2P, true, true)
	feed(m, readFixture(t, fixture10), 4096)
	for _, ev := range drainEvents(m) {
		require.NotEqual(t, evFallback, ev.kind)
	}
	// The same lines with nNodes 1: the derived expectation applies.
	m = newMonitor(nil, 1, TransportP2P, true, true)
	feed(m, []byte("h:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\n"+
		"h:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct\n"), 4096)
	evs := drainEvents(m)
	require.Len(t, evs, 1)
	require.Equal(t, verdict.SeverityFail, evs[0].finding.Severity)
	require.Contains(t, evs[0].finding.Message, "derived from the preflight")
}

func TestMonitorFatalFixtures(t *testing.T) {
	for _, path := range []string{fixture20, fixture40} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			m := newMonitor(nil, 1, TransportUnknown, false, false)
			feed(m, readFixture(t, path), 17)
			evs := drainEvents(m)
			require.Len(t, evs, 1, "one fatal event, however many fatal lines")
			require.Equal(t, evFatal, evs[0].kind)
			require.Equal(t, verdict.RuleNCCLFatal, evs[0].finding.Rule)
			require.NotEmpty(t, evs[0].finding.Remediation)
		})
	}
}

func TestMonitorFatalIgnoredOnceReady(t *testing.T) {
	m := newMonitor(nil, 1, TransportUnknown, false, false)
	feed(m, []byte("h:1:2 [0] NCCL INFO x rank 0 nranks 1 - Init COMPLETE\n"), 4096)
	feed(m, readFixture(t, fixture40), 4096)
	evs := drainEvents(m)
	require.Len(t, evs, 1)
	require.Equal(t, evReady, evs[0].kind)
}

func TestMonitorReadinessCountsProcesses(t *testing.T) {
	lines := "h:10:11 [0] NCCL INFO ncclCommInitRankConfig comm 0x1 rank 0 nranks 3 cudaDev 0 - Init START\n" +
		"h:10:11 [0] NCCL INFO ncclCommInitRankConfig comm 0x1 rank 0 nranks 3 cudaDev 0 - Init COMPLETE\n" +
		// the same process again (a split communicator) does not count twice
		"h:10:12 [0] NCCL INFO ncclCommSplit comm 0x2 rank 0 nranks 1 parent 0x1 - Init COMPLETE\n" +
		"h:20:21 [1] NCCL INFO [Rank 1] ncclCommInitRankConfig comm 0x1 rank 1 nranks 3 cudaDev 1 - Init START\n" +
		"h:30:31 [2] NCCL INFO ncclCommInitRankConfig comm 0x1 rank 2 nranks 3 cudaDev 2 - Init COMPLETE\n"
	m := newMonitor(nil, 3, TransportUnknown, false, false)
	feed(m, []byte(lines), 50)
	require.False(t, m.ready.Load())
	s := m.snapshot()
	require.Equal(t, []string{"rank 0/3 (h:10)", "rank 2/3 (h:30)"}, s.completed)
	require.Equal(t, []string{"rank 1/3 (h:20)"}, s.pending)
	feed(m, []byte("h:20:21 [1] NCCL INFO ncclCommInitRankConfig comm 0x1 rank 1 nranks 3 cudaDev 1 - Init COMPLETE\n"), 50)
	require.True(t, m.ready.Load())
}

func TestMonitorReadyPattern(t *testing.T) {
	for _, re := range []string{`^Epoch 1/`, `(?i)epoch \d+/`, `Epoch 1/`} {
		m := newMonitor(regexp.MustCompile(re), 4, TransportUnknown, false, false)
		feed(m, []byte("loading\nEpoch 1/10 step 0\n"), 5)
		require.True(t, m.ready.Load(), re)
	}
}

func TestNCCLHidden(t *testing.T) {
	tests := []struct {
		level, subsys, file string
		hidden              bool
	}{
		{"INFO", "INIT", "", false},
		{"info", "", "", false},
		{"TRACE", "ALL", "", false},
		{"INFO", "INIT,NET", "/dev/stdout", false},
		{"INFO", "^NET", "", false},
		{"WARN", "", "", true},
		{"", "INIT", "", true},
		{"INFO", "NET,GRAPH", "", true},
		{"INFO", "^INIT", "", true},
		{"INFO", "INIT", "/tmp/nccl.%h.%p", true},
	}
	for _, tt := range tests {
		require.Equal(t, tt.hidden, ncclHidden(tt.level, tt.subsys, tt.file) != "", "%+v", tt)
	}
}

func TestParseTransport(t *testing.T) {
	for in, want := range map[string]Transport{"p2p": TransportP2P, "SHM": TransportSHM, " net ": TransportNet, "": TransportUnknown} {
		got, err := ParseTransport(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := ParseTransport("nvlink")
	require.Error(t, err)
}

func TestDeriveTransport(t *testing.T) {
	gpu := func(id string) verdict.DeviceSummary { return verdict.DeviceSummary{ID: id, Kind: "gpu"} }
	mig := verdict.DeviceSummary{ID: "MIG-1", Kind: "mig"}
	require.Equal(t, TransportUnknown, DeriveTransport(nil))
	require.Equal(t, TransportUnknown, DeriveTransport(&verdict.Report{Devices: []verdict.DeviceSummary{gpu("a")}}))
	require.Equal(t, TransportP2P, DeriveTransport(&verdict.Report{Devices: []verdict.DeviceSummary{gpu("a"), gpu("b")}}))
	require.Equal(t, TransportUnknown, DeriveTransport(&verdict.Report{Devices: []verdict.DeviceSummary{gpu("a"), mig}}))
	require.Equal(t, TransportUnknown, DeriveTransport(&verdict.Report{
		Devices:  []verdict.DeviceSummary{gpu("a"), gpu("b")},
		Findings: []verdict.Finding{{Rule: verdict.RuleP2PUnsupported}},
	}))
}
