package preflight

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/rankgate/rankgate/preflight/ncclenv"
	"github.com/rankgate/rankgate/verdict"
)

// RankReport is what one rank sends the controller: who it is, where it
// runs, and its own preflight report (whose Devices name its devices).
type RankReport struct {
	Rank              int            `json:"rank"`
	Pod               string         `json:"pod"`
	Node              string         `json:"node"`
	DriverVersion     string         `json:"driverVersion,omitempty"`
	CUDADriverVersion string         `json:"cudaDriverVersion,omitempty"`
	Report            verdict.Report `json:"report"`
	// Net is the rank's network as NCCL sees it (interfaces, RDMA
	// devices); nil when the rank did not report it (unknown, not none).
	Net *ncclenv.Net `json:"net,omitempty"`
	// NCCLVersion is the NCCL version the rank reported, if any.
	NCCLVersion string `json:"ncclVersion,omitempty"`
	// Source says where the report comes from: empty for the rank's own
	// report (NVML on its node), "dra" for its pod's DRA allocation
	// resolved to the facts the devices' driver publishes (package
	// integrations/kubernetes/devicesource).
	Source string `json:"source,omitempty"`
}

// SourceDRA is RankReport.Source of a report made from a DRA allocation
// (devicesource.DRA).
const SourceDRA = "dra"

// GangInput is a whole job's reports.
type GangInput struct {
	Job string
	// Expected is the number of ranks the job spec asks for.
	Expected int
	Ranks    []RankReport
	// Missing says, for ranks that have not reported, what their pods are
	// doing (from the cluster); GANG_INCOMPLETE quotes it. Ranks marked
	// Unplaceable fail the gang with GANG_RANK_UNPLACEABLE even when
	// Expected is 0 (an early decision).
	Missing map[int]MissingRank
	// ExpectMultiNodeNVLink says the job expects its ranks to reach each
	// other over multi-node NVLink (one GB200 NVL72-class domain), so that
	// GANG_NVLINK_DOMAIN_SPLIT judges every rank, not only those whose
	// GPUs report a fabric cluster.
	ExpectMultiNodeNVLink bool
	// NCCL is the settings each rank runs with (its replica type's pod
	// template: env, image), by rank; nil: the NCCL settings rules are
	// not run. The rules judge them against what each rank reported:
	// its devices, its network (RankReport.Net) and NCCL version. See
	// gangNCCLSettings.
	NCCL map[int]ncclenv.Rank
}

// MissingRank is what the pod of a rank that has not reported is doing.
type MissingRank struct {
	Pod  string `json:"pod,omitempty"`
	Node string `json:"node,omitempty"`
	// State in words: "Pending, unschedulable: 0/3 nodes are available: ...".
	State string `json:"state"`
	// Unplaceable: no node of the cluster could ever hold the pod.
	Unplaceable bool `json:"unplaceable,omitempty"`
}

// GangRules decides for the whole job. Ranks are identified by Rank; a
// later report of the same rank replaces an earlier one.
func GangRules(in GangInput) verdict.Report {
	g := newGang(in)
	var f []verdict.Finding
	for _, rule := range gangRules {
		f = append(f, rule(g)...)
	}
	return verdict.NewReport(in.Job, f)
}

// gangRules are evaluated in this order; their findings are reported in it.
var gangRules = []func(*gang) []verdict.Finding{
	gangIncomplete,
	gangRankUnplaceable,
	gangRankFailed,
	gangMIGMixedWithFull,
	gangMIGPlacement,
	gangProfileMismatch,
	gangDriverMismatch,
	gangDuplicateDevice,
	gangSplitPodsSameNode,
	gangNVLinkDomainSplit,
	gangHealthMixed,
	gangNCCLSettings,
}

// gang is a job's reports as the rules read them.
type gang struct {
	in GangInput
	// byRank: the index of each rank's report in ranks.
	byRank map[int]int
	// ranks: one report per rank, by rank.
	ranks []RankReport
	// migs: the MIG devices; fullRanks: the ranks with a full GPU.
	migs      []gangDevice
	fullRanks []int
}

// gangDevice is a device of a rank.
type gangDevice struct {
	rank int
	verdict.DeviceSummary
}

func newGang(in GangInput) *gang {
	g := &gang{in: in, byRank: make(map[int]int, len(in.Ranks))}
	for i, r := range in.Ranks {
		g.byRank[r.Rank] = i // the latest report of the rank
	}
	g.ranks = make([]RankReport, 0, len(g.byRank))
	for i, r := range in.Ranks {
		if g.byRank[r.Rank] == i {
			g.ranks = append(g.ranks, r)
		}
	}
	byRank := func(a, b RankReport) int { return cmp.Compare(a.Rank, b.Rank) }
	if !slices.IsSortedFunc(g.ranks, byRank) {
		slices.SortFunc(g.ranks, byRank)
	}
	for i, r := range g.ranks {
		g.byRank[r.Rank] = i
	}
	for _, r := range g.ranks {
		fullGPU := false
		for _, d := range r.Report.Devices {
			if d.Kind == "mig" {
				g.migs = append(g.migs, gangDevice{r.Rank, d})
			} else {
				fullGPU = true
			}
		}
		if fullGPU {
			g.fullRanks = append(g.fullRanks, r.Rank)
		}
	}
	return g
}

func devRanks(ds []gangDevice) []int {
	return ranksOf(ds, func(d gangDevice) int { return d.rank })
}

// mixed: some ranks run on MIG devices, others on full GPUs.
func (g *gang) mixed() bool { return len(g.migs) > 0 && len(g.fullRanks) > 0 }

func gangIncomplete(g *gang) []verdict.Finding {
	in := g.in
	if in.Expected <= 0 || len(g.ranks) >= in.Expected {
		return nil
	}
	var missing []int
	for i := 0; i < in.Expected; i++ {
		if _, ok := g.byRank[i]; !ok {
			missing = append(missing, i)
		}
	}
	shown := missing[:min(len(missing), MaxListedRanks)]
	pods, nodes, states := describeMissing(in.Missing, shown)
	return []verdict.Finding{{
		Rule: verdict.RuleGangIncomplete, Severity: verdict.SeverityFail, Ranks: shown, Pods: pods, Nodes: nodes,
		Message:     fmt.Sprintf("%d of %d ranks reported; missing ranks %s%s", len(g.ranks), in.Expected, firstRanks(missing), states),
		Remediation: "see why those pods did not start their init container (kubectl describe pod; rankgate diagnose job)",
	}}
}

func gangRankUnplaceable(g *gang) []verdict.Finding {
	var unplaceable []int
	for i, m := range g.in.Missing {
		if _, reported := g.byRank[i]; m.Unplaceable && !reported {
			unplaceable = append(unplaceable, i)
		}
	}
	if len(unplaceable) == 0 {
		return nil
	}
	sort.Ints(unplaceable)
	shown := unplaceable[:min(len(unplaceable), MaxListedRanks)]
	pods, nodes, states := describeMissing(g.in.Missing, shown)
	return []verdict.Finding{{
		Rule: verdict.RuleGangRankUnplaceable, Severity: verdict.SeverityFail, Ranks: shown, Pods: pods, Nodes: nodes,
		Message:     fmt.Sprintf("ranks %s can never be placed on this cluster%s", firstRanks(unplaceable), states),
		Remediation: "change what the rank's pod asks for or where it may run, as the reason says, or add such nodes (rankgate diagnose job explains it with the nearest shapes)",
	}}
}

func gangRankFailed(g *gang) []verdict.Finding {
	var f []verdict.Finding
	for _, r := range g.ranks {
		if !r.Report.Failed() {
			continue
		}
		var why []string
		for _, x := range r.Report.Findings {
			if x.Severity == verdict.SeverityFail {
				why = append(why, x.Rule)
			}
		}
		msg := fmt.Sprintf("rank %d (pod %s on %s) failed its own preflight: %s", r.Rank, r.Pod, r.Node, strings.Join(why, ", "))
		fix := "read that rank's report (its init container's termination message) and fix its devices"
		if r.Source == SourceDRA {
			// Judged from the devices its claims were allocated, before
			// its init container ran.
			msg = fmt.Sprintf("rank %d (pod %s on %s), judged from the devices its ResourceClaims were allocated, fails the rank rules: %s", r.Rank, r.Pod, r.Node, strings.Join(why, ", "))
			fix = "change the rank's ResourceClaims (count, selectors, a matchAttribute constraint on parentUUID) so that the scheduler allocates devices the rules accept; `kubectl get gang` and `rankgate status -o wide` list the rank's DRA devices"
		}
		f = append(f, verdict.Finding{
			Rule: verdict.RuleRankFailed, Severity: verdict.SeverityFail, Ranks: []int{r.Rank}, Pods: []string{r.Pod}, Nodes: []string{r.Node},
			Message: msg, Remediation: fix,
		})
	}
	return f
}

func gangMIGMixedWithFull(g *gang) []verdict.Finding {
	if !g.mixed() {
		return nil
	}
	return []verdict.Finding{{
		Rule: verdict.RuleGangMIGMixedWithFull, Severity: verdict.SeverityFail, Ranks: devRanks(g.migs),
		Message: fmt.Sprintf("ranks %s run on MIG devices and ranks %s on full GPUs; NCCL between them has no P2P and the MIG ranks pace the job",
			intList(devRanks(g.migs)), intList(g.fullRanks)),
		Remediation: "request the same resource (one nvidia.com/mig-<profile>, or nvidia.com/gpu) in every replica spec",
	}}
}

// gangMIGPlacement: MIG ranks all on one physical GPU (one node), the only
// placement with a fast path (shared memory).
func gangMIGPlacement(g *gang) []verdict.Finding {
	parents := map[string][]int{}
	for _, d := range g.migs {
		key := migParent(g.ranks[g.byRank[d.rank]].Node, d.DeviceSummary)
		parents[key] = append(parents[key], d.rank)
	}
	if len(parents) > 1 {
		return []verdict.Finding{{
			Rule: verdict.RuleGangMIGSpansGPUs, Severity: verdict.SeverityFail, Ranks: devRanks(g.migs),
			Message:     fmt.Sprintf("the job's MIG devices sit on %d physical GPUs (%s); MIG has no P2P/NVLink, so NCCL falls back to sockets or hangs in init", len(parents), rankGroups(parents)),
			Remediation: "place every rank on a MIG instance of one physical GPU (one node), or use full GPUs",
		}}
	}
	if len(parents) == 1 && len(devRanks(g.migs)) > 1 {
		return []verdict.Finding{{
			Rule: verdict.RuleGangMIGSharedGPU, Severity: verdict.SeverityInfo, Ranks: devRanks(g.migs),
			Message:     "all MIG ranks share one physical GPU: NCCL sees every rank on the same GPU and uses shared memory, never NVLink/NVLS",
			Remediation: "set NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL 2.31+) and keep NCCL_NVLS_ENABLE=0",
		}}
	}
	return nil
}

// gangProfileMismatch: the same shape everywhere (a MIG/full mix is
// reported by gangMIGMixedWithFull instead).
func gangProfileMismatch(g *gang) []verdict.Finding {
	type shape struct {
		profile string
		sms     int
	}
	byShape := map[shape][]int{}
	for _, r := range g.ranks {
		for _, d := range r.Report.Devices {
			k := shape{d.Profile, d.SMs}
			if rs := byShape[k]; len(rs) == 0 || rs[len(rs)-1] != r.Rank {
				byShape[k] = append(rs, r.Rank)
			}
		}
	}
	if len(byShape) <= 1 || g.mixed() {
		return nil
	}
	shapes := map[string][]int{}
	for k, rs := range byShape {
		s := shapeOf(verdict.DeviceSummary{Profile: k.profile, SMs: k.sms})
		shapes[s] = append(shapes[s], rs...)
	}
	if len(shapes) <= 1 {
		return nil
	}
	return []verdict.Finding{{
		Rule: verdict.RuleGangProfileMismatch, Severity: verdict.SeverityFail, Ranks: allRanks(g.ranks),
		Message:     "ranks run on devices of different shapes; the smallest paces every collective: " + rankGroups(shapes),
		Remediation: "give every rank the same profile (same SMs, not only the same memory) or the same GPU model",
	}}
}

func gangDriverMismatch(g *gang) []verdict.Finding {
	drivers := map[string][]int{}
	for _, r := range g.ranks {
		if r.DriverVersion == "" {
			continue
		}
		k := "driver " + r.DriverVersion
		if r.CUDADriverVersion != "" {
			k += " / CUDA " + r.CUDADriverVersion
		}
		drivers[k] = append(drivers[k], r.Rank)
	}
	if len(drivers) <= 1 {
		return nil
	}
	return []verdict.Finding{{
		Rule: verdict.RuleGangDriverMismatch, Severity: verdict.SeverityWarn, Ranks: allRanks(g.ranks),
		Message:     "ranks run on different drivers: " + rankGroups(drivers),
		Remediation: "pin the job to nodes of one driver version (node selector on nvidia.com/cuda.driver-version.full)",
	}}
}

func gangDuplicateDevice(g *gang) []verdict.Finding {
	// The first rank holding each device; the devices held by several
	// ranks, by "node/device ID".
	n := 0
	for _, r := range g.ranks {
		n += len(r.Report.Devices)
	}
	first := make(map[nodeDevice]int, n)
	owner := map[string][]int{}
	for _, r := range g.ranks {
		for _, d := range r.Report.Devices {
			k := deviceKey(r.Node, d.ID)
			rank, held := first[k]
			if !held {
				first[k] = r.Rank
				continue
			}
			key := r.Node + "/" + d.ID
			if owner[key] == nil {
				owner[key] = []int{rank}
			}
			owner[key] = append(owner[key], r.Rank)
		}
	}
	var f []verdict.Finding
	for _, k := range slices.Sorted(maps.Keys(owner)) {
		if rs := dedupe(owner[k]); len(rs) > 1 {
			f = append(f, verdict.Finding{
				Rule: verdict.RuleGangDuplicateDevice, Severity: verdict.SeverityFail, Ranks: rs, Devices: []string{k[strings.IndexByte(k, '/')+1:]},
				Message:     fmt.Sprintf("ranks %s were given the same device %s (time-slicing or MPS replicas); NCCL refuses it with 'Duplicate GPU detected'", intList(rs), k),
				Remediation: "do not run ranks of one job on replicas of one shared GPU; request whole devices",
			})
		}
	}
	return f
}

// nodeDevice is a device of a node as GANG_DUPLICATE_DEVICE compares
// them: by "node/device ID".
type nodeDevice struct{ node, id string }

// deviceKey is the key of device id on node: the two names, or, when one
// holds a "/", their "node/id" (a pair with a "/" in a name can equal
// another pair's "node/id" only if that pair has one too), so that two
// keys are equal exactly when their "node/id" are, without building that
// string for every device.
func deviceKey(node, id string) nodeDevice {
	if strings.IndexByte(node, '/') >= 0 || strings.IndexByte(id, '/') >= 0 {
		return nodeDevice{node: node + "/" + id}
	}
	return nodeDevice{node, id}
}

// gangSplitPodsSameNode: ranks on one node in different pods; NCCL sees
// them as separate hosts (no P2P, no SHM) and goes through the network.
func gangSplitPodsSameNode(g *gang) []verdict.Finding {
	// Most nodes hold one pod: group by pod only on the nodes with several.
	type nodePod struct{ node, pod string }
	ranksOf := make(map[nodePod][]int, len(g.ranks))
	podsOn := make(map[string]int, len(g.ranks))
	for _, r := range g.ranks {
		if r.Node == "" || len(r.Report.Devices) == 0 || r.Report.Devices[0].Kind == "mig" {
			continue
		}
		k := nodePod{r.Node, r.Pod}
		if _, ok := ranksOf[k]; !ok {
			podsOn[r.Node]++
		}
		ranksOf[k] = append(ranksOf[k], r.Rank)
	}
	podsByNode := map[string]map[string][]int{}
	for k, rs := range ranksOf {
		if podsOn[k.node] < 2 {
			continue
		}
		if podsByNode[k.node] == nil {
			podsByNode[k.node] = map[string][]int{}
		}
		podsByNode[k.node][k.pod] = rs
	}
	var f []verdict.Finding
	for _, node := range slices.Sorted(maps.Keys(podsByNode)) {
		pods := podsByNode[node]
		var rs []int
		var ps []string
		for _, p := range slices.Sorted(maps.Keys(pods)) {
			rs = append(rs, pods[p]...)
			ps = append(ps, p)
		}
		sort.Ints(rs)
		f = append(f, verdict.Finding{
			Rule: verdict.RuleGangSplitPodsSameNode, Severity: verdict.SeverityWarn, Ranks: rs, Pods: ps, Nodes: []string{node},
			Message:     fmt.Sprintf("ranks %s share node %s but sit in %d pods; NCCL cannot use P2P/NVLink or shared memory across pods and goes through the network", intList(rs), node, len(pods)),
			Remediation: "run one pod per node with all its GPUs (nproc-per-node = GPUs), or give the pods hostIPC",
		})
	}
	return f
}

// rankGroups renders "key: ranks 0-3; other: ranks 4" in key order.
func rankGroups(groups map[string][]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(groups)) {
		parts = append(parts, fmt.Sprintf("%s: ranks %s", k, intList(groups[k])))
	}
	return strings.Join(parts, "; ")
}

// MaxListedRanks bounds the missing or unplaceable ranks a finding lists
// (ranks, pods, nodes and their states); its message gives the count of
// the others, so that a gang of thousands of ranks gets a short answer.
const MaxListedRanks = 20

// firstRanks renders the first MaxListedRanks ranks and how many more.
func firstRanks(xs []int) string {
	if len(xs) <= MaxListedRanks {
		return intList(xs)
	}
	return fmt.Sprintf("%s and %d more (%d in all)", intList(xs[:MaxListedRanks]), len(xs)-MaxListedRanks, len(xs))
}

// describeMissing renders the pods of missing ranks: their names, nodes, and
// "; rank 3 (pod p): state" lines.
func describeMissing(m map[int]MissingRank, ranks []int) (pods, nodes []string, text string) {
	var b strings.Builder
	for _, i := range ranks {
		x, ok := m[i]
		if !ok {
			continue
		}
		if x.Pod != "" {
			pods = append(pods, x.Pod)
		}
		if x.Node != "" {
			nodes = append(nodes, x.Node)
		}
		fmt.Fprintf(&b, "; rank %d", i)
		switch {
		case x.Pod != "" && x.Node != "":
			fmt.Fprintf(&b, " (pod %s on %s)", x.Pod, x.Node)
		case x.Pod != "":
			fmt.Fprintf(&b, " (pod %s)", x.Pod)
		}
		fmt.Fprintf(&b, ": %s", x.State)
	}
	return pods, nodes, b.String()
}

func ranksOf[T any](xs []T, rank func(T) int) []int {
	var out []int
	for _, x := range xs {
		out = append(out, rank(x))
	}
	return dedupe(out)
}

func allRanks(rs []RankReport) []int {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = r.Rank
	}
	return out
}

func dedupe(xs []int) []int {
	seen := map[int]bool{}
	var out []int
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	sort.Ints(out)
	return out
}

// intList renders ranks compactly: "0-3,5".
func intList(xs []int) string {
	xs = dedupe(xs)
	var parts []string
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", xs[i], xs[j]))
		} else {
			parts = append(parts, fmt.Sprint(xs[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
