package launcher

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

// Real logs of NCCL init that cannot complete (sources in
// testdata/nccl/README.md): each ends the run with the line that names the
// host, process and device, and the cause's fix.
func TestMonitorFatalRealLogs(t *testing.T) {
	dir := filepath.Join("testdata", "nccl")
	tests := []struct {
		file string
		line string // the quoted line
		fix  string // in the remediation
	}{
		{"nccl975_bootstrap-socketStartConnect.txt", "n122-246-085:12253:12399 [7] NCCL INFO bootstrap.cc:270 -> 2", "ncclSystemError (2)"},
		{"nccl-tests166_socketStartConnect-proxy.txt", "ubuntu:39964:40075 [0] misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to 10.0.0.2<45763> failed", "NCCL_SOCKET_IFNAME"},
		{"nccl1235_connection-closed-by-remote-peer.txt", "ng30903:3063025:3066048 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer", "read the other ranks' logs"},
		{"pl14986_bootstrap-root-already-checked-in.txt", "hpc-25-14:18569:18835 [0] bootstrap.cc:131 NCCL WARN Bootstrap Root : rank 1 of 8 ranks has already checked in", "MASTER_PORT"},
		{"mftcoder31_distbackenderror-last-error.txt", "torch.distributed.DistBackendError: NCCL error in:", "PyTorch's NCCL process group"},
		{"nccl-tests264_system-not-yet-initialized.txt", "Test CUDA failure common.cu:941 'system not yet initialized'", "nvidia-fabricmanager"},
		{"pytorch35710_cuda-802.txt", "cuda runtime error (802) : system not yet initialized", "Fabric Manager"},
		{"pytorch35710_bandwidthTest-802.txt", "-> system not yet initialized", "NVSwitch"},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			m := newMonitor(nil, 8, TransportUnknown, false, false)
			feed(m, readFixture(t, filepath.Join(dir, tc.file)), 61)
			evs := drainEvents(m)
			require.Len(t, evs, 1, "one fatal event")
			require.Equal(t, evFatal, evs[0].kind)
			f := evs[0].finding
			require.Equal(t, verdict.RuleNCCLFatal, f.Rule)
			require.Contains(t, f.Message, tc.line)
			require.Contains(t, f.Remediation, tc.fix)
		})
	}
}

// A generic line (PyTorch's wrapper) quotes the NCCL WARN line before it,
// which names the host, process and device (nccl#1235).
func TestMonitorGenericFatalQuotesTheWarnLine(t *testing.T) {
	m := newMonitor(nil, 1, TransportUnknown, false, false)
	feed(m, []byte("ng30903:3063028:3066152 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 6291456 bytes\n"+
		"ng30903:3063028:3066152 [3] NCCL INFO transport/p2p.cc:204 -> 1\n"+
		"torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3\n"), 4096)
	evs := drainEvents(m)
	require.Len(t, evs, 1)
	require.Contains(t, evs[0].finding.Message, "fatal line during NCCL init: torch.distributed.DistBackendError")
	require.Contains(t, evs[0].finding.Message, "NCCL said before it: ng30903:3063028:3066152 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc")
}

func TestInitTraceFatal(t *testing.T) {
	for line, fatal := range map[string]bool{
		"h:1:2 [0] NCCL INFO init.cc:1358 -> 3":                                     true,
		"h:1:2 [0] NCCL INFO bootstrap.cc:270 -> 2":                                 true,
		"h:1:2 [0] NCCL INFO init.cc:1358 -> 7":                                     false, // ncclInProgress
		"h:1:2 [0] NCCL INFO misc/socket.cc:504 -> 2 (Operation now in progress)":   false,
		"h:1:2 [0] NCCL INFO init.cc:1234 Bootstrap timings total 0.1":              false,
		"h:1:2 [0] NCCL INFO Call to connect returned Connection refused, retrying": false,
	} {
		m := newMonitor(nil, 1, TransportUnknown, false, false)
		m.line([]byte(line))
		evs := drainEvents(m)
		require.Equal(t, fatal, len(evs) == 1 && evs[0].kind == evFatal, line)
	}
}

// Remediation fits the node: no MIG advice where the rank's devices are
// full GPUs, MIG advice where they are MIG instances.
func TestFatalRemediationFitsTheNode(t *testing.T) {
	lines := map[string][]byte{
		"fixture 20":    readFixture(t, fixture20),
		"fixture 40":    readFixture(t, fixture40),
		"duplicate GPU": []byte("node:1:2 [1] init.cc:974 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000\n"),
	}
	for name, data := range lines {
		t.Run(name, func(t *testing.T) {
			fix := func(kinds []string) string {
				m := newMonitor(nil, 1, TransportUnknown, false, false)
				m.setDevices(kinds)
				feed(m, data, 4096)
				evs := drainEvents(m)
				require.Len(t, evs, 1)
				return evs[0].finding.Remediation
			}
			require.NotContains(t, fix([]string{"gpu", "gpu"}), "MIG")
			require.Contains(t, fix([]string{"mig"}), "MIG")
			require.Contains(t, fix(nil), "MIG", "unknown devices: the text covers both")
		})
	}
}

// FuzzMonitor feeds arbitrary output through the line scanner and the
// monitor: it must never panic, and send each event kind at most once.
//
//	go test ./launcher -run '^$' -fuzz FuzzMonitor -fuzztime 60s
func FuzzMonitor(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "nccl", "*.txt"))
	paths = append(paths, fixture10, fixture20, fixture40)
	for _, p := range paths {
		f.Add(readFixture(f, p), uint16(61), uint8(0))
	}
	f.Add([]byte("h:1:2 [0] NCCL INFO init.cc:1 -> 6\nh:1:2 [0] NCCL INFO x rank 0 nranks 1 - Init COMPLETE\n"), uint16(7), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint16, kind uint8) {
		m := newMonitor(nil, 2, TransportP2P, kind%2 == 0, kind%3 == 0)
		m.setDevices([][]string{nil, {"gpu"}, {"mig"}}[int(kind)%3])
		feed(m, data, int(chunk%4096)+1)
		seen := map[eventKind]int{}
		for _, ev := range drainEvents(m) {
			seen[ev.kind]++
			if seen[ev.kind] > 1 {
				t.Fatalf("event kind %d sent twice", ev.kind)
			}
		}
	})
}
