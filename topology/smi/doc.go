// Package smi builds a topology.Inventory from nvidia-smi outputs as people
// paste them into bug reports, so that `rankgate preflight` can judge a
// node it cannot reach.
//
// Outputs read (Kind, by content; Detect tells which):
//
//	nvidia-smi -L             GPUs (index, name, UUID), MIG devices (index, profile, UUID;
//	                          GI/CI IDs from legacy MIG-GPU-<uuid>/<gi>/<ci> UUIDs)
//	nvidia-smi                driver and CUDA versions, GPUs (name, bus ID, memory, persistence,
//	                          MIG mode), MIG devices (GI, CI, index, memory, SMs)
//	nvidia-smi -q             the same and pending MIG mode, UUID; MIG device blocks;
//	                          health (remapped rows, volatile uncorrectable ECC, retired
//	                          pages, reset required, clock slowdowns) and the NVLink
//	                          fabric (state, status, clique, cluster; health.go)
//	nvidia-smi -q -x          the same as -q, from XML (the DOCTYPE is ignored)
//	nvidia-smi topo -m / -mp  link level (NV#, PIX, PXB, PHB, NODE, SYS) and NVLink count per
//	                          GPU pair; NUMA node from "NUMA Affinity"; NIC rows and columns skipped
//	nvidia-smi topo -p2p X    P2P status per GPU pair, see below
//	nvidia-smi mig -lgi       GPU instances: ID, profile, placement
//	nvidia-smi mig -lci       compute instances: GI and CI IDs, profile (1c.3g.40gb for a part)
//	nvidia-smi mig -lgip      per-profile P2P support and SM count; -lgipp lines are checked only
//	nvidia-smi nvlink -s      each GPU's NVLinks, up (a speed) or down (<inactive>; nvlink.go)
//
// nvidia-smi's "Unable to determine the device handle for GPU<bus>: Unknown
// Error" (or "GPU is lost ...") line, alone or inside any output, is a lost
// GPU (Health.Lost; handle.go). In the table, ERR! cells are unknown values
// recorded in Health.ErrFields, and a "Recovery action" (-q's GPU Recovery
// Action) other than None is a required reset. Elision lines ("...",
// "[...]") in a table or nvlink -s are skipped and recorded in
// Inventory.Gaps, as is a table cut after a GPU row, whose MIG GPUs then
// have MIGDevicesUnknown (tablefaults.go).
//
// A file may hold several outputs with their command lines between them
// ("$ nvidia-smi -L", "root@node:~# nvidia-smi topo -m"); outputs of other
// commands are skipped. Outputs pasted back to back without prompt lines
// are split at each format's own header (splitOutputs). Columns that read
// N/A, [N/A], Not Supported or [Insufficient Permissions] are unknown; a
// MIG mode with an asterisk ("Disabled*") is the pending mode, the current
// one being the other. A `mig -lgip` teaches the GPU's own profiles
// (GPU.MIGProfiles), used before the catalog to name devices. Markdown fences, blank lines and "#" comment lines
// are ignored; Windows line ends and a byte-order mark are accepted. Any
// other line a parser does not understand is a *topology.InputError with
// its file and line: a wrong reading is worse than none.
//
// # Combining outputs
//
// All inputs make one inventory. GPUs are matched by UUID, then PCI bus ID,
// then index; -q and -q -x name GPUs only by bus ID, so their GPU index is
// the position in the output (or the prompt's -i list) and gives way to an
// index another output states. MIG devices are matched by index, UUID, and
// GPU/compute instance IDs; where no output numbers them (mig -lgi/-lci
// alone) they are numbered by ascending GI then CI ID, the order nvidia-smi
// lists them in. A fact that two outputs state differently (two UUIDs for
// GPU 0, two driver versions, two profiles for a MIG device) is an
// InputError naming both files and lines. A GPU with MIG devices, or named
// in a mig listing, has MIG mode enabled.
//
// Profiles missing from an output (table, -q) are inferred with the
// catalog from the GPU model, SM count and memory
// (topology.GPUModel.InferProfile); when more than one profile fits, the
// profile stays empty. The table cuts long names ("NVIDIA A100-SXM..."):
// then the family word and the memory size pick the model when only one
// fits.
//
// # P2P capabilities of topo -p2p
//
// The output does not say which capability it shows; the prompt line
// ("$ nvidia-smi topo -p2p rw") or the file name ("topo-p2p-rw.txt") must.
// r sets Link.P2PRead, w sets P2PWrite, rw sets both. n (P2P over NVLink)
// sets read and write to OK where it says OK and nothing else said
// otherwise; a "not supported" over NVLink says nothing about PCIe P2P and
// is dropped. a (atomics) and p (PCIe) have no field in the model: they are
// checked and dropped. Cells map to topology.P2PStatus by their legend
// (OK, CNS, GNS, TNS, NS; DR is P2PDisabledByRegkey; U is unknown). When
// the two directions of a pair differ, the one that is not OK is kept.
//
// # Known gaps
//
//   - -q output of selected GPUs (`-q -i 3`) pasted without its prompt line
//     is numbered from 0 unless another input gives its bus ID or UUID.
//   - MIG devices known only from mig -lgi are taken to have one compute
//     instance spanning the GPU instance (what `-cgi ... -C` creates); their
//     CI ID stays -1. A -lgi GPU instance that cannot be paired with a
//     device (several devices with unknown GI ID, counts differ) is dropped.
//   - NUMA nodes come from topo -m only; -q and -q -x carry no NUMA field in
//     the drivers seen, a "NUMA Node"/<numa_node> field is read if present.
//   - The SM count of a whole GPU, compute capability and NVLink details are
//     not in these outputs and stay unknown.
//   - Masked UUIDs ("GPU-xxxxxxxx-...", "GPU-<redacted>") read as unknown;
//     all-zero UUIDs, as some capture tools write, are kept as written.
package smi
