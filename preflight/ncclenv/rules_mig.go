package ncclenv

import (
	"fmt"

	"github.com/rankgate/rankgate/verdict"
)

// Variables the MIG rules read.
const (
	envMultiRank = "NCCL_MULTI_RANK_GPU_ENABLE"
	envNVLS      = "NCCL_NVLS_ENABLE"
	envMNNVL     = "NCCL_MNNVL_ENABLE"
	envSHM       = "NCCL_SHM_DISABLE"
	envP2P       = "NCCL_P2P_DISABLE"
)

func migRanks(in Input) []Rank {
	var out []Rank
	for _, r := range in.Ranks {
		if r.mig() {
			out = append(out, r)
		}
	}
	return out
}

// migShared groups the ranks whose MIG devices share a physical GPU
// within one host as NCCL sees it, for the GPUs that hold more than one
// MIG device of the job there (each MIG device is one NCCL rank: CUDA
// shows a process one MIG device). NCCL tells hosts apart by hostname, so
// a pod is a host: ranks in different pods on one GPU never meet NCCL's
// same-GPU check (they talk over the network, MIG_MULTI_POD). Templates
// have no devices: a container asking for several MIG instances is taken
// as one group, the only placement rankgate passes (MIG_SPANS_GPUS).
func migShared(in Input) (groups [][]Rank, guessed bool) {
	if in.Scope == ScopeTemplate {
		for _, r := range migRanks(in) {
			if r.GPUs >= 2 {
				groups = append(groups, []Rank{r})
			}
		}
		return groups, true
	}
	byGPU := map[string][]Rank{}
	devices := map[string]int{}
	for _, r := range in.Ranks {
		if !r.DevicesKnown {
			continue
		}
		host := r.Pod
		if host == "" {
			host = r.Node
		}
		for _, d := range r.Devices {
			if !d.MIG || d.GPUUUID == "" {
				continue
			}
			k := host + "/" + d.GPUUUID
			devices[k]++
			if rs := byGPU[k]; len(rs) == 0 || rs[len(rs)-1].Rank != r.Rank || r.Rank < 0 {
				byGPU[k] = append(rs, r)
			}
		}
	}
	for _, k := range sortedKeys(byGPU) {
		if devices[k] >= 2 {
			groups = append(groups, byGPU[k])
		}
	}
	return groups, false
}

func ruleMIGVersion(in Input) []verdict.Finding {
	var old, unknown []Rank
	var what string
	for _, r := range migRanks(in) {
		v := versionOf(r)
		switch {
		case v.known && v.beforeMIG:
			old = append(old, r)
			if what == "" {
				what = v.what
			}
		case !v.known && in.Scope != ScopeGang:
			// The gang verdict decides on what is known; admission,
			// diagnose and launch have said how to tell the version.
			unknown = append(unknown, r)
		}
	}
	var out []verdict.Finding
	if len(old) > 0 {
		out = append(out, finding(verdict.RuleNCCLMIGVersion, verdict.SeverityFail, old,
			fmt.Sprintf("%s: MIG instances with %s; NCCL supports MIG from %s on, older versions fail or hang in init", joinLabels(old), what, MIGMinVersion),
			"use an image with NCCL "+MIGMinVersion.String()+" or later (NGC releases after 26.06, or the nvidia-nccl wheel), or request full GPUs"))
	}
	if len(unknown) > 0 {
		out = append(out, finding(verdict.RuleNCCLMIGVersion, verdict.SeverityWarn, unknown,
			fmt.Sprintf("%s: MIG instances with an NCCL whose version cannot be told (%s); NCCL supports MIG from %s on", joinLabels(unknown), whyUnknown(unknown[0]), MIGMinVersion),
			versionHowTo))
	}
	return out
}

func ruleMultiRankGPU(in Input) []verdict.Finding {
	groups, guessed := migShared(in)
	var out []verdict.Finding
	for _, g := range groups {
		var off []Rank
		for _, r := range g {
			if _, _, known := r.Env.Int(envMultiRank); known && !r.Env.IsOne(envMultiRank) {
				off = append(off, r)
			}
		}
		if len(off) == 0 {
			continue
		}
		sev := verdict.SeverityFail
		where := "several ranks on MIG instances of one physical GPU in one pod"
		if guessed {
			sev = verdict.SeverityWarn
			where = "several MIG instances in one pod (the only placement rankgate passes puts them on one physical GPU)"
		}
		out = append(out, finding(verdict.RuleNCCLMultiRankGPU, sev, off,
			fmt.Sprintf("%s: %s, and %s is %s: NCCL stops init with \"Multiple Ranks are using the same GPU/Partition. Set NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this.\"",
				joinLabels(g), where, envMultiRank, reads(off[0].Env, envMultiRank)),
			"set NCCL_MULTI_RANK_GPU_ENABLE=1 in every rank's container (NCCL 2.31+)"))
	}
	return out
}

func ruleNVLSOnMIG(in Input) []verdict.Finding {
	rs := withSetting(migRanks(in), envNVLS)
	if len(rs) == 0 {
		return nil
	}
	return []verdict.Finding{finding(verdict.RuleNCCLNVLSOnMIG, verdict.SeverityFail, rs,
		fmt.Sprintf("%s: MIG instances with %s=1: MIG has no NVLink SHARP, and NCCL aborts init (\"NCCL_NVLS_ENABLE has been set to \\\"1\\\" and communicator has multiple ranks using the same NVML device\")", joinLabels(rs), envNVLS),
		"remove NCCL_NVLS_ENABLE from MIG jobs (its default lets NCCL decide) or set it to 0")}
}

func ruleNVLSNoNVSwitch(in Input) []verdict.Finding {
	var rs []Rank
	for _, r := range withSetting(in.Ranks, envNVLS) {
		if r.mig() || !r.DevicesKnown {
			continue
		}
		for _, d := range r.Devices {
			if d.NVSwitch != nil && !*d.NVSwitch {
				rs = append(rs, r)
				break
			}
		}
	}
	if len(rs) == 0 {
		return nil
	}
	return []verdict.Finding{finding(verdict.RuleNCCLNVLSNoNVSwitch, verdict.SeverityWarn, rs,
		fmt.Sprintf("%s: %s=1 on GPUs with no NVSwitch fabric: NVLS needs NVSwitch (HGX/DGX H100 and later), NCCL cannot use it here", joinLabels(rs), envNVLS),
		"remove NCCL_NVLS_ENABLE; NCCL turns NVLS on by itself where the fabric supports it")}
}

func ruleMNNVLNoDomain(in Input) []verdict.Finding {
	rs := withSetting(in.Ranks, envMNNVL)
	if len(rs) == 0 {
		return nil
	}
	if mig := migRanks(Input{Scope: in.Scope, Ranks: rs}); len(mig) > 0 {
		return []verdict.Finding{finding(verdict.RuleNCCLMNNVLNoDomain, verdict.SeverityFail, mig,
			fmt.Sprintf("%s: %s=1 on MIG instances: MIG has no NVLink, so no multi-node NVLink either", joinLabels(mig), envMNNVL),
			"remove NCCL_MNNVL_ENABLE from MIG jobs")}
	}
	if in.Scope == ScopeTemplate {
		return nil
	}
	domains := map[string][]Rank{}
	for _, r := range in.Ranks {
		if !r.DevicesKnown {
			return nil // a rank not judged yet: its domain is unknown
		}
		for _, d := range r.Devices {
			k := "no NVLink domain"
			if d.FabricCluster != "" {
				k = "cluster " + d.FabricCluster
				if d.FabricClique != nil {
					k += fmt.Sprintf(" clique %d", *d.FabricClique)
				}
			}
			if g := domains[k]; len(g) == 0 || g[len(g)-1].Rank != r.Rank {
				domains[k] = append(g, r)
			}
		}
	}
	_, none := domains["no NVLink domain"]
	if len(domains) <= 1 && !none {
		return nil
	}
	msg := fmt.Sprintf("%s: %s=1 but the ranks share no multi-node NVLink domain:", joinLabels(rs), envMNNVL)
	for _, k := range sortedKeys(domains) {
		msg += fmt.Sprintf(" %s: %s;", k, joinLabels(domains[k]))
	}
	msg = msg[:len(msg)-1] + `; NCCL forced to MNNVL without it stops init ("MNNVL is not supported on this system")`
	return []verdict.Finding{finding(verdict.RuleNCCLMNNVLNoDomain, verdict.SeverityFail, rs, msg,
		"remove NCCL_MNNVL_ENABLE (NCCL detects MNNVL by itself), or place every rank in one NVLink domain (the nodes' clique label)")}
}

func ruleSHMDisabledMIG(in Input) []verdict.Finding {
	groups, _ := migShared(in)
	var out []verdict.Finding
	for _, g := range groups {
		rs := withSetting(g, envSHM)
		if len(rs) == 0 {
			continue
		}
		out = append(out, finding(verdict.RuleNCCLSHMDisabledMIG, verdict.SeverityWarn, rs,
			fmt.Sprintf("%s: %s=1 while their MIG instances share one GPU: MIG has no P2P, shared memory is the only fast path between them, and NCCL falls back to the network (sockets or the NIC through the switch), a slow path that with sockets alone can fail init (NVIDIA/nccl#2057)", joinLabels(rs), envSHM),
			"remove NCCL_SHM_DISABLE from MIG jobs"))
	}
	return out
}

func ruleP2PDisabledNVLink(in Input) []verdict.Finding {
	rs := withSetting(in.Ranks, envP2P)
	if len(rs) == 0 {
		return nil
	}
	// Full GPUs per multi-node NVLink domain (cluster and clique): two of
	// them reach each other over NVLink, on one node or across nodes.
	domain := map[string]int{}
	for _, r := range in.Ranks {
		for _, d := range r.Devices {
			if !d.MIG && d.FabricCluster != "" {
				domain[domainKey(d)]++
			}
		}
	}
	var linked []Rank
	for _, r := range rs {
		if nvlinked(r, domain) {
			linked = append(linked, r)
		}
	}
	if len(linked) == 0 {
		return nil
	}
	return []verdict.Finding{finding(verdict.RuleNCCLP2PDisabledNVLink, verdict.SeverityWarn, linked,
		fmt.Sprintf("%s: %s=1 on GPUs joined by NVLink: NCCL stops using NVLink between them and copies through host shared memory, many times slower", joinLabels(linked), envP2P),
		"remove NCCL_P2P_DISABLE (if it was set to work around a hang, check `nvidia-smi topo -p2p rw` and the NVLink state instead)")}
}

func domainKey(d Device) string {
	if d.FabricClique == nil {
		return d.FabricCluster
	}
	return fmt.Sprintf("%s/%d", d.FabricCluster, *d.FabricClique)
}

// nvlinked: the rank's full GPUs reach another GPU of the job over NVLink
// (a known NVLink peer, or another GPU in its multi-node NVLink domain).
func nvlinked(r Rank, domain map[string]int) bool {
	if !r.DevicesKnown {
		return false
	}
	for _, d := range r.Devices {
		if d.MIG {
			continue
		}
		if d.NVLinkPeers || (d.FabricCluster != "" && domain[domainKey(d)] >= 2) {
			return true
		}
	}
	return false
}

func whyUnknown(r Rank) string {
	if r.Image == "" {
		return "no NCCL_VERSION in the environment"
	}
	return fmt.Sprintf("no NCCL_VERSION, and image %q has no release tag rankgate knows", r.Image)
}
