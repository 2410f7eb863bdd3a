package schedule

import (
	"fmt"
	"strings"

	"github.com/rankgate/rankgate/verdict"
)

// Explanations of the MIG family: a layout change pending or failed
// (MIG_RECONFIG_PENDING, MIG_RECONFIG_FAILED), layouts the node does not
// advertise as it should (MIG_LAYOUT_INVALID), the MIG strategy hiding
// the shape (STRATEGY_MISMATCH), and MIG instances across pods
// (MIG_MULTI_POD).

func (d *diag) reconfigPending(s *setState, ns []int32, r string) {
	what := "Those nodes offer what it asks"
	if r != "" {
		what = "The new layout offers " + r
	}
	d.add(d.finding(s, verdict.RuleMIGReconfigPending, verdict.SeverityWarn,
		fmt.Sprintf("%s: mig-manager is changing the MIG layout (%s). %s; the device plugin is paused until the change ends, so %s waits.",
			d.nodeCountNames(ns), d.migStates(ns), what, d.setName(s)),
		"Wait for nvidia.com/mig.config.state=success on those nodes. If it stays pending or rebooting, look at the mig-manager pod on the node: GPU pods still running there block the change.", ns))
}

func (d *diag) reconfigFailed(s *setState, ns []int32, r string, decisive bool) {
	sev := verdict.SeverityWarn
	tail := "such nodes are left out of the placement"
	if decisive {
		sev = verdict.SeverityFail
		tail = "no other node offers the shape"
	}
	what := "Those nodes offer what " + d.setName(s) + " asks"
	if r != "" {
		what = "The new layout would offer " + r
	}
	d.add(d.finding(s, verdict.RuleMIGReconfigFailed, sev,
		fmt.Sprintf("%s: mig-manager failed to change the MIG layout (%s). %s, but %s.", d.nodeCountNames(ns), d.migStates(ns), what, tail),
		"Read the mig-manager logs on those nodes (kubectl -n gpu-operator logs -l app=nvidia-mig-manager), fix the mig-parted config or the node (GPU processes still running block a change), then set nvidia.com/mig.config again.", ns))
}

func (d *diag) migStates(ns []int32) string {
	seen := map[string]bool{}
	for _, n := range ns {
		g := d.c.nodes[n].gpu
		s := "mig.config=" + orUnset(g.MIGConfig) + ", mig.config.state=" + orUnset(g.MIGConfigState)
		if g.PausedForMIGChange {
			s += ", gpu.deploy.*=paused-for-mig-change"
		}
		seen[s] = true
	}
	return strings.Join(sortedKeys(seen), "; ")
}

func (d *diag) layoutInvalid(s *setState, ns []int32, r string) {
	var parts []string
	for _, n := range ns {
		if len(parts) == d.e.maxNames {
			parts = append(parts, fmt.Sprintf("and %d more", len(ns)-d.e.maxNames))
			break
		}
		ni := &d.c.nodes[n]
		switch {
		case ni.gpu.Invalid():
			parts = append(parts, fmt.Sprintf("%s: GFD labels the product %s (MIG enabled with no instances, MIG and non-MIG GPUs together, or several profiles under mig.strategy=single)", ni.node.Name, ni.gpu.Product))
		default:
			parts = append(parts, fmt.Sprintf("%s: %s applied (state %s) but the node advertises %s 0", ni.node.Name, "mig.config="+ni.gpu.MIGConfig, orUnset(ni.gpu.MIGConfigState), r))
		}
	}
	d.add(d.finding(s, verdict.RuleMIGLayoutInvalid, verdict.SeverityFail,
		fmt.Sprintf("No node advertises %s, which %s asks for. Nodes whose layout should offer it advertise none: %s.", r, d.setName(s), strings.Join(parts, "; ")),
		"Give the node a layout its strategy can advertise: under mig.strategy=single every GPU needs the same one profile (or MIG off on all); otherwise use mixed. Then restart the device plugin and GFD pods on the node and check kubectl describe node.", ns))
}

func (d *diag) strategyMismatch(s *setState, ns []int32, r string) {
	if p, ok := MIGProfileOf(r); ok {
		d.singleHidesProfile(s, ns, r, p)
		return
	}
	offered := map[string]bool{}
	for _, n := range ns {
		row := int(n) * len(d.c.resName)
		for j, name := range d.c.resName {
			if strings.HasPrefix(name, MIGPrefix) && d.c.alloc[row+j] > 0 {
				offered[name] = true
			}
		}
	}
	d.add(d.finding(s, verdict.RuleStrategyMismatch, verdict.SeverityFail,
		fmt.Sprintf("%s asks nvidia.com/gpu (full GPUs), but no node advertises it: the GPU nodes (%s) use mig.strategy=mixed with every GPU partitioned and offer only %s.",
			d.setName(s), d.nodeCountNames(ns), strings.Join(sortedKeys(offered), ", ")),
		"Ask for one of those MIG resources, or give nodes full GPUs: label them nvidia.com/mig.config=all-disabled (mig-manager drains the GPUs).", ns))
}

// SwitchToMixed is how a GPU Operator cluster switches the device plugin
// and GFD to the mixed strategy.
const SwitchToMixed = `kubectl patch clusterpolicies.nvidia.com/cluster-policy --type=merge -p '{"spec":{"mig":{"strategy":"mixed"}}}'`

// singleHidesProfile: the nodes whose GPUs have MIG profile p run
// mig.strategy=single, which advertises MIG instances as nvidia.com/gpu.
// Both ways out are spelled with the strategy they need: keep single and
// ask nvidia.com/gpu of the <GPU>-MIG-<p> product once the nodes carry
// all-<p>, or switch to mixed and give the nodes a layout with p.
func (d *diag) singleHidesProfile(s *setState, ns []int32, r, p string) {
	var now []string
	products := map[string]bool{}
	var relabel []int32
	for _, n := range ns {
		ni := &d.c.nodes[n]
		state := ""
		if ni.state != migOK {
			state = ", mig.config.state=" + orUnset(ni.gpu.MIGConfigState)
		}
		if len(now) < d.e.maxNames {
			now = append(now, fmt.Sprintf("%s (product %s, mig.config=%s%s)", ni.node.Name, orUnset(ni.gpu.Product), orUnset(ni.gpu.MIGConfig), state))
		} else if len(now) == d.e.maxNames {
			now = append(now, fmt.Sprintf("and %d more", len(ns)-d.e.maxNames))
		}
		products[ni.gpu.BaseProduct()+"-MIG-"+p] = true
		if ni.gpu.SingleProfile() != p && ni.gpu.MIGConfig != "all-"+p {
			relabel = append(relabel, n)
		}
	}
	sel := make([]string, 0, len(products))
	for _, pr := range sortedKeys(products) {
		sel = append(sel, LabelProduct+"="+pr)
	}
	keep := fmt.Sprintf("keep mig.strategy=single and ask for nvidia.com/gpu with nodeSelector %s", strings.Join(sel, " (or ")+strings.Repeat(")", len(sel)-1))
	if len(relabel) > 0 {
		keep = fmt.Sprintf("keep mig.strategy=single, give %s the one-profile layout nvidia.com/mig.config=all-%s (drain first: the change destroys MIG instances and the work on them), and ask for nvidia.com/gpu with nodeSelector %s",
			d.nodeCountNames(relabel), p, strings.Join(sel, " (or ")+strings.Repeat(")", len(sel)-1))
	}
	mixed := fmt.Sprintf("switch those nodes' device plugin and GFD to mig.strategy=mixed (GPU Operator: %s) and give them a layout with %s (nvidia.com/mig.config=all-%s or a custom one): then they advertise %s", SwitchToMixed, p, p, r)
	d.add(d.finding(s, verdict.RuleStrategyMismatch, verdict.SeverityFail,
		fmt.Sprintf("%s asks %s, but the nodes whose GPUs have %s instances use mig.strategy=single: %s. Under single the device plugin advertises MIG instances as nvidia.com/gpu (product <GPU>-MIG-<profile>), never as %s, whatever the layout.",
			d.setName(s), r, p, strings.Join(now, "; "), r),
		upperFirst(keep)+"; or "+mixed+".", ns))
}

// strategyNote says under which MIG strategy a layout with GPU resource r
// is advertised as r, for fixes that propose a layout.
func strategyNote(r string) string {
	if p, ok := MIGProfileOf(r); ok {
		return fmt.Sprintf("the device plugin and GFD must run mig.strategy=mixed to advertise it as %s (under single, %s instances are advertised as nvidia.com/gpu)", r, p)
	}
	return "under mig.strategy=mixed only GPUs with MIG disabled are advertised as nvidia.com/gpu; under single, a layout of one profile on every GPU is advertised as nvidia.com/gpu too"
}

// gpuMeaning warns when nvidia.com/gpu means a full GPU on some usable
// nodes and a MIG instance (single strategy) on others.
func (d *diag) gpuMeaning(s *setState, ns []int32) {
	if s.ps.Requests[ResourceGPU] <= 0 || len(ns) == 0 {
		return
	}
	kinds := d.gpuMeanings(ns)
	if len(kinds) == 1 {
		return
	}
	var parts []string
	var single []int32
	for _, k := range sortedKeys(kinds) {
		parts = append(parts, fmt.Sprintf("a %s on %s", k, d.nodeCountNames(kinds[k])))
		if strings.HasPrefix(k, "MIG") {
			single = append(single, kinds[k]...)
		}
	}
	d.add(d.finding(s, verdict.RuleStrategyMismatch, verdict.SeverityWarn,
		fmt.Sprintf("%s asks nvidia.com/gpu, which means %s (mig.strategy=single advertises MIG instances as nvidia.com/gpu). Its ranks may land on either and mix MIG instances with full GPUs.",
			d.setName(s), strings.Join(parts, ", ")),
		fmt.Sprintf("Pin the job with a nodeSelector on %s to the kind of device it needs.", LabelProduct), single))
}

// shortLayouts warns when a usable node advertises fewer instances of a
// requested profile than its applied layout gives (gpu-operator#693).
func (d *diag) shortLayouts(s *setState, ns []int32) {
	for _, r := range s.ps.migResources() {
		j := d.c.resIndex(r)
		var short []int32
		var parts []string
		for _, n := range ns {
			ni := &d.c.nodes[n]
			ok, per := ni.tgt.offers(r)
			if !ok || per == 0 || ni.gpu.Count == 0 || ni.state != migOK {
				continue
			}
			want := int64(per * ni.gpu.Count)
			if have := d.c.allocOf(int(n), j); have < want {
				short = append(short, n)
				if len(parts) < d.e.maxNames {
					parts = append(parts, fmt.Sprintf("%s advertises %d, mig.config=%s gives %d per GPU x %s = %d", ni.node.Name, have, ni.gpu.MIGConfig, per, plural(ni.gpu.Count, "GPU"), want))
				}
			}
		}
		if len(short) == 0 {
			continue
		}
		d.add(d.finding(s, verdict.RuleMIGLayoutInvalid, verdict.SeverityWarn,
			fmt.Sprintf("Fewer %s are advertised than the MIG layout creates on %s: %s.", r, d.nodeCountNames(short), strings.Join(parts, "; ")),
			"Check the device plugin and mig-manager on those nodes (kubectl describe node; their pod logs); restarting the device plugin pod re-advertises the instances. Cluster autoscalers that only know nvidia.com/gpu cannot add MIG capacity.", short))
	}
}

// multiPod: MIG instances in a job of more than one GPU pod.
func (d *diag) multiPod() {
	pods := d.w.gpuPods()
	if pods < 2 {
		return
	}
	var migSets, fullSets []string
	for i := range d.sets {
		s := &d.sets[i]
		if !s.ps.gpuRequest() {
			continue
		}
		if s.mig {
			migSets = append(migSets, fmt.Sprintf("%s: %s", s.label, fmtGPURequests(s.ps.Requests)))
		} else {
			fullSets = append(fullSets, s.label)
		}
	}
	if len(migSets) == 0 {
		return
	}
	msg := fmt.Sprintf("The job runs %d GPU pods on MIG instances (%s). MIG has no P2P or NVLink, and ranks in different pods cannot share memory, so NCCL connects every pair of ranks over the network (NET: sockets or IB), even two instances of one GPU on one node. Expect much lower collective bandwidth than on full GPUs, and NCCL init hangs if the network path is blocked.",
		pods, strings.Join(migSets, "; "))
	if len(fullSets) > 0 {
		msg += fmt.Sprintf(" It also mixes MIG instances with full GPUs (%s): the slowest path sets the pace.", strings.Join(fullSets, ", "))
	}
	d.add(d.finding(nil, verdict.RuleMIGMultiPod, verdict.SeverityWarn, msg,
		"For MIG, run all ranks in one pod on instances of one physical GPU (one process per instance, NCCL_MULTI_RANK_GPU_ENABLE=1 with NCCL's MIG support); for multi-node training ask for full GPUs (nvidia.com/gpu on nodes with MIG disabled).", nil))
}
