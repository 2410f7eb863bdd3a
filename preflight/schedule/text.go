package schedule

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/rankgate/rankgate/topology"
)

// Message helpers. Messages name nodes and resources; lists are cut after
// a few names with "and N more" (the finding's Nodes field has up to 50).

func (d *diag) names(ns []int32) string {
	out := make([]string, 0, d.e.maxNames+1)
	for i, n := range ns {
		if i == d.e.maxNames {
			out = append(out, fmt.Sprintf("and %d more", len(ns)-i))
			break
		}
		out = append(out, d.c.nodes[n].node.Name)
	}
	return strings.Join(out, ", ")
}

// nodeCountNames: "node gpu-1" or "3 nodes (gpu-1, gpu-2, gpu-3)".
func (d *diag) nodeCountNames(ns []int32) string {
	if len(ns) == 1 {
		return "node " + d.c.nodes[ns[0]].node.Name
	}
	return fmt.Sprintf("%d nodes (%s)", len(ns), d.names(ns))
}

func (d *diag) nodeNames(ns []int32, max int) []string {
	if len(ns) == 0 {
		return nil
	}
	out := make([]string, 0, min(len(ns), max))
	for _, n := range ns {
		if len(out) == max {
			break
		}
		out = append(out, d.c.nodes[n].node.Name)
	}
	return out
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func limit(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func limit32(s []int32, n int) []int32 {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-3] + "..."
	}
	return s
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0:0]
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// dedupe drops repeated node indices, keeping the first of each.
func (d *diag) dedupe(s []int32) []int32 {
	seen := make([]uint64, (len(d.c.nodes)+63)/64)
	out := make([]int32, 0, len(s))
	for _, v := range s {
		if seen[v/64]&(1<<(v%64)) == 0 {
			seen[v/64] |= 1 << (v % 64)
			out = append(out, v)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedMap(m map[string]string) string {
	var b strings.Builder
	for _, k := range sortedKeys(m) {
		b.WriteString(k + "=" + m[k] + ",")
	}
	return b.String()
}

func orUnset(s string) string {
	if s == "" {
		return "(unset)"
	}
	return s
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func smsText(sms int) string {
	if sms <= 0 {
		return "SMs unknown: no public source"
	}
	return fmt.Sprintf("%d SMs", sms)
}

// memText is a catalog profile's memory; 0 where no public source gives it.
func memText(mib uint64) string {
	if mib == 0 {
		return "memory unknown"
	}
	return fmt.Sprintf("%d MiB", mib)
}

// fmtAmount prints an amount in the unit Kubernetes users read.
func fmtAmount(res string, v int64) string {
	switch res {
	case ResourceCPU:
		if v%1000 == 0 {
			return fmt.Sprintf("%d", v/1000)
		}
		return fmt.Sprintf("%dm", v)
	case ResourceMem, "ephemeral-storage":
		const gi = 1 << 30
		if v >= gi && v%(gi/4) == 0 {
			return fmt.Sprintf("%gGi", float64(v)/gi)
		}
		if v >= gi {
			return fmt.Sprintf("%.1fGi", float64(v)/gi)
		}
		return fmt.Sprintf("%dMi", v>>20)
	}
	return fmt.Sprintf("%d", v)
}

// fmtRequests prints a pod's requests, GPU resources first, without the
// implicit pod count.
func fmtRequests(r Resources) string {
	var parts []string
	for _, k := range r.sortedNames() {
		if k == ResourcePods {
			continue
		}
		parts = append(parts, k+": "+fmtAmount(k, r[k]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// fmtGPURequests prints only the GPU resources of a pod's requests.
func fmtGPURequests(r Resources) string {
	var parts []string
	for _, k := range r.sortedNames() {
		if topology.IsGPUResource(k) {
			parts = append(parts, k+": "+fmtAmount(k, r[k]))
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// shapeInfo is a GPU shape the cluster offers.
type shapeInfo struct {
	res   string
	model string
	// single is the MIG profile nvidia.com/gpu stands for under
	// mig.strategy=single ("" for full GPUs), product the label to select
	// those nodes by.
	single, product string
	sms             int
	memMiB          uint64
	nodes           int
	total           int64
}

// askDescription names a requested GPU resource with its SMs and memory on
// the GPU models of the cluster (or of the catalog when none has it).
func (d *diag) askDescription(r string) string {
	p, ok := MIGProfileOf(r)
	if !ok {
		return r + " (full GPUs)"
	}
	seen := map[string]bool{}
	var parts []string
	for i := range d.c.nodes {
		m := d.c.nodes[i].model
		if m == nil || seen[m.Name] {
			continue
		}
		seen[m.Name] = true
		if prof, ok := m.Profile(p); ok {
			parts = append(parts, fmt.Sprintf("%s, %s on %s", smsText(prof.SMs), memText(prof.MemoryMiB), m.Name))
		}
	}
	if len(parts) == 0 {
		for _, m := range d.e.catalog.Models {
			if prof, ok := m.Profile(p); ok {
				parts = append(parts, fmt.Sprintf("%s, %s on %s", smsText(prof.SMs), memText(prof.MemoryMiB), m.Name))
			}
		}
		if len(parts) > 0 {
			return fmt.Sprintf("%s (%s; no GPU model in this cluster has that profile)", r, strings.Join(parts, "; "))
		}
		return r + " (not a profile of any GPU model in rankgate's catalog)"
	}
	sort.Strings(parts)
	return fmt.Sprintf("%s (%s)", r, strings.Join(parts, "; "))
}

// nearest lists up to three GPU shapes the cluster offers, closest to r in
// memory and SMs first.
func (d *diag) nearest(r string) string {
	list := d.c.shapes()
	if len(list) == 0 {
		return ""
	}
	askSMs, askMem := d.c.askedShape(r)
	dist := func(sh *shapeInfo) float64 {
		if askMem == 0 {
			return -float64(sh.total)
		}
		dd := 10.0
		if sh.memMiB > 0 {
			dd = math.Abs(math.Log(float64(sh.memMiB) / float64(askMem)))
		}
		if askSMs > 0 && sh.sms > 0 {
			dd += math.Abs(math.Log(float64(sh.sms) / float64(askSMs)))
		}
		return dd
	}
	sort.Slice(list, func(i, j int) bool {
		di, dj := dist(list[i]), dist(list[j])
		if di != dj {
			return di < dj
		}
		return list[i].res+list[i].model+list[i].single < list[j].res+list[j].model+list[j].single
	})
	var parts []string
	for _, sh := range list[:min(3, len(list))] {
		desc := smsText(sh.sms)
		if sh.model == "" {
			desc = "GPU model unknown: the nodes carry no " + LabelProduct + " label"
		}
		if sh.memMiB > 0 {
			desc += fmt.Sprintf(", %d MiB", sh.memMiB)
		}
		if askMem > 0 && sh.memMiB > 0 && math.Abs(float64(sh.memMiB)-float64(askMem)) <= 0.08*float64(askMem) && askSMs > 0 && sh.sms > 0 && sh.sms != askSMs {
			desc += fmt.Sprintf(": same memory, %d instead of %d SMs", sh.sms, askSMs)
		}
		if sh.single != "" {
			// Asking nvidia.com/gpu alone may land on full GPUs: say how
			// to ask for this shape.
			desc = fmt.Sprintf("MIG %s under mig.strategy=single, %s; ask nvidia.com/gpu with nodeSelector %s=%s", sh.single, desc, LabelProduct, sh.product)
		}
		if sh.model != "" {
			desc += ", " + sh.model
		}
		parts = append(parts, fmt.Sprintf("%s (%s) on %s, %d in all", sh.res, desc, plural(sh.nodes, "node"), sh.total))
	}
	return strings.Join(parts, "; ")
}

// shapes lists the GPU shapes the cluster offers: one per GPU resource and
// GPU model, with its node count and total.
func (c *Cluster) shapes() []*shapeInfo {
	type key struct{ res, model, single string }
	shapes := map[key]*shapeInfo{}
	for i := range c.nodes {
		ni := &c.nodes[i]
		row := i * len(c.resName)
		for j, name := range c.resName {
			v := c.alloc[row+j]
			if v <= 0 || !topology.IsGPUResource(name) {
				continue
			}
			model := ni.gpu.BaseProduct()
			if ni.model != nil {
				model = ni.model.Name
			}
			single := ""
			if name == ResourceGPU {
				single = ni.gpu.SingleProfile()
			}
			k := key{name, model, single}
			sh, ok := shapes[k]
			if !ok {
				sh = &shapeInfo{res: name, model: model, single: single, product: ni.gpu.Product}
				sh.sms, sh.memMiB = ni.shapeOf(name)
				shapes[k] = sh
			}
			sh.nodes++
			sh.total += v
		}
	}
	list := make([]*shapeInfo, 0, len(shapes))
	for _, sh := range shapes {
		list = append(list, sh)
	}
	return list
}

// askedShape gives the SMs and memory of MIG resource r from a GPU model
// of the cluster (memory from the profile name otherwise); 0, 0 for full
// GPUs.
func (c *Cluster) askedShape(r string) (sms int, memMiB uint64) {
	p, ok := MIGProfileOf(r)
	if !ok {
		return 0, 0
	}
	for i := range c.nodes {
		if m := c.nodes[i].model; m != nil {
			if prof, ok := m.Profile(p); ok {
				sms, memMiB = prof.SMs, prof.MemoryMiB
				break
			}
		}
	}
	if memMiB == 0 {
		if _, gb, err := parseProfileGB(p); err == nil {
			memMiB = uint64(gb) * 1024
		}
	}
	return sms, memMiB
}

// shapeOf gives SMs and memory of one unit of a GPU resource on this node:
// GFD labels first, the catalog second.
func (n *nodeInfo) shapeOf(res string) (int, uint64) {
	p, isMIG := MIGProfileOf(res)
	if !isMIG {
		p = n.gpu.SingleProfile()
	}
	if p != "" {
		l := n.gpu.MIGProfiles[p]
		sms, mem := l.SMs, l.MemoryMiB
		if n.model != nil {
			if prof, ok := n.model.Profile(p); ok {
				if sms == 0 {
					sms = prof.SMs
				}
				if mem == 0 {
					mem = prof.MemoryMiB
				}
			}
		}
		return sms, mem
	}
	sms, mem := n.gpu.SMs, n.gpu.MemoryMiB
	if n.model != nil {
		if sms == 0 {
			sms = n.model.SMs
		}
		if mem == 0 {
			mem = n.model.MemoryMiB
		}
	}
	return sms, mem
}

func parseProfileGB(p string) (int, int, error) {
	return topology.ParseProfileName(p)
}
