package launcher

import (
	"bytes"
	"strings"
)

// Failures before NCCL init that end the wait at once: torch's rendezvous
// (the TCPStore client cannot reach MASTER_ADDR:MASTER_PORT) and /dev/shm
// exhaustion (NCCL's SHM transport cannot create its segment).

const (
	fixRendezvous = "the rank could not reach torch's rendezvous store: check that the rank-0 pod (the master replica) is Running and listens on MASTER_PORT, " +
		"that MASTER_ADDR resolves to it from this pod (the job's headless Service; `getent hosts $MASTER_ADDR`), " +
		"and that no NetworkPolicy, security group or host firewall blocks the port"
	fixRendezvousListen = "rank 0 could not open torch's rendezvous store on MASTER_PORT: another process holds the port (an earlier run, another job on a hostNetwork pod) " +
		"or the port is privileged; pick a free MASTER_PORT above 1024 for the job"
	fixShm = "the pod's /dev/shm is too small for NCCL's shared-memory segments (containers get 64 MiB by default): mount a memory-backed emptyDir at /dev/shm " +
		"(volumes: [{name: dshm, emptyDir: {medium: Memory, sizeLimit: 8Gi}}], volumeMounts: [{name: dshm, mountPath: /dev/shm}]) or run with --ipc=host / --shm-size; " +
		"NCCL_SHM_DISABLE=1 avoids it at the cost of a slower path"
)

// rendezvousAnchors find torch's rendezvous lines, which carry no "NCCL".
var rendezvousAnchors = [][]byte{[]byte("DistNetworkError"), []byte("DistStoreError"), []byte("Rendezvous"), []byte("c10d"), []byte("TCPStore")}

// rendezvousFailure reports whether a line says torch's rendezvous failed
// for good: the error torch raises (DistNetworkError, DistStoreError,
// RendezvousConnectionError, "The client socket has timed out after ..."),
// or a c10d socket error line ("[E socket.cpp] ... failed to connect to
// any network address of (host, port)", "Connection refused"). Torch's
// warnings while it retries ("[W socket.cpp:...] [c10d] The client socket
// has failed to connect to ... Connection refused") are not: rank 0's
// store may not be listening yet, and torch keeps trying until its own
// timeout.
func rendezvousFailure(line []byte) bool {
	s := string(line)
	for _, e := range []string{"DistNetworkError", "DistStoreError", "RendezvousConnectionError", "RendezvousTimeoutError", "The client socket has timed out after"} {
		if strings.Contains(s, e) {
			return true
		}
	}
	torch := strings.Contains(s, "c10d") || strings.Contains(s, "TCPStore") || strings.Contains(s, "socket.cpp")
	if !torch || strings.Contains(s, "[W") {
		return false
	}
	return strings.Contains(s, "failed to connect to any network address") ||
		strings.Contains(s, "Connection refused") || strings.Contains(s, "timed out")
}

// rendezvousAddress finds the address a rendezvous line names: "(host,
// port)" after "connect to" or "address of", "[host]:port" or
// "host:port" after "connect to", or after "bind to". "" when none.
func rendezvousAddress(line []byte) string {
	s := string(line)
	for _, key := range []string{"connect to", "address of", "bind to", "listen on"} {
		i := strings.Index(s, key)
		if i < 0 {
			continue
		}
		rest := strings.TrimSpace(s[i+len(key):])
		rest = strings.TrimPrefix(rest, "any network address of")
		rest = strings.TrimSpace(rest)
		if strings.HasPrefix(rest, "(") {
			if j := strings.IndexByte(rest, ')'); j > 0 {
				host, port, ok := strings.Cut(rest[1:j], ",")
				if ok {
					return strings.TrimSpace(host) + ":" + strings.TrimSpace(port)
				}
			}
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		a := strings.TrimRight(f[0], ".,;)")
		if j := strings.IndexByte(a, ']'); strings.HasPrefix(a, "[") && j > 0 && !strings.Contains(a[1:j], ":") {
			a = a[1:j] + a[j+1:] // "[master-0]:29500"; "[::]:29500" keeps its brackets
		}
		if strings.Contains(a, ":") {
			return a
		}
	}
	return ""
}

// shmTraceFatal reads NCCL's error trace out of its shared-memory code
// ("NCCL INFO transport/shm.cc:114 -> 2"): a failure there is /dev/shm.
func shmTraceFatal(msg []byte) bool {
	if !bytes.HasPrefix(msg, []byte("transport/shm.cc:")) && !bytes.HasPrefix(msg, []byte("shm.cc:")) && !bytes.HasPrefix(msg, []byte("misc/shmutils.cc:")) {
		return false
	}
	i := bytes.Index(msg, []byte(" -> "))
	if i < 0 {
		return false
	}
	code := atoi(msg[i+4:])
	return code > 0 && code != 7
}
