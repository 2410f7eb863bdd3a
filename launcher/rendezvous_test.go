package launcher

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

// Real logs (sources in testdata/nccl/README.md): /dev/shm exhaustion ends
// the run at its first line with the /dev/shm fix, before any init.cc
// trace; torch's rendezvous failures end it with RENDEZVOUS_FAILED naming
// the address.
func TestMonitorShmAndRendezvousRealLogs(t *testing.T) {
	dir := filepath.Join("testdata", "nccl")
	tests := []struct {
		file, rule, line, inMsg, fix string
	}{
		{"ncclt166_shm-failed-to-extend.txt", verdict.RuleNCCLFatal, "NCCL WARN Error: failed to extend /dev/shm/nccl-fjwOOB", "", "emptyDir"},
		{"pytorchci490_shm-no-space-timestamped.txt", verdict.RuleNCCLFatal, "failed to extend /dev/shm/nccl-WU88OE", "", "medium: Memory"},
		{"vllm19670_distnetworkerror-timed-out.txt", verdict.RuleRendezvousFailed, "DistNetworkError: The client socket has timed out", "MASTER_ADDR:MASTER_PORT 172.17.0.9:46229", "MASTER_PORT"},
		{"grl27_c10d-failed-to-connect-any-address.txt", verdict.RuleRendezvousFailed, "[E socket.cpp:610] [c10d] The client socket has failed to connect to any network address of (05, 40323)", "05:40323", "MASTER_ADDR resolves"},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			for _, chunk := range []int{61, 4096} {
				m := newMonitor(nil, 8, TransportUnknown, false, false)
				feed(m, readFixture(t, filepath.Join(dir, tc.file)), chunk)
				evs := drainEvents(m)
				require.Len(t, evs, 1, "one fatal event")
				require.Equal(t, evFatal, evs[0].kind)
				f := evs[0].finding
				require.Equal(t, tc.rule, f.Rule)
				require.Contains(t, f.Message, tc.line)
				require.Contains(t, f.Message, tc.inMsg)
				require.Contains(t, f.Remediation, tc.fix)
			}
		})
	}
}

// The lines that are not fatal: torch retrying, NCCL retrying.
func TestRendezvousRetriesAreNotFatal(t *testing.T) {
	for line, fatal := range map[string]bool{
		"[W socket.cpp:663] [c10d] The client socket has failed to connect to [master-0]:29500 (errno: 111 - Connection refused).":              false,
		"[W socket.cpp:558] [c10d] The client socket has failed to connect to [localhost]:29500 (errno: 99 - Cannot assign requested address).": false,
		"h:1:2 [0] NCCL INFO Call to connect returned Connection refused, retrying":                                                             false,
		"[E socket.cpp:957] [c10d] The client socket has failed to connect to [master-0]:29500 (errno: 111 - Connection refused).":              true,
		"torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.":                                true,
		"h:1:2 [0] NCCL INFO transport/shm.cc:114 -> 2":                                                                                         true,
	} {
		m := newMonitor(nil, 1, TransportUnknown, false, false)
		feed(m, []byte(line+"\n"), 4096)
		evs := drainEvents(m)
		require.Equal(t, fatal, len(evs) == 1 && evs[0].kind == evFatal, line)
	}
	require.Equal(t, "[::]:98", rendezvousAddress([]byte("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. The server socket has failed to bind to [::]:98 (errno: 13 - Permission denied).")))
	m := newMonitor(nil, 1, TransportUnknown, false, false)
	feed(m, []byte("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. The server socket has failed to bind to [::]:98 (errno: 13 - Permission denied). The server socket has failed to bind to 0.0.0.0:98 (errno: 13 - Permission denied).\n"), 4096)
	evs := drainEvents(m)
	require.Len(t, evs, 1)
	require.Contains(t, evs[0].finding.Remediation, "free MASTER_PORT", "Time-LLM#158: the server side cannot listen")
	require.Equal(t, "master-0:29500", rendezvousAddress([]byte("[E socket.cpp:957] [c10d] The client socket has failed to connect to [master-0]:29500 (errno: 111 - Connection refused).")))
}
