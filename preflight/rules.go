package preflight

import (
	"fmt"
	"sort"
	"strings"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// ProfileFull is --expect-profile's value for whole GPUs (rule IDs are
// declared in package verdict).
const (
	ProfileFull = "full"
)

// Mode is what a preflight run judges.
type Mode string

// Modes.
const (
	// ModeRank judges one process's devices: every rule runs.
	ModeRank Mode = "rank"
	// ModeNode judges a node without a rank: pasted outputs and no
	// allocation. Node-level rules run (MIG mode pending, instances,
	// expected profile, driver, links); the rules that assume one process
	// sees every listed device (MIG_MULTIPLE_PER_PROCESS, MIG_SPANS_GPUS,
	// MIG_MIXED_WITH_FULL, PROFILE_HETEROGENEOUS, P2P_UNKNOWN,
	// LINK_PATHS_MIXED) do not: a node legitimately holds several MIG
	// devices, on several GPUs, next to full GPUs.
	ModeNode Mode = "node"
)

// ModeFor picks the mode: node mode when the node's facts are offline
// (pasted outputs, a snapshot, a sample) and nothing names the rank's
// devices (no --devices, no allocation in the environment, no pod).
func ModeFor(alloc topology.Allocation, offline bool) Mode {
	if offline && alloc.All && alloc.From == topology.FromDefault {
		return ModeNode
	}
	return ModeRank
}

// Describe is the mode as the report's subject says it.
func (m Mode) Describe() string {
	if m == ModeNode {
		return "node mode: every device of the pasted node, no rank allocation, so per-process rules are skipped (pass --devices to check one rank)"
	}
	return "rank mode"
}

// RankInput is what the rank rules judge: the node, the rank's devices and
// what the job expects.
type RankInput struct {
	Inventory  *topology.Inventory
	Allocation topology.Allocation
	// ExpectProfile is the profile every device must have: a MIG profile
	// ("2g.20gb") or "full". Empty: no expectation.
	ExpectProfile string
	// RequireP2P makes P2P_UNSUPPORTED a failure instead of a warning.
	RequireP2P bool
	Catalog    *topology.Catalog
	Drivers    *DriverTable
	// Mode is ModeRank when empty.
	Mode Mode
}

// RankRules runs every rank rule and returns the report.
func RankRules(in RankInput) verdict.Report {
	if in.Mode == "" {
		in.Mode = ModeRank
	}
	node := in.Mode == ModeNode
	inv := in.Inventory
	devs, missing := inv.Devices(in.Allocation)
	var f []verdict.Finding
	add := func(x verdict.Finding) { f = append(f, x) }

	refs := make([]string, 0, len(missing))
	for r := range missing {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	for _, r := range refs {
		add(verdict.Finding{
			Rule: verdict.RuleDeviceNotFound, Severity: verdict.SeverityFail, Devices: []string{r},
			Message: fmt.Sprintf("device %s (from %s) is not on this node%s", r, in.Allocation.From, notFoundDetail(r, missing[r])),
			Remediation: "check that the device plugin and NVML agree (a MIG layout changed after the pod was admitted?); " +
				"list the node's devices with `rankgate inspect` or `nvidia-smi -L`",
		})
	}
	if len(devs) == 0 {
		if len(missing) == 0 {
			add(verdict.Finding{
				Rule: verdict.RuleNoDevices, Severity: verdict.SeverityFail,
				Message:     fmt.Sprintf("the rank has no GPU (device list from %s is empty)", orDefault(in.Allocation.From, "nowhere")),
				Remediation: "request nvidia.com/gpu or nvidia.com/mig-<profile> in the container's resources, or pass --devices",
			})
		}
		r := verdict.NewReport("", f)
		r.Mode = string(in.Mode)
		return r
	}

	var migs, fulls []topology.Device
	for _, d := range devs {
		if d.Kind == topology.KindMIG {
			migs = append(migs, d)
		} else {
			fulls = append(fulls, d)
		}
	}
	if len(migs) > 0 && len(fulls) > 0 && !node {
		add(verdict.Finding{
			Rule: verdict.RuleMIGMixedWithFull, Severity: verdict.SeverityFail, Devices: ids(devs),
			Message: fmt.Sprintf("the rank mixes %d MIG device(s) (%s) with %d full GPU(s) (%s); NCCL cannot use P2P/NVLink between them and CUDA sees one MIG device per process",
				len(migs), names(migs), len(fulls), names(fulls)),
			Remediation: "request either only nvidia.com/mig-<profile> or only nvidia.com/gpu for every rank",
		})
	}
	if parents := distinctGPUs(migs); len(parents) > 1 && !node {
		add(verdict.Finding{
			Rule: verdict.RuleMIGSpansGPUs, Severity: verdict.SeverityFail, Devices: ids(migs),
			Message: fmt.Sprintf("the rank's MIG devices sit on %d physical GPUs (%s): MIG has no P2P, so traffic between them goes through host memory or the network",
				len(parents), strings.Join(parents, ", ")),
			Remediation: "place all MIG devices of a job on one physical GPU, or use full GPUs",
		})
	}
	if len(migs) > 1 && !node {
		add(verdict.Finding{
			Rule: verdict.RuleMIGMultiplePerProcess, Severity: verdict.SeverityFail, Devices: ids(migs),
			Message: fmt.Sprintf("one process would see %d MIG devices (%s); CUDA enumerates only the first MIG device per process, so the others sit idle and a second local rank fails with 'invalid device ordinal'",
				len(migs), names(migs)),
			Remediation: "give each rank (pod) exactly one MIG device, or start one process per MIG device with its own CUDA_VISIBLE_DEVICES=<MIG UUID>",
		})
	}
	f = append(f, migParentRules(fulls)...)
	f = append(f, profileRules(in, devs)...)
	for _, g := range distinctGPUPtrs(devs) {
		if g.MIGCurrent != topology.ModeUnknown && g.MIGPending != topology.ModeUnknown && g.MIGCurrent != g.MIGPending {
			add(verdict.Finding{
				Rule: verdict.RuleMIGModePending, Severity: verdict.SeverityWarn, Devices: []string{gpuName(g)},
				Message:     fmt.Sprintf("GPU %d: MIG mode is %s but %s is pending (nvidia-smi shows %q); %s", g.Index, g.MIGCurrent, g.MIGPending, pendingShown(g.MIGPending), pendingMeaning(g)),
				Remediation: fmt.Sprintf("apply the pending mode with a GPU reset: stop the work on GPU %d, then `nvidia-smi -r -i %d` (or reboot the node; under the GPU Operator, let mig-manager reach nvidia.com/mig.config.state=success)", g.Index, g.Index),
			})
		}
	}
	if in.Drivers != nil {
		shape := ShapeOf(inv)
		for _, e := range in.Drivers.Match(shape) {
			add(verdict.Finding{
				Rule: verdict.RuleDriverKnownBad, Severity: e.Severity, Devices: ids(devs),
				Message:     fmt.Sprintf("driver %s (%s): %s", orDefault(inv.DriverVersion, "unknown"), e.ID, e.Problem),
				Remediation: e.Fix + " (source: " + e.Source + ")",
			})
		}
	}
	f = append(f, linkRules(in, fulls)...)
	f = append(f, healthRules(distinctGPUPtrs(devs))...)
	f = append(f, gapRules(inv)...)
	r := verdict.NewReport("", f)
	r.Mode = string(in.Mode)
	r.Devices = summaries(inv, devs)
	return r
}

// migParentRules: whole GPUs in MIG mode given to the rank:
// MIG_NO_INSTANCES without instances, MIG_PARENT_ALLOCATED with them, and
// INPUT_INCOMPLETE where a cut paste leaves the instances unknown.
func migParentRules(fulls []topology.Device) []verdict.Finding {
	var f []verdict.Finding
	for _, d := range fulls {
		g := d.GPU
		switch {
		case g.MIGCurrent != topology.ModeEnabled:
		case len(g.MIGDevices) == 0 && g.MIGDevicesUnknown:
			f = append(f, migUnknownFinding(d))
		case len(g.MIGDevices) == 0:
			f = append(f, verdict.Finding{
				Rule: verdict.RuleMIGNoInstances, Severity: verdict.SeverityFail, Devices: []string{d.ID()},
				Message:     fmt.Sprintf("%s has MIG mode enabled and no MIG instances: no CUDA work can run on it", d.Name()),
				Remediation: "create the MIG layout (set the node label nvidia.com/mig.config for mig-manager) or disable MIG mode on this GPU",
			})
		default:
			f = append(f, verdict.Finding{
				Rule: verdict.RuleMIGParentAllocated, Severity: verdict.SeverityFail, Devices: []string{d.ID()},
				Message:     fmt.Sprintf("%s is in MIG mode with %d instance(s), but the rank was given the whole GPU: CUDA cannot run on a MIG parent", d.Name(), len(g.MIGDevices)),
				Remediation: "request one of its MIG devices (nvidia.com/mig-<profile>) instead of the whole GPU",
			})
		}
	}
	return f
}

// profileRules: PROFILE_MISMATCH against the expectation, PROFILE_HETEROGENEOUS
// among the rank's devices.
func profileRules(in RankInput, devs []topology.Device) []verdict.Finding {
	var f []verdict.Finding
	if want := strings.ToLower(strings.TrimSpace(in.ExpectProfile)); want != "" {
		for _, d := range devs {
			switch have := d.Profile(); {
			case d.Kind == topology.KindMIG && have == "" && want != ProfileFull:
				f = append(f, verdict.Finding{
					Rule: verdict.RuleProfileUnknown, Severity: verdict.SeverityWarn, Devices: []string{d.ID()},
					Message:     fmt.Sprintf("%s: its profile is not known (the input did not name it and SMs/memory did not identify one%s), so --expect-profile %s cannot be checked", d.Name(), catalogGap(in.Catalog, d.GPU), want),
					Remediation: "paste the output of `nvidia-smi mig -lgip` from this node with the others (it lists the GPU's own profiles), or `nvidia-smi -L`, which names each device's profile; or run preflight on the node",
				})
			case strings.EqualFold(have, want):
			default:
				f = append(f, mismatch(in, d, want))
			}
		}
	}
	// MIG mixed with full GPUs is MIG_MIXED_WITH_FULL's finding, not a
	// second one here.
	if len(devs) > 1 && !mixedKinds(devs) && in.Mode != ModeNode {
		type shape struct {
			profile string
			sms     int
			name    string
		}
		groups := map[shape][]topology.Device{}
		var order []shape
		for _, d := range devs {
			s := shape{profile: d.Profile(), sms: d.SMs()}
			if d.Kind == topology.KindGPU {
				s.name = d.GPU.Name
			}
			if _, ok := groups[s]; !ok {
				order = append(order, s)
			}
			groups[s] = append(groups[s], d)
		}
		if len(groups) > 1 {
			var parts []string
			for _, s := range order {
				desc := s.profile
				if s.name != "" {
					desc = s.name
				}
				if s.sms > 0 {
					desc += fmt.Sprintf(" (%d SMs)", s.sms)
				}
				parts = append(parts, fmt.Sprintf("%s: %s", desc, names(groups[s])))
			}
			f = append(f, verdict.Finding{
				Rule: verdict.RuleProfileHeterogeneous, Severity: verdict.SeverityFail, Devices: ids(devs),
				Message:     "the rank's devices differ in shape; the slowest one paces every collective: " + strings.Join(parts, "; "),
				Remediation: "give every device of the job the same profile (or the same GPU model)",
			})
		}
	}
	return f
}

func mismatch(in RankInput, d topology.Device, want string) verdict.Finding {
	have := d.Profile()
	msg := fmt.Sprintf("%s has profile %s, the job expects %s", d.Name(), have, want)
	if d.Kind == topology.KindMIG && want != ProfileFull {
		_, haveGB, err1 := topology.ParseProfileName(have)
		_, wantGB, err2 := topology.ParseProfileName(want)
		if err1 == nil && err2 == nil && haveGB == wantGB {
			wantSMs := 0
			if p, ok := d.GPU.MIGProfile(in.Catalog, want); ok {
				wantSMs = p.SMs
			}
			switch {
			case d.SMs() > 0 && wantSMs > 0:
				msg += fmt.Sprintf(": same memory (%d GB) but %d SMs instead of %d", haveGB, d.SMs(), wantSMs)
			default:
				msg += fmt.Sprintf(": same memory (%d GB) but a different number of compute slices, so different SMs", haveGB)
			}
		}
	}
	return verdict.Finding{
		Rule: verdict.RuleProfileMismatch, Severity: verdict.SeverityFail, Devices: []string{d.ID()},
		Message:     msg,
		Remediation: fmt.Sprintf("request nvidia.com/mig-%s (mixed strategy) or fix --expect-profile; a node offering %s needs its MIG layout changed", want, want),
	}
}

// linkRules: P2P_UNSUPPORTED between the rank's full GPUs, NVLINK_DOWN on
// them.
func linkRules(in RankInput, fulls []topology.Device) []verdict.Finding {
	var f []verdict.Finding
	sev := verdict.SeverityWarn
	if in.RequireP2P {
		sev = verdict.SeverityFail
	}
	for i := 0; i < len(fulls); i++ {
		for j := i + 1; j < len(fulls); j++ {
			a, b := fulls[i].GPU, fulls[j].GPU
			if a.Index == b.Index {
				continue
			}
			l, ok := in.Inventory.Link(a.Index, b.Index)
			if !ok {
				continue
			}
			var bad []string
			if l.P2PRead.Known() && !l.P2PRead.Supported() {
				bad = append(bad, "read "+string(l.P2PRead))
			}
			if l.P2PWrite.Known() && !l.P2PWrite.Supported() {
				bad = append(bad, "write "+string(l.P2PWrite))
			}
			if len(bad) == 0 {
				continue
			}
			lvl := ""
			if l.Level != "" {
				lvl = ", link " + l.Level
			}
			f = append(f, verdict.Finding{
				Rule: verdict.RuleP2PUnsupported, Severity: sev, Devices: []string{fulls[i].ID(), fulls[j].ID()},
				Message: fmt.Sprintf("GPU %d and GPU %d cannot do P2P (%s%s); NCCL falls back to shared host memory, several times slower",
					a.Index, b.Index, strings.Join(bad, ", "), lvl),
				Remediation: "place the rank on GPUs with P2P (same NVLink domain or PCIe switch: see nvidia-smi topo -p2p rw); check ACS/IOMMU settings on the host",
			})
		}
	}
	if in.Mode != ModeNode {
		f = append(f, pathRules(in, fulls)...)
	}
	return append(f, nvlinkDown(in, fulls)...)
}

// nvlinkDown: NVLINK_DOWN on the rank's full GPUs. Some links up and some
// down is a broken link. A GPU whose links are all inactive has no NVLink
// fabric here (a pass-through VM, a PCIe card), unless another GPU of the
// same model on the node has links up: then it is cut off from its peers.
func nvlinkDown(in RankInput, fulls []topology.Device) []verdict.Finding {
	var f []verdict.Finding
	for _, g := range distinctGPUPtrs(fulls) {
		var up, down []string
		for _, l := range g.NVLinks {
			if l.Active {
				up = append(up, fmt.Sprint(l.Link))
			} else {
				down = append(down, fmt.Sprint(l.Link))
			}
		}
		if len(down) == 0 {
			continue
		}
		msg := fmt.Sprintf("GPU %d: NVLink(s) %s down while %s are up; collectives over this GPU run on fewer links or fall back to PCIe", g.Index, strings.Join(down, ","), strings.Join(up, ","))
		if len(up) == 0 {
			peer := peerWithLinks(in.Inventory, g)
			if peer == nil {
				continue
			}
			msg = fmt.Sprintf("GPU %d: all its NVLinks (%s) are down while GPU %d of the same model has NVLinks up; traffic to this GPU falls back to PCIe or fails", g.Index, strings.Join(down, ","), peer.Index)
		}
		// One GPU alone uses no NVLink; a node judged whole (node mode)
		// serves multi-GPU jobs.
		s := verdict.SeverityWarn
		if len(fulls) > 1 || in.Mode == ModeNode {
			s = verdict.SeverityFail
		}
		f = append(f, verdict.Finding{
			Rule: verdict.RuleNVLinkDown, Severity: s, Devices: []string{gpuName(g)},
			Message:     msg,
			Remediation: "drain the node and have the GPU/NVSwitch checked (nvidia-smi nvlink -s, dmesg for Xid 74/NVLink errors); a reset may bring the link back",
		})
	}
	return f
}

// peerWithLinks finds another GPU of g's model on the node with an NVLink
// up.
func peerWithLinks(inv *topology.Inventory, g *topology.GPU) *topology.GPU {
	for i := range inv.GPUs {
		p := &inv.GPUs[i]
		if p.Index == g.Index || p.Name != g.Name {
			continue
		}
		for _, l := range p.NVLinks {
			if l.Active {
				return p
			}
		}
	}
	return nil
}

func ids(ds []topology.Device) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID()
	}
	return out
}

func names(ds []topology.Device) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Name()
	}
	return strings.Join(out, ", ")
}

func distinctGPUs(ds []topology.Device) []string {
	var out []string
	for _, g := range distinctGPUPtrs(ds) {
		out = append(out, gpuName(g))
	}
	return out
}

func distinctGPUPtrs(ds []topology.Device) []*topology.GPU {
	var out []*topology.GPU
	seen := map[int]bool{}
	for _, d := range ds {
		if !seen[d.GPU.Index] {
			seen[d.GPU.Index] = true
			out = append(out, d.GPU)
		}
	}
	return out
}

func gpuName(g *topology.GPU) string {
	if g.UUID != "" {
		return fmt.Sprintf("GPU %d (%s)", g.Index, g.UUID)
	}
	return fmt.Sprintf("GPU %d", g.Index)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func mixedKinds(ds []topology.Device) bool {
	for _, d := range ds {
		if d.Kind != ds[0].Kind {
			return true
		}
	}
	return false
}

// pendingShown is how the nvidia-smi table prints a pending MIG mode.
func pendingShown(m topology.MIGMode) string {
	switch m {
	case topology.ModeEnabled:
		return "Enabled*"
	case topology.ModeDisabled:
		return "Disabled*"
	}
	return string(m) + "*"
}

// pendingMeaning says what a GPU with a pending MIG mode change can run
// until its reset.
func pendingMeaning(g *topology.GPU) string {
	switch {
	case g.MIGCurrent == topology.ModeEnabled && g.MIGPending == topology.ModeDisabled:
		return "the GPU is still in MIG mode: no CUDA work runs on it outside MIG instances until the reset"
	case g.MIGCurrent == topology.ModeDisabled && g.MIGPending == topology.ModeEnabled:
		return "the GPU is not in MIG mode yet: full-GPU work still runs and no MIG instance can be created until the reset"
	}
	return "the GPU changes shape at its next reset"
}

// catalogGap says, for a message, that neither the GPU's reported profiles
// nor the catalog know its model.
func catalogGap(cat *topology.Catalog, g *topology.GPU) string {
	if g == nil || len(g.MIGProfiles) > 0 || cat == nil {
		return ""
	}
	if _, ok := cat.Model(g.Name); ok {
		return ""
	}
	return fmt.Sprintf("; the MIG catalog has no entry for %q", g.Name)
}

// pathRules: P2P_UNKNOWN when the inputs say nothing about P2P between some
// of the rank's full GPUs, LINK_PATHS_MIXED when NVLink joins some pairs
// and PCIe or the CPU interconnect others.
func pathRules(in RankInput, fulls []topology.Device) []verdict.Finding {
	gpus := distinctGPUPtrs(fulls)
	if len(gpus) < 2 {
		return nil
	}
	var unknown, nvlink, other []string
	for i := 0; i < len(gpus); i++ {
		for j := i + 1; j < len(gpus); j++ {
			a, b := gpus[i].Index, gpus[j].Index
			pair := fmt.Sprintf("GPU %d-GPU %d", a, b)
			l, ok := in.Inventory.Link(a, b)
			if !ok || (!l.P2PRead.Known() && !l.P2PWrite.Known()) {
				unknown = append(unknown, pair)
			}
			switch {
			case !ok || l.Level == "":
			case strings.HasPrefix(strings.ToUpper(l.Level), "NV"):
				nvlink = append(nvlink, pair+" "+l.Level)
			default:
				other = append(other, pair+" "+l.Level)
			}
		}
	}
	var f []verdict.Finding
	devs := ids(fulls)
	if len(unknown) > 0 {
		f = append(f, verdict.Finding{
			Rule: verdict.RuleP2PUnknown, Severity: verdict.SeverityWarn, Devices: devs,
			Message: fmt.Sprintf("the rank has %d full GPUs and the inputs say nothing about P2P between %s (`nvidia-smi topo -m` gives link classes, not P2P support), so P2P_UNSUPPORTED could not be checked",
				len(gpus), strings.Join(unknown, ", ")),
			Remediation: "paste the output of `nvidia-smi topo -p2p rw` from this node with the others (or run preflight on the node)",
		})
	}
	if len(nvlink) > 0 && len(other) > 0 {
		f = append(f, verdict.Finding{
			Rule: verdict.RuleLinkPathsMixed, Severity: verdict.SeverityWarn, Devices: devs,
			Message: fmt.Sprintf("the rank's GPUs are joined by different paths: NVLink for %s, but %s; NCCL's rings and trees run at the pace of the slowest path",
				strings.Join(nvlink, ", "), strings.Join(other, ", ")),
			Remediation: "place the rank on GPUs that share one NVLink domain (see `nvidia-smi topo -m`), or accept collectives paced by the slowest path",
		})
	}
	return f
}

// notFoundDetail is what a lookup error adds to "device REF is not on this
// node": nothing when it only restates that, else its own words.
func notFoundDetail(ref string, err error) string {
	if err == nil {
		return ""
	}
	d := strings.TrimPrefix(err.Error(), topology.ErrDeviceNotFound.Error())
	d = strings.TrimSpace(strings.TrimPrefix(d, ":"))
	if d == "" || d == ref {
		return ""
	}
	return " (" + d + ")"
}
