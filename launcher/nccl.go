package launcher

import (
	"bytes"
	"fmt"
	"strings"
)

// Transport is the class of path NCCL connects two ranks over, slowest
// first: the network (NET/Socket, NET/IB, plugins, CollNet), shared host
// memory (SHM), direct GPU access (P2P over NVLink or PCIe, NVLS).
type Transport string

// Transport classes.
const (
	TransportUnknown Transport = ""
	TransportNet     Transport = "net"
	TransportSHM     Transport = "shm"
	TransportP2P     Transport = "p2p"
)

func (t Transport) speed() int {
	switch t {
	case TransportNet:
		return 1
	case TransportSHM:
		return 2
	case TransportP2P:
		return 3
	}
	return 0
}

// ParseTransport reads a --expect-transport value.
func ParseTransport(s string) (Transport, error) {
	switch t := Transport(strings.ToLower(strings.TrimSpace(s))); t {
	case TransportUnknown, TransportNet, TransportSHM, TransportP2P:
		return t, nil
	}
	return "", fmt.Errorf("transport %q: want p2p, shm or net", s)
}

// classifyTransport maps what follows "via " in a channel line to its class.
func classifyTransport(name []byte) Transport {
	switch {
	case bytes.HasPrefix(name, []byte("P2P")), bytes.HasPrefix(name, []byte("NVLS")):
		return TransportP2P
	case bytes.HasPrefix(name, []byte("SHM")):
		return TransportSHM
	case bytes.HasPrefix(name, []byte("NET")), bytes.HasPrefix(name, []byte("COLLNET")):
		return TransportNet
	}
	return TransportUnknown
}

// fatalPattern is a line that means NCCL init (or the rank's CUDA set-up)
// has failed and will not recover: waiting for the init deadline would
// only waste the time. The strings are NCCL's own (src/init.cc,
// src/include/checks.h, ncclGetErrorString) and PyTorch's wrappers of them.
type fatalPattern struct {
	match       []byte
	remediation string
	// mig and noMIG replace remediation when the rank's devices are known
	// to be MIG instances, or known to be full GPUs: advice about MIG is
	// noise on a node without it.
	mig, noMIG string
	// generic: the line says only that NCCL failed (PyTorch's wrappers);
	// the reason also quotes the NCCL WARN line before it, which names
	// the rank's host, process and device.
	generic bool
}

// fix is the remediation for a rank whose devices are MIG instances
// (migYes), full GPUs (migNo), or unknown.
func (p *fatalPattern) fix(mig migKnown) string {
	switch {
	case mig == migYes && p.mig != "":
		return p.mig
	case mig == migNo && p.noMIG != "":
		return p.noMIG
	}
	return p.remediation
}

// migKnown says whether the rank's devices are MIG instances.
type migKnown uint8

const (
	migUnknown migKnown = iota
	migYes
	migNo
)

const (
	fixSameGPU = "two ranks of the job use the same GPU: give every local process its own GPU " +
		"(torchrun --nproc-per-node must not exceed the devices; each process must call torch.cuda.set_device(LOCAL_RANK))"
	fixPeerUnreachable = "NCCL could not reach another rank over TCP (bootstrap or proxy connection): check that the pods reach each other on all ports " +
		"(NetworkPolicy, security groups, host firewall), that NCCL_SOCKET_IFNAME names an interface the peers can reach (the same on every node, not lo or docker0), " +
		"and that MASTER_ADDR resolves to the rank-0 pod"
	fixPeerDied = "another rank closed its connection during init, usually because it failed first: read the other ranks' logs for their first NCCL WARN or error; " +
		"if none failed, check the network between the pods (NetworkPolicy, NCCL_SOCKET_IFNAME)"
	fixFabricManager = "CUDA error 802 (cudaErrorSystemNotReady): on NVSwitch systems (HGX/DGX A100, H100, H200, B200) CUDA waits for the NVIDIA Fabric Manager, " +
		"which is not running on this node: start it and keep it enabled across reboots (systemctl enable --now nvidia-fabricmanager; its version must equal the driver's; " +
		"journalctl -u nvidia-fabricmanager says why it stopped; with the GPU Operator the driver container runs it), then check that `nvidia-smi -q` shows Fabric State: Completed"
)

var fatalPatterns = []fatalPattern{
	// NCCL < 2.30: two ranks of one communicator on the same GPU (two
	// processes given the same GPU, or MIG instances of one GPU without
	// NCCL's MIG support).
	{match: []byte("Duplicate GPU detected"), remediation: fixSameGPU + "; " +
		"ranks on MIG instances of one GPU need NCCL 2.30+ with NCCL_MULTI_RANK_GPU_ENABLE=1",
		noMIG: fixSameGPU,
		mig:   "NCCL before 2.30 sees ranks on MIG instances of one GPU as ranks on the same GPU: use NCCL 2.30+ with NCCL_MULTI_RANK_GPU_ENABLE=1, or give the ranks instances of different GPUs"},
	// NCCL >= 2.30 (NVIDIA/nccl#1716): same situation.
	{match: []byte("Multiple Ranks are using the same GPU"), remediation: "ranks share a GPU or a MIG partition: give each rank its own device, or, for ranks on MIG instances of one GPU, " +
		"set NCCL_MULTI_RANK_GPU_ENABLE=1 (and NCCL_NVLS_ENABLE=0)",
		noMIG: fixSameGPU,
		mig:   "ranks on MIG instances of one GPU: set NCCL_MULTI_RANK_GPU_ENABLE=1 (and NCCL_NVLS_ENABLE=0), or give each rank an instance of another GPU; two ranks on the same MIG instance are never allowed"},
	{match: []byte("multiple ranks using the same NVML device"), remediation: "NVLS cannot work with several ranks on one physical GPU (MIG): set NCCL_NVLS_ENABLE=0, and NCCL_MULTI_RANK_GPU_ENABLE=1 for ranks on MIG instances of one GPU",
		noMIG: "NVLS cannot work with several ranks on one GPU: give every rank its own GPU, or set NCCL_NVLS_ENABLE=0"},
	{match: []byte("Mismatched NCCL version detected"), remediation: "every rank must run the same NCCL version: use one container image for all replicas"},
	// CUDA error 802 (nccl-tests#264, pytorch#35710,
	// aws-deep-learning-ami#33): NVSwitch systems without Fabric Manager.
	// Before the generic Cuda failure below.
	{match: []byte("system not yet initialized"), remediation: fixFabricManager},
	{match: []byte("cudaErrorSystemNotReady"), remediation: fixFabricManager},
	{match: []byte("NCCL WARN Cuda failure"), remediation: "a CUDA call inside NCCL failed: check the device with `rankgate preflight` and the node's dmesg for Xid errors"},
	// /dev/shm too small for the SHM transport's segments
	// (NVIDIA/nccl-tests#166, pytorch/ci-infra#490, NVIDIA/nccl#1683).
	{match: []byte("failed to extend /dev/shm"), remediation: fixShm},
	{match: []byte("Error while creating shared memory segment"), remediation: fixShm},
	{match: []byte("no socket interface found"), remediation: "NCCL found no usable network interface: check NCCL_SOCKET_IFNAME against the pod's interfaces"},
	{match: []byte("No usable listening interface found"), remediation: "NCCL found no usable network interface: check NCCL_SOCKET_IFNAME against the pod's interfaces"},
	// Bootstrap and socket failures that end init with an error code
	// (nccl#975, nccl-tests#166, nccl#1235, pytorch-lightning#14986).
	// NCCL's retries ("Call to connect returned Connection refused,
	// retrying") are not fatal.
	{match: []byte("socketStartConnect: Connect to"), remediation: fixPeerUnreachable},
	{match: []byte("socketStartConnect: exceeded retries"), remediation: fixPeerUnreachable},
	{match: []byte("Failed to execute operation Connect from rank"), remediation: fixPeerUnreachable},
	{match: []byte("socketProgress: Connection closed by remote peer"), remediation: fixPeerDied},
	{match: []byte("Socket recv failed while polling"), remediation: fixPeerDied},
	{match: []byte("has already checked in"), remediation: "two processes joined the bootstrap as the same rank: another job or a restarted rank uses the same MASTER_ADDR:MASTER_PORT; " +
		"give each job its own port and let torchrun (or the operator) assign ranks"},
	{match: []byte("mismatch in rank count"), remediation: "ranks disagree on the world size: every rank must start with the same WORLD_SIZE / --nnodes x --nproc-per-node"},
	{match: []byte("unhandled cuda error"), remediation: "a CUDA call failed during NCCL init; the NCCL WARN lines above name it", generic: true},
	{match: []byte("ncclUnhandledCudaError"), remediation: "a CUDA call failed during NCCL init; the NCCL WARN lines above name it", generic: true},
	{match: []byte("unhandled system error"), remediation: "a system call failed during NCCL init (sockets, shared memory, InfiniBand); the NCCL WARN lines above name it", generic: true},
	{match: []byte("ncclSystemError"), remediation: "a system call failed during NCCL init (sockets, shared memory, InfiniBand); the NCCL WARN lines above name it", generic: true},
	{match: []byte("internal error - please report"), remediation: "NCCL hit an internal error; the NCCL WARN lines above name it", generic: true},
	{match: []byte("ncclInternalError"), remediation: "NCCL hit an internal error; the NCCL WARN lines above name it", generic: true},
	{match: []byte("ncclInvalidUsage"), remediation: "NCCL refused the set-up (often ranks sharing a GPU); the NCCL WARN lines above name it", generic: true},
	{match: []byte("ncclInvalidArgument"), remediation: "NCCL refused an argument; the NCCL WARN lines above name it", generic: true},
	{match: []byte("remote process exited or there was a network error"), remediation: fixPeerDied, generic: true},
	{match: []byte("ncclRemoteError"), remediation: fixPeerDied, generic: true},
	// PyTorch's wrapper of any NCCL error ("torch.distributed.DistBackendError:
	// NCCL error in: ProcessGroupNCCL.cpp:1207, internal error, NCCL version
	// 2.14.3", codefuse-ai/MFTCoder#31), after the specific strings above.
	{match: []byte("DistBackendError: NCCL error"), remediation: "PyTorch's NCCL process group failed to initialise; the NCCL WARN line quoted names the cause (with NCCL_DEBUG=INFO, PyTorch's 'Last error:' line too)", generic: true},
	// CUDA enumerates one MIG device per process (pytorch/pytorch#130181,
	// mlcommons/training#442): the second local rank's set_device fails.
	{match: []byte("invalid device ordinal"), remediation: "the process asked for a GPU it cannot see; with MIG a process sees only one MIG device, " +
		"so start one process per MIG device with its own CUDA_VISIBLE_DEVICES=<MIG UUID>, and keep --nproc-per-node within the devices",
		noMIG: "the process asked for a GPU it cannot see: keep --nproc-per-node within the rank's GPUs, map LOCAL_RANK to a visible device, and check CUDA_VISIBLE_DEVICES",
		mig:   "with MIG a process sees only one MIG device: start one process per MIG device with its own CUDA_VISIBLE_DEVICES=<MIG UUID>, and keep --nproc-per-node within the devices"},
}

// initTraceFatal reads NCCL's error trace in an INFO line: "NCCL INFO
// bootstrap.cc:270 -> 2" or "init.cc:1350 -> 2" means bootstrap or
// communicator init returned that error code (nccl#975), which ends init.
// 7 (ncclInProgress) is not an error. It returns the code's remediation,
// or "".
func initTraceFatal(msg []byte) string {
	if !bytes.HasPrefix(msg, []byte("bootstrap.cc:")) && !bytes.HasPrefix(msg, []byte("init.cc:")) {
		return ""
	}
	i := bytes.Index(msg, []byte(" -> "))
	if i < 0 {
		return ""
	}
	switch code := atoi(msg[i+4:]); code {
	case 1:
		return "NCCL init ended with ncclUnhandledCudaError (1): a CUDA call failed; the NCCL WARN line quoted names it"
	case 2:
		return "NCCL init ended with ncclSystemError (2), in bootstrap or socket set-up: " + fixPeerUnreachable
	case 3:
		return "NCCL init ended with ncclInternalError (3); the NCCL WARN line quoted names it"
	case 4, 5:
		return fmt.Sprintf("NCCL init ended with %s (%d): NCCL refused the set-up; the NCCL WARN line quoted names it", map[int]string{4: "ncclInvalidArgument", 5: "ncclInvalidUsage"}[code], code)
	case 6:
		return "NCCL init ended with ncclRemoteError (6): " + fixPeerDied
	}
	return ""
}

// fatalAnchors find the fatal lines that carry no "NCCL": a CUDA error a
// rank hits when it asks for a device it cannot see. Such a rank fails at
// start-up, so these anchors are searched for only in the first
// fatalScanBudget bytes of each stream: searching text for words whose
// first letter is common costs more than the NCCL anchor.
var fatalAnchors = [][]byte{[]byte("device ordinal"), []byte("not yet initialized"), []byte("SystemNotReady")}

const fatalScanBudget = 64 << 20

// matchFatal finds the fatal pattern in a line that is not an NCCL INFO
// line.
func matchFatal(line []byte) *fatalPattern {
	for i := range fatalPatterns {
		p := &fatalPatterns[i]
		if bytes.Contains(line, p.match) {
			return p
		}
	}
	return nil
}

var (
	tokNCCL         = []byte("NCCL")
	tokNCCLInfo     = []byte("NCCL INFO ")
	tokNCCLWarn     = []byte("NCCL WARN ")
	tokInitComplete = []byte("Init COMPLETE")
	tokInitStart    = []byte("Init START")
	tokVia          = []byte(" via ")
	tokChannel      = []byte("Channel ")
	tokCollNet      = []byte("CollNet ")
	tokComm         = []byte("comm ")
	tokNVLSChannels = []byte(" nvls channels")
	tokNNodes       = []byte(" nNodes ")
	tokLocalRanks   = []byte(" localRanks ")
	tokRank         = []byte(" rank ")
	tokNRanks       = []byte(" nranks ")
)

// intAfter parses the decimal number that follows tok in line; -1 if none.
func intAfter(line, tok []byte) int {
	i := bytes.Index(line, tok)
	if i < 0 {
		return -1
	}
	return atoi(line[i+len(tok):])
}

// atoi parses the leading digits of b; -1 if there are none.
func atoi(b []byte) int {
	n, digits := 0, 0
	for _, c := range b {
		if c < '0' || c > '9' || digits > 9 {
			break
		}
		n = n*10 + int(c-'0')
		digits++
	}
	if digits == 0 {
		return -1
	}
	return n
}

// procKey finds the "host:pid" of an NCCL log line: NCCL prefixes every
// line with "host:pid:tid [cudaDev] " (after an optional timestamp). It
// returns nil when the line has no such prefix.
func procKey(line []byte) []byte {
	// The first " [<digits>]" ends the host:pid:tid token.
	for off := 0; ; {
		i := bytes.Index(line[off:], []byte(" ["))
		if i < 0 {
			return nil
		}
		i += off
		j := i + 2
		for j < len(line) && line[j] >= '0' && line[j] <= '9' {
			j++
		}
		if j > i+2 && j < len(line) && line[j] == ']' {
			tok := line[:i]
			if sp := bytes.LastIndexByte(tok, ' '); sp >= 0 {
				tok = tok[sp+1:]
			}
			// host:pid:tid -> host:pid
			if c := bytes.LastIndexByte(tok, ':'); c > 0 && bytes.IndexByte(tok[:c], ':') >= 0 {
				return tok[:c]
			}
			return nil
		}
		off = i + 2
	}
}

// transportName returns the word after " via " in a channel line.
func transportName(line []byte) []byte {
	i := bytes.Index(line, tokVia)
	if i < 0 {
		return nil
	}
	name := line[i+len(tokVia):]
	if sp := bytes.IndexAny(name, " \t"); sp >= 0 {
		name = name[:sp]
	}
	return name
}

// ncclHidden says why NCCL's INFO/INIT lines would not reach rankgate, or
// "" when they would.
func ncclHidden(level, subsys, file string) string {
	switch strings.ToUpper(strings.TrimSpace(level)) {
	case "INFO", "TRACE":
	case "":
		return "NCCL_DEBUG is unset (NCCL prints no INFO lines)"
	default:
		return fmt.Sprintf("NCCL_DEBUG=%s", level)
	}
	switch file {
	case "", "/dev/stdout", "/dev/stderr", "/proc/self/fd/1", "/proc/self/fd/2":
	default:
		return fmt.Sprintf("NCCL_DEBUG_FILE=%s sends NCCL's lines to a file", file)
	}
	if subsys = strings.ToUpper(strings.TrimSpace(subsys)); subsys == "" {
		return "" // NCCL's default subsystems include INIT
	}
	if strings.HasPrefix(subsys, "^") {
		for _, s := range strings.Split(subsys[1:], ",") {
			if strings.TrimSpace(s) == "INIT" || strings.TrimSpace(s) == "ALL" {
				return fmt.Sprintf("NCCL_DEBUG_SUBSYS=%s excludes INIT", subsys)
			}
		}
		return ""
	}
	for _, s := range strings.Split(subsys, ",") {
		if s = strings.TrimSpace(s); s == "INIT" || s == "ALL" {
			return ""
		}
	}
	return fmt.Sprintf("NCCL_DEBUG_SUBSYS=%s lacks INIT", subsys)
}
