package verdict

import (
	"fmt"
	"sort"
	"strings"
)

// Face is a part of rankgate that emits findings.
type Face string

// The faces that emit findings.
const (
	FacePreflight  Face = "preflight"  // rank rules: preflight, init, launch
	FaceGang       Face = "gang"       // gang rules: the controller
	FaceLaunch     Face = "launch"     // launch's own rules
	FaceDiagnose   Face = "diagnose"   // placement: diagnose and the controller
	FaceDiscovery  Face = "discovery"  // NVML discovery failures
	FaceController Face = "controller" // the controller's job-level verdicts
)

// Rule is one public rule ID with what every face needs to know of it.
type Rule struct {
	ID string
	// Severity is the rule's usual severity; Varies says it depends on the
	// case (a flag, a table entry, whether other nodes fit).
	Severity Severity
	Varies   bool
	Faces    []Face
	// Summary says in one line when the rule fires.
	Summary string
	// Remediation is the default fix; findings may give a more precise one.
	Remediation string
	// Exit is the exit code a failing finding of this rule gives when it
	// ends a launch before or during CMD's start-up; 0 means ExitFail.
	Exit int
}

// Rule IDs: a public vocabulary, like a linter's. Renaming one is a breaking
// change. Each is declared here once and registered below.
const (
	// Rank rules (preflight, init, launch).
	RuleDeviceNotFound        = "DEVICE_NOT_FOUND"
	RuleNoDevices             = "NO_DEVICES"
	RuleMIGMixedWithFull      = "MIG_MIXED_WITH_FULL"
	RuleMIGSpansGPUs          = "MIG_SPANS_GPUS"
	RuleMIGMultiplePerProcess = "MIG_MULTIPLE_PER_PROCESS"
	RuleMIGParentAllocated    = "MIG_PARENT_ALLOCATED"
	RuleProfileMismatch       = "PROFILE_MISMATCH"
	RuleProfileUnknown        = "PROFILE_UNKNOWN"
	RuleProfileHeterogeneous  = "PROFILE_HETEROGENEOUS"
	RuleMIGModePending        = "MIG_MODE_PENDING"
	RuleMIGNoInstances        = "MIG_NO_INSTANCES"
	RuleDriverKnownBad        = "DRIVER_KNOWN_BAD"
	RuleP2PUnsupported        = "P2P_UNSUPPORTED"
	RuleNVLinkDown            = "NVLINK_DOWN"
	RuleP2PUnknown            = "P2P_UNKNOWN"
	RuleLinkPathsMixed        = "LINK_PATHS_MIXED"
	RuleRankEnvironment       = "RANK_ENVIRONMENT_FAILED"
	RuleInputIncomplete       = "INPUT_INCOMPLETE"

	// Node health rank rules (preflight/health.go).
	RuleGPURemapPending        = "GPU_REMAP_PENDING"
	RuleGPURemapFailed         = "GPU_REMAP_FAILED"
	RuleGPUECCUncorrected      = "GPU_ECC_UNCORRECTED"
	RuleGPURetiredPagesPending = "GPU_RETIRED_PAGES_PENDING"
	RuleGPUResetRequired       = "GPU_RESET_REQUIRED"
	RuleGPULost                = "GPU_LOST"
	RuleGPUReadError           = "GPU_READ_ERROR"
	RuleNVLinkFabricNotReady   = "NVLINK_FABRIC_NOT_READY"
	RuleNVLinkFabricFailed     = "NVLINK_FABRIC_FAILED"
	RulePersistenceOff         = "PERSISTENCE_OFF"
	RuleClocksThrottled        = "CLOCKS_THROTTLED"

	// Gang rules (controller).
	RuleGangIncomplete        = "GANG_INCOMPLETE"
	RuleRankFailed            = "RANK_PREFLIGHT_FAILED"
	RuleGangMIGMixedWithFull  = "GANG_MIG_MIXED_WITH_FULL"
	RuleGangMIGSpansGPUs      = "GANG_MIG_SPANS_GPUS"
	RuleGangProfileMismatch   = "GANG_PROFILE_MISMATCH"
	RuleGangDriverMismatch    = "GANG_DRIVER_MISMATCH"
	RuleGangSplitPodsSameNode = "GANG_SPLIT_PODS_SAME_NODE"
	RuleGangDuplicateDevice   = "GANG_DUPLICATE_DEVICE"
	RuleGangMIGSharedGPU      = "GANG_MIG_SHARED_GPU"
	RuleGangRankUnplaceable   = "GANG_RANK_UNPLACEABLE"
	RuleGangNVLinkDomainSplit = "GANG_NVLINK_DOMAIN_SPLIT"
	RuleGangHealthMixed       = "GANG_HEALTH_MIXED"
	RuleDeviceTainted         = "DEVICE_TAINTED"
	RuleDRADevicesDisagree    = "DRA_DEVICES_DISAGREE"

	// Placement (diagnose; the controller's Pending watchdog).
	RuleSchedulable          = "SCHEDULABLE"
	RuleWaitCapacity         = "WAIT_CAPACITY"
	RuleShapeMismatch        = "SHAPE_MISMATCH"
	RuleStrategyMismatch     = "STRATEGY_MISMATCH"
	RuleMIGLayoutInvalid     = "MIG_LAYOUT_INVALID"
	RuleMIGReconfigPending   = "MIG_RECONFIG_PENDING"
	RuleMIGReconfigFailed    = "MIG_RECONFIG_FAILED"
	RuleGangTooLarge         = "GANG_TOO_LARGE"
	RuleNodeConstraints      = "NODE_CONSTRAINTS"
	RuleReconfigurable       = "RECONFIGURABLE"
	RuleMIGMultiPod          = "MIG_MULTI_POD"
	RuleDRANotJudged         = "DRA_NOT_JUDGED"
	RuleNodeLabelsUnreadable = "NODE_LABELS_UNREADABLE"
	RuleDRADeviceUnhealthy   = "DRA_DEVICE_UNHEALTHY"

	// The controller's Pending watchdog.
	RulePendingTimeout = "PENDING_TIMEOUT"

	// Admission (the controller's validating webhook): a job's resource
	// claims against the cluster's DeviceClasses and published devices.
	RuleDRAClaimUnmatched = "DRA_CLAIM_UNMATCHED"
	RuleDRAMIGMaySpanGPUs = "DRA_MIG_MAY_SPAN_GPUS"

	// launch.
	RuleRendezvousFailed    = "RENDEZVOUS_FAILED"
	RuleNCCLInitTimeout     = "NCCL_INIT_TIMEOUT"
	RuleNCCLFatal           = "NCCL_FATAL"
	RuleTransportFallback   = "TRANSPORT_FALLBACK"
	RuleNprocExceedsDevices = "NPROC_EXCEEDS_DEVICES"
	RuleHostUnreachable     = "HOST_UNREACHABLE"
	RuleHostfileSlots       = "HOSTFILE_SLOTS"
	RuleHostfileInvalid     = "HOSTFILE_INVALID"
	RuleNCCLDebugHidden     = "NCCL_DEBUG_HIDDEN"

	// NCCL settings against the allocation (preflight/ncclenv): the
	// webhook and diagnose on pod templates, the controller on the gang,
	// launch and preflight --env-file on one rank.
	RuleNCCLMIGVersion          = "NCCL_MIG_VERSION"
	RuleNCCLMultiRankGPU        = "NCCL_MULTI_RANK_GPU_DISABLED"
	RuleNCCLNVLSOnMIG           = "NCCL_NVLS_ON_MIG"
	RuleNCCLNVLSNoNVSwitch      = "NCCL_NVLS_NO_NVSWITCH"
	RuleNCCLMNNVLNoDomain       = "NCCL_MNNVL_NO_DOMAIN"
	RuleNCCLSHMDisabledMIG      = "NCCL_SHM_DISABLED_MIG"
	RuleNCCLP2PDisabledNVLink   = "NCCL_P2P_DISABLED_NVLINK"
	RuleNCCLIgnoreNetMismatch   = "NCCL_NET_MISMATCH_IGNORED"
	RuleNCCLSettingsDiffer      = "NCCL_SETTINGS_DIFFER"
	RuleNCCLSocketIfnameMissing = "NCCL_SOCKET_IFNAME_MISSING"
	RuleNCCLIBHCAMissing        = "NCCL_IB_HCA_MISSING"
	RuleVisibleDevicesMismatch  = "VISIBLE_DEVICES_MISMATCH"
)

// NVML discovery classes. A discovery failure's rule ID is NVMLRule(class).
const (
	ClassDriverNotLoaded      = "DRIVER_NOT_LOADED"
	ClassLibraryNotFound      = "LIBRARY_NOT_FOUND"
	ClassLibRMVersionMismatch = "LIB_RM_VERSION_MISMATCH"
	ClassGPUIsLost            = "GPU_IS_LOST"
	ClassResetRequired        = "RESET_REQUIRED"
	ClassCorruptedInfoROM     = "CORRUPTED_INFOROM"
	ClassIRQIssue             = "IRQ_ISSUE"
	ClassOperatingSystem      = "OPERATING_SYSTEM"
	ClassNoPermission         = "NO_PERMISSION"
	ClassTimeout              = "TIMEOUT"
	ClassNotReady             = "NOT_READY"
	ClassNotFound             = "NOT_FOUND"
	ClassGPUNotFound          = "GPU_NOT_FOUND"
	ClassUnknown              = "UNKNOWN"
	// ClassCallHung is a call that did not return before its deadline
	// (rankgate's, not the driver's: that is ClassTimeout).
	ClassCallHung = "CALL_HUNG"
)

// NVMLRule is the rule ID of a discovery failure of class.
func NVMLRule(class string) string { return "NVML_" + class }

var (
	rank      = []Face{FacePreflight}
	settings  = []Face{FacePreflight, FaceGang, FaceLaunch, FaceDiagnose}
	gang      = []Face{FaceGang}
	place     = []Face{FaceDiagnose}
	launchF   = []Face{FaceLaunch}
	discovery = []Face{FaceDiscovery}
)

// rules is the registry. Keep it sorted by face, then as the docs list them.
var rules = []Rule{
	{ID: RuleDeviceNotFound, Severity: SeverityFail, Faces: rank, Summary: "a device the rank was given is not on this node", Remediation: "check the allocation (NVIDIA_VISIBLE_DEVICES, --devices) against `nvidia-smi -L` on the node"},
	{ID: RuleNoDevices, Severity: SeverityFail, Faces: rank, Summary: "the rank has no GPU (empty list, none, void)", Remediation: "request nvidia.com/gpu or a nvidia.com/mig-* resource in the container"},
	{ID: RuleMIGMixedWithFull, Severity: SeverityFail, Faces: rank, Summary: "the rank mixes MIG instances and full GPUs", Remediation: "request either MIG instances or full GPUs, not both"},
	{ID: RuleMIGSpansGPUs, Severity: SeverityFail, Faces: rank, Summary: "the rank's MIG instances sit on more than one physical GPU", Remediation: "request MIG instances of one GPU, or full GPUs"},
	{ID: RuleMIGMultiplePerProcess, Severity: SeverityFail, Faces: rank, Summary: "one process would see more than one MIG device (CUDA uses the first only)", Remediation: "run one process per MIG device (torchrun --nproc-per-node equal to the MIG devices, each with its own CUDA_VISIBLE_DEVICES)"},
	{ID: RuleMIGParentAllocated, Severity: SeverityFail, Faces: rank, Summary: "the rank was given a whole GPU that is in MIG mode with instances", Remediation: "request a nvidia.com/mig-* resource, or disable MIG on that GPU"},
	{ID: RuleProfileMismatch, Severity: SeverityFail, Faces: rank, Summary: "a device's profile differs from --expect-profile", Remediation: "request the resource of the expected profile, or correct --expect-profile"},
	{ID: RuleProfileUnknown, Severity: SeverityWarn, Faces: rank, Summary: "--expect-profile cannot be checked: the input named no profile and SMs/memory did not identify one", Remediation: "paste `nvidia-smi mig -lgip` with the input, or give the catalog an entry for this GPU (--catalog)"},
	{ID: RuleProfileHeterogeneous, Severity: SeverityFail, Faces: rank, Summary: "the rank's devices differ in profile, SM count or GPU model", Remediation: "request devices of one profile and GPU model"},
	{ID: RuleMIGModePending, Severity: SeverityWarn, Faces: rank, Summary: "MIG mode current differs from pending (a GPU reset is needed)", Remediation: "reset the GPU (`nvidia-smi -r -i <index>`) or reboot the node to apply the pending MIG mode"},
	{ID: RuleMIGNoInstances, Severity: SeverityFail, Faces: rank, Summary: "an allocated GPU has MIG on and no instances", Remediation: "create instances (mig-manager, `nvidia-smi mig -cgi ... -C`) or disable MIG"},
	{ID: RuleDriverKnownBad, Severity: SeverityFail, Varies: true, Faces: []Face{FacePreflight, FaceDiagnose}, Summary: "the driver is on the known-bad list for this node's shape (configs/known-bad-drivers.yaml)", Remediation: "upgrade the driver past the range in the known-bad table, or avoid the shape it names"},
	{ID: RuleP2PUnsupported, Severity: SeverityWarn, Varies: true, Faces: rank, Summary: "two of the rank's full GPUs cannot do P2P read or write (fail with --require-p2p)", Remediation: "place the rank on GPUs with P2P (same PCIe switch or NVLink), or accept the slower path"},
	{ID: RuleNVLinkDown, Severity: SeverityFail, Varies: true, Faces: rank, Summary: "some NVLinks of an allocated GPU are down while others are up (warn with one GPU)", Remediation: "drain the node and check `nvidia-smi nvlink -s`; reset the GPU or reseat the links"},
	{ID: RuleP2PUnknown, Severity: SeverityWarn, Faces: rank, Summary: "the rank has several full GPUs and the inputs say nothing about P2P between some of them (only `nvidia-smi topo -m`)", Remediation: "paste `nvidia-smi topo -p2p rw` from the node with the other outputs, or run preflight on the node"},
	{ID: RuleLinkPathsMixed, Severity: SeverityWarn, Faces: rank, Summary: "the rank's GPUs are joined by NVLink for some pairs and by PCIe or the CPU interconnect (PIX, PXB, PHB, NODE, SYS) for others", Remediation: "place the rank on GPUs that share one NVLink domain (`nvidia-smi topo -m`), or accept collectives paced by the slowest path"},
	{ID: RuleGPURemapPending, Severity: SeverityFail, Faces: rank, Summary: "an allocated GPU has a row remap pending: a bad memory row stays in use until the GPU is reset", Remediation: "stop the GPU's work and reset it (`nvidia-smi -r -i <index>`) or reboot the node; the reset also applies a pending MIG mode"},
	{ID: RuleGPURemapFailed, Severity: SeverityFail, Faces: rank, Summary: "an allocated GPU failed a row remap: it has no spare rows left for a bad one", Remediation: "drain the node and run NVIDIA's field diagnostic on the GPU; a validated remap failure is an RMA"},
	{ID: RuleGPUECCUncorrected, Severity: SeverityFail, Faces: rank, Summary: "an allocated GPU counts uncorrectable ECC errors since its last reset (volatile)", Remediation: "reset the GPU (`nvidia-smi -r -i <index>`) and check Xid 48/63/64/94/95 in `dmesg`; drain the node if they come back"},
	{ID: RuleGPURetiredPagesPending, Severity: SeverityFail, Faces: rank, Summary: "an allocated GPU has memory pages waiting to be retired at its next reset", Remediation: "stop the GPU's work and reset it (`nvidia-smi -r -i <index>`) or reboot the node"},
	{ID: RuleGPUResetRequired, Severity: SeverityFail, Faces: rank, Summary: "an allocated GPU reports that it must be reset before use", Remediation: "stop the GPU's work and reset it (`nvidia-smi -r -i <index>`) or reboot the node"},
	{ID: RuleGPULost, Severity: SeverityFail, Faces: rank, Summary: "an allocated GPU has fallen off the bus (NVML GPU_IS_LOST, or nvidia-smi cannot open its device handle: Unknown Error, GPU is lost)", Remediation: "cordon and drain the node, look for Xid 79 in `dmesg`, reset the GPU or reboot; replace it if it happens again"},
	{ID: RuleGPUReadError, Severity: SeverityFail, Varies: true, Faces: rank, Summary: "nvidia-smi printed ERR! for some of an allocated GPU's values: the driver failed to read them (warn for one or two sensor readings such as fan, temperature or power; fail for memory, ECC, MIG mode or whole rows)", Remediation: "check `nvidia-smi -q -i <index>` (GPU Recovery Action) and Xid errors in `dmesg`; reset the GPU (`nvidia-smi -r -i <index>`) or drain and reboot the node when more than a sensor fails"},
	{ID: RuleNVLinkFabricNotReady, Severity: SeverityFail, Faces: rank, Summary: "an allocated GPU has not finished registering with the NVLink fabric (state not started or in progress): CUDA fails with error 802 or NCCL hangs in init", Remediation: "start nvidia-fabricmanager (NVSwitch systems) or the IMEX service (multi-node NVLink) and wait until `nvidia-smi -q` shows Fabric State Completed, Status Success"},
	{ID: RuleNVLinkFabricFailed, Severity: SeverityFail, Faces: rank, Summary: "an allocated GPU's NVLink fabric registration completed with a failure status", Remediation: "read the fabric manager's log (`journalctl -u nvidia-fabricmanager`, or the IMEX service's), fix what it names, restart it and reset the GPUs"},
	{ID: RulePersistenceOff, Severity: SeverityWarn, Faces: rank, Summary: "an allocated GPU has persistence mode off: the driver tears the GPU down when its last client exits and every CUDA init pays to bring it up again", Remediation: "run nvidia-persistenced on the node (the GPU Operator's driver does), or `nvidia-smi -pm 1`"},
	{ID: RuleClocksThrottled, Severity: SeverityWarn, Faces: rank, Summary: "an allocated GPU's clocks are held down by a hardware slowdown, thermal slowdown or the power brake at check time", Remediation: "check the node's cooling and power (`nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER`); a GPU that stays throttled paces the whole job"},
	{ID: RuleInputIncomplete, Severity: SeverityWarn, Faces: rank, Summary: "the pasted outputs are elided (\"...\", \"[...]\") or cut: what they leave out (GPUs, links, a cut table's MIG devices) is not judged", Remediation: "paste the whole output of each command, or run preflight on the node"},
	{ID: RuleRankEnvironment, Severity: SeverityFail, Faces: []Face{FacePreflight, FaceGang}, Summary: "a rank's rankgate init could not check its devices at all (NVML or driver failure)", Remediation: "read that rank's init container log and termination message; fix the node's driver or runtime"},

	{ID: RuleGangIncomplete, Severity: SeverityFail, Faces: gang, Summary: "fewer ranks reported than the job spec asks for by the gang deadline; lists the missing ranks", Remediation: "find why the missing ranks' pods did not start (rankgate diagnose job), or raise the gang deadline"},
	{ID: RuleRankFailed, Severity: SeverityFail, Faces: gang, Summary: "a rank failed its own rank rules", Remediation: "read that rank's report (its init container's termination message) and fix its devices"},
	{ID: RuleGangMIGMixedWithFull, Severity: SeverityFail, Faces: gang, Summary: "some ranks run on MIG devices, others on full GPUs", Remediation: "request the same resource for every replica"},
	{ID: RuleGangMIGSpansGPUs, Severity: SeverityFail, Faces: gang, Summary: "the job's MIG devices sit on more than one physical GPU", Remediation: "use full GPUs for multi-GPU jobs, or fit the job on the instances of one GPU"},
	{ID: RuleGangProfileMismatch, Severity: SeverityFail, Faces: gang, Summary: "ranks run on different profiles or SM counts", Remediation: "request the same MIG profile (or GPU model) for every replica"},
	{ID: RuleGangDriverMismatch, Severity: SeverityWarn, Faces: gang, Summary: "ranks run on different driver or CUDA driver versions", Remediation: "run the job on nodes with one driver version (nodeSelector on nvidia.com/cuda.driver.*)"},
	{ID: RuleGangSplitPodsSameNode, Severity: SeverityWarn, Faces: gang, Summary: "ranks share a node in different pods: no P2P/NVLink/SHM between them", Remediation: "run the node's ranks in one pod (more GPUs per pod), or accept network transport"},
	{ID: RuleGangDuplicateDevice, Severity: SeverityFail, Faces: gang, Summary: "two ranks hold the same device (sharing replicas): NCCL's \"Duplicate GPU detected\"", Remediation: "do not gate jobs on time-sliced or shared GPUs; request exclusive devices"},
	{ID: RuleGangMIGSharedGPU, Severity: SeverityInfo, Faces: gang, Summary: "all MIG ranks on one GPU", Remediation: "set NCCL_MULTI_RANK_GPU_ENABLE=1 and keep NVLS off"},
	{ID: RuleGangRankUnplaceable, Severity: SeverityFail, Faces: gang, Summary: "a missing rank's pod can never be placed (the schedule engine of diagnose finds it hopeless: shape, strategy, placement rules, gang size): fails at once, not at the deadline", Remediation: "change what the rank's pod asks for or where it may run, as the reason says, or add such nodes (rankgate diagnose job names the nearest shapes)"},

	{ID: RuleGangNVLinkDomainSplit, Severity: SeverityFail, Faces: gang, Summary: "ranks that expect multi-node NVLink sit in different NVLink domains (fabric cluster UUID or clique ID differ); lists the ranks by domain", Remediation: "place every rank in one NVLink domain (one rack's clique: a node selector or topology-aware placement on the nodes' clique label)"},
	{ID: RuleGangHealthMixed, Severity: SeverityWarn, Varies: true, Faces: gang, Summary: "some ranks report GPU health findings and others none; names the sick ranks (fail when a health finding fails)", Remediation: "fix or replace the named ranks' GPUs; the job runs at the pace of its sickest rank"},

	{ID: RuleDeviceTainted, Severity: SeverityFail, Faces: gang, Summary: "a rank's DRA allocation holds a device its driver tainted (gpu.nvidia.com/xid, gpu.nvidia.com/gpu-lost: the driver found it unhealthy); the claim tolerated the taint, or it came after the allocation", Remediation: "delete the job's pods so that their claims are allocated again on healthy devices, and drop the claim's toleration of the driver's health taints; have the node's GPU checked (Xid errors in dmesg)"},
	{ID: RuleDRADevicesDisagree, Severity: SeverityFail, Faces: gang, Summary: "the devices a rank's NVML report lists differ from those its ResourceClaims were allocated (DRA); names the devices on each side", Remediation: "check the DRA driver's kubelet plugin on the node and the container's CDI devices; remove hand-set NVIDIA_VISIBLE_DEVICES, and do not run a device plugin next to the DRA driver for the same GPUs"},

	{ID: RuleSchedulable, Severity: SeverityInfo, Faces: place, Summary: "the whole job fits now, all pending pods at once (names one placement)", Remediation: ""},
	{ID: RuleWaitCapacity, Severity: SeverityWarn, Faces: place, Summary: "every pod's shape exists and the job fits the empty cluster; it waits for busy devices", Remediation: "wait, or free the devices that hold the resource"},
	{ID: RuleShapeMismatch, Severity: SeverityFail, Faces: place, Summary: "a requested resource is offered by no node, or no node offers a whole pod's request", Remediation: "request a shape some node offers (the finding names the nearest ones), or change a node's MIG layout"},
	{ID: RuleStrategyMismatch, Severity: SeverityFail, Varies: true, Faces: place, Summary: "the request's resource naming does not match the nodes' MIG strategy (single vs mixed)", Remediation: "request nvidia.com/gpu on single-strategy nodes and nvidia.com/mig-<profile> on mixed ones"},
	{ID: RuleMIGLayoutInvalid, Severity: SeverityFail, Varies: true, Faces: place, Summary: "a node's MIG layout is invalid or does not advertise what it should", Remediation: "fix the node's mig.config label or mig-parted config, then restart the device plugin"},
	{ID: RuleMIGReconfigPending, Severity: SeverityWarn, Faces: place, Summary: "the nodes that would fit are in a mig-manager change", Remediation: "wait for mig-manager to finish (nvidia.com/mig.config.state=success)"},
	{ID: RuleMIGReconfigFailed, Severity: SeverityFail, Varies: true, Faces: place, Summary: "mig-manager failed on the nodes that would fit", Remediation: "read the mig-manager pod's log on those nodes and reapply the layout"},
	{ID: RuleGangTooLarge, Severity: SeverityFail, Faces: place, Summary: "even an empty cluster cannot hold all pods at once", Remediation: "shrink the job, or add nodes that offer its shape"},
	{ID: RuleNodeConstraints, Severity: SeverityFail, Varies: true, Faces: place, Summary: "nodeSelector, affinity, taints or nodeName exclude every node offering the shape", Remediation: "relax the pod's constraints or add tolerations for the nodes that offer the shape"},
	{ID: RuleReconfigurable, Severity: SeverityInfo, Faces: place, Summary: "no node has the shape now, but a valid MIG layout for a node's GPU would create it", Remediation: "relabel the named nodes with the named mig-parted layout (drains them)"},
	{ID: RuleMIGMultiPod, Severity: SeverityWarn, Faces: place, Summary: "a job of more than one GPU pod gets MIG instances: no P2P or NVLink between its ranks", Remediation: "use full GPUs for multi-pod jobs, or run the job in one pod"},
	{ID: RuleDRANotJudged, Severity: SeverityWarn, Faces: place, Summary: "the job's devices come through DRA (resource claims, or an extended resource a DeviceClass maps): placement is not judged from node allocatable, so the job is never refused, failed or called hopeless on those grounds", Remediation: "read the pods' scheduling events and their ResourceClaims' status (kubectl describe resourceclaim) for why they wait"},
	{ID: RuleDRADeviceUnhealthy, Severity: SeverityWarn, Faces: place, Summary: "the published devices would serve the job's DRA requests, but the driver tainted the matching ones unhealthy (gpu.nvidia.com/xid, gpu.nvidia.com/gpu-lost) and the scheduler allocates none of them: the job waits for their repair", Remediation: "repair the named GPUs, then restart the DRA driver's kubelet plugin so it publishes them untainted; never tolerate a health taint"},
	{ID: RuleDRAClaimUnmatched, Severity: SeverityWarn, Faces: []Face{FaceController}, Summary: "a request of a claim (template) the job's pods name matches no device: its DeviceClass does not exist, or its CEL selectors (with the class's) match none of the devices published in ResourceSlices", Remediation: "correct the DeviceClass or selectors (kubectl get deviceclasses; kubectl get resourceslices -o yaml)"},
	{ID: RuleDRAMIGMaySpanGPUs, Severity: SeverityWarn, Faces: []Face{FaceController}, Summary: "the job's ranks get several MIG devices through claims that cannot keep them on one physical GPU (a claim per pod, or one claim without a matchAttribute on parentUUID), which the gang verdict requires (GANG_MIG_SPANS_GPUS)", Remediation: "one claim with matchAttribute gpu.nvidia.com/parentUUID for all MIG ranks, or full GPUs"},
	{ID: RuleNodeLabelsUnreadable, Severity: SeverityWarn, Faces: place, Summary: "the job would be hopeless, but some nodes' GPU labels cannot be read: they are judged from their allocatable alone and the job is not failed, refused or suspended on placement; names the nodes and their label errors", Remediation: "fix the named nodes' nvidia.com/ labels (GPU feature discovery and mig-manager write them)"},
	{ID: RulePendingTimeout, Severity: SeverityFail, Faces: []Face{FaceController}, Summary: "the job's pods stayed unschedulable, waiting (WAIT_CAPACITY, MIG_RECONFIG_PENDING, ...), past its pending timeout (--pending-timeout, annotation rankgate.io/pending-timeout); names the last cause", Remediation: "act on the last cause (free or add the resource, finish the MIG change), or raise the pending timeout"},

	{ID: RuleRendezvousFailed, Severity: SeverityFail, Faces: launchF, Summary: "torch's rendezvous failed before NCCL init: the TCPStore client could not reach MASTER_ADDR:MASTER_PORT (timed out, connection refused, DistNetworkError); names the address", Remediation: "check that the rank-0 pod runs and listens on MASTER_PORT, that MASTER_ADDR resolves to it (the job's headless Service), and that no NetworkPolicy blocks the port"},
	{ID: RuleNCCLInitTimeout, Severity: SeverityFail, Faces: launchF, Summary: "CMD was not ready within --init-timeout (exit 4)", Remediation: "read the ranks' NCCL logs for the last step; check the network between the named ranks", Exit: ExitTimeout},
	{ID: RuleNCCLFatal, Severity: SeverityFail, Faces: launchF, Summary: "a fatal NCCL or CUDA line before CMD was ready", Remediation: "the line names the cause; fix the devices or environment it names"},
	{ID: RuleTransportFallback, Severity: SeverityWarn, Varies: true, Faces: launchF, Summary: "NCCL connected ranks over a slower path than expected (fail with --strict-transport)", Remediation: "check P2P/NVLink between the ranks' devices, or place them on one node"},
	{ID: RuleNCCLDebugHidden, Severity: SeverityWarn, Faces: launchF, Summary: "the environment hides NCCL's Init COMPLETE lines; the watchdog is off", Remediation: "set NCCL_DEBUG=INFO (or give --ready-pattern / --ready-file)"},
	{ID: RuleNprocExceedsDevices, Severity: SeverityFail, Faces: launchF, Summary: "torchrun would start more local processes than the rank has devices", Remediation: "set --nproc-per-node to the rank's devices (one process per MIG device)"},
	{ID: RuleHostfileInvalid, Severity: SeverityFail, Faces: launchF, Summary: "the MPI hostfile cannot be read or parsed (exit 2)", Remediation: "fix the named line of the hostfile", Exit: ExitUsage},
	{ID: RuleHostfileSlots, Severity: SeverityFail, Faces: launchF, Summary: "the hostfile's slots do not cover mpirun -np", Remediation: "raise the slots or lower -np"},
	{ID: RuleNCCLMIGVersion, Severity: SeverityFail, Varies: true, Faces: settings, Summary: "ranks on MIG instances run an NCCL older than 2.31, the first with MIG support (warn when the version cannot be told)", Remediation: "use an image with NCCL 2.31 or later, or full GPUs"},
	{ID: RuleNCCLMultiRankGPU, Severity: SeverityFail, Varies: true, Faces: settings, Summary: "several ranks on MIG instances of one physical GPU without NCCL_MULTI_RANK_GPU_ENABLE=1: NCCL refuses them (warn on templates, where the placement is not known yet)", Remediation: "set NCCL_MULTI_RANK_GPU_ENABLE=1 in every rank's container"},
	{ID: RuleNCCLNVLSOnMIG, Severity: SeverityFail, Faces: settings, Summary: "NCCL_NVLS_ENABLE=1 on MIG ranks: NCCL aborts init (MIG has no NVLink SHARP)", Remediation: "remove NCCL_NVLS_ENABLE (or set it to 0) for MIG jobs"},
	{ID: RuleNCCLNVLSNoNVSwitch, Severity: SeverityWarn, Faces: settings, Summary: "NCCL_NVLS_ENABLE=1 on GPUs with no NVSwitch fabric: NVLS cannot run there", Remediation: "remove NCCL_NVLS_ENABLE; NCCL enables NVLS by itself where an NVSwitch fabric is present"},
	{ID: RuleNCCLMNNVLNoDomain, Severity: SeverityFail, Faces: settings, Summary: "NCCL_MNNVL_ENABLE=1 where the ranks share no multi-node NVLink domain (or run on MIG)", Remediation: "remove NCCL_MNNVL_ENABLE (NCCL detects MNNVL by itself), or place every rank in one NVLink domain"},
	{ID: RuleNCCLSHMDisabledMIG, Severity: SeverityWarn, Faces: settings, Summary: "NCCL_SHM_DISABLE=1 with several MIG ranks on one GPU: shared memory is their only fast path, NCCL falls back to the network", Remediation: "remove NCCL_SHM_DISABLE"},
	{ID: RuleNCCLP2PDisabledNVLink, Severity: SeverityWarn, Faces: settings, Summary: "NCCL_P2P_DISABLE=1 on GPUs joined by NVLink: NCCL falls back to shared memory through the host", Remediation: "remove NCCL_P2P_DISABLE"},
	{ID: RuleNCCLIgnoreNetMismatch, Severity: SeverityFail, Varies: true, Faces: settings, Summary: "NCCL_IGNORE_NET_MISMATCH=1 with ranks whose NIC sets differ: NCCL hangs without an error (warn on templates and where NICs are not reported)", Remediation: "remove NCCL_IGNORE_NET_MISMATCH and give every rank the same NICs (NCCL_IB_HCA, the device plugin's RDMA resources)"},
	{ID: RuleNCCLSettingsDiffer, Severity: SeverityWarn, Faces: settings, Summary: "NCCL_*, FI_* or UCX_* settings differ between ranks of one job", Remediation: "give every replica type the same NCCL, libfabric and UCX settings"},
	{ID: RuleNCCLSocketIfnameMissing, Severity: SeverityFail, Faces: settings, Summary: "NCCL_SOCKET_IFNAME matches no interface of the rank's node: NCCL's bootstrap finds no socket interface", Remediation: "name an interface the node has (`ip -br link` on it), a prefix such as eth, or unset NCCL_SOCKET_IFNAME"},
	{ID: RuleNCCLIBHCAMissing, Severity: SeverityWarn, Faces: settings, Summary: "NCCL_IB_HCA matches no RDMA device of the rank's node: NCCL finds no IB device and falls back to TCP sockets", Remediation: "name HCAs the node has (`ls /sys/class/infiniband` on it), or unset NCCL_IB_HCA"},
	{ID: RuleVisibleDevicesMismatch, Severity: SeverityFail, Varies: true, Faces: settings, Summary: "CUDA_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES set by hand does not match the devices the rank is given", Remediation: "remove the hand-set variable: the device plugin sets the allocation, and launchers set CUDA_VISIBLE_DEVICES per local rank"},
	{ID: RuleHostUnreachable, Severity: SeverityFail, Faces: launchF, Summary: "a hostfile host did not resolve or accept TCP on --ssh-port within --hosts-timeout (exit 4)", Remediation: "check that the worker pods run and their headless Service resolves", Exit: ExitTimeout},
}

// nvmlClasses are registered as NVML_<class> rules.
var nvmlClasses = []struct{ class, summary string }{
	{ClassDriverNotLoaded, "the NVIDIA kernel driver is not loaded"},
	{ClassLibraryNotFound, "libnvidia-ml.so.1 could not be loaded"},
	{ClassLibRMVersionMismatch, "NVML library and kernel driver differ (driver upgraded without reboot)"},
	{ClassGPUIsLost, "the GPU has fallen off the bus"},
	{ClassResetRequired, "the GPU must be reset before use"},
	{ClassCorruptedInfoROM, "the GPU's infoROM is corrupted"},
	{ClassIRQIssue, "the driver could not set up the GPU's interrupts"},
	{ClassOperatingSystem, "the operating system refused an NVML call"},
	{ClassNoPermission, "NVML was refused permission"},
	{ClassTimeout, "the driver timed out"},
	{ClassNotReady, "the GPU is not ready yet"},
	{ClassNotFound, "an object NVML was asked for does not exist"},
	{ClassGPUNotFound, "a GPU was not found"},
	{ClassUnknown, "an NVML call failed with an unclassified error"},
	{ClassCallHung, "an NVML call did not return before --nvml-timeout (exit 4)"},
}

var registry = func() map[string]Rule {
	m := make(map[string]Rule, len(rules)+len(nvmlClasses))
	add := func(r Rule) {
		if _, dup := m[r.ID]; dup {
			panic("verdict: rule " + r.ID + " registered twice")
		}
		m[r.ID] = r
	}
	for _, r := range rules {
		add(r)
	}
	for _, c := range nvmlClasses {
		add(Rule{ID: NVMLRule(c.class), Severity: SeverityFail, Faces: discovery, Summary: c.summary, Remediation: "the finding's remediation names the fix for this class"})
	}
	return m
}()

// Lookup returns the registered rule id.
func Lookup(id string) (Rule, bool) {
	r, ok := registry[id]
	return r, ok
}

// ExitFor is the exit code a failing finding of rule id gives: the rule's
// Exit, else ExitFail.
func ExitFor(id string) int {
	if r, ok := registry[id]; ok && r.Exit != 0 {
		return r.Exit
	}
	return ExitFail
}

// Registered reports whether id is a registered rule.
func Registered(id string) bool {
	_, ok := registry[id]
	return ok
}

// Rules lists every registered rule, sorted by ID.
func Rules() []Rule {
	out := make([]Rule, 0, len(registry))
	for _, r := range registry {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Unregistered lists the rules of r's findings that are not registered.
func (r Report) Unregistered() []string {
	var out []string
	for _, f := range r.Findings {
		if !Registered(f.Rule) {
			out = append(out, f.Rule)
		}
	}
	return out
}

// CheckRegistered fails when a finding carries an unregistered rule ID.
func CheckRegistered(r Report) error {
	if bad := r.Unregistered(); len(bad) > 0 {
		return fmt.Errorf("unregistered rule IDs: %s", strings.Join(bad, ", "))
	}
	return nil
}
