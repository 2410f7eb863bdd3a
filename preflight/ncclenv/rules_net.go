package ncclenv

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/rankgate/rankgate/verdict"
)

// Variables the network rules read.
const (
	envIgnoreNetMismatch = "NCCL_IGNORE_NET_MISMATCH"
	envSocketIfname      = "NCCL_SOCKET_IFNAME"
	envIBHCA             = "NCCL_IB_HCA"
)

// perNode are settings that may rightly differ between ranks: debugging
// output, and names of a node's own interfaces, files and HCAs (NCCL's
// own advice for nodes whose interfaces are named differently).
var perNode = map[string]bool{
	"NCCL_DEBUG": true, "NCCL_DEBUG_SUBSYS": true, "NCCL_DEBUG_FILE": true,
	envSocketIfname: true, envIBHCA: true, "NCCL_TOPO_FILE": true, "NCCL_TOPO_DUMP_FILE": true,
	"NCCL_VERSION": true, // the image's label, not a setting
}

// ifList is NCCL's interface filter syntax (NCCL_SOCKET_IFNAME,
// NCCL_IB_HCA): comma-separated prefixes, "^" before the list excludes
// them, "=" before it makes every entry an exact name; HCA entries may
// carry ":port".
type ifList struct {
	exclude, exact bool
	names          []string
}

func parseIfList(s string) ifList {
	var l ifList
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "^") {
		l.exclude, s = true, s[1:]
	}
	if strings.HasPrefix(s, "=") {
		l.exact, s = true, s[1:]
	}
	for _, e := range strings.Split(s, ",") {
		e, _, _ = strings.Cut(strings.TrimSpace(e), ":")
		if e != "" {
			l.names = append(l.names, e)
		}
	}
	return l
}

func (l ifList) matches(name string) bool {
	hit := false
	for _, p := range l.names {
		if (l.exact && name == p) || (!l.exact && strings.HasPrefix(name, p)) {
			hit = true
			break
		}
	}
	return hit != l.exclude
}

// selected are the names of have that l lets through.
func (l ifList) selected(have []string) []string {
	var out []string
	for _, h := range have {
		if l.matches(h) {
			out = append(out, h)
		}
	}
	return out
}

func ruleIgnoreNetMismatch(in Input) []verdict.Finding {
	rs := withSetting(in.Ranks, envIgnoreNetMismatch)
	if len(rs) == 0 {
		return nil
	}
	sets := map[string][]Rank{}
	judged := 0
	for _, r := range in.Ranks {
		if r.Net == nil || !r.Net.HCAsKnown {
			continue
		}
		judged++
		hcas := r.Net.HCAs
		if s, set, known := r.Env.String(envIBHCA); set && known {
			hcas = parseIfList(s).selected(hcas)
		}
		hcas = slices.Clone(hcas)
		sort.Strings(hcas)
		k := fmt.Sprintf("%d HCAs [%s]", len(hcas), strings.Join(hcas, " "))
		sets[k] = append(sets[k], r)
	}
	if len(sets) > 1 {
		msg := fmt.Sprintf("%s: %s=1 and the ranks' NIC sets differ:", joinLabels(rs), envIgnoreNetMismatch)
		for _, k := range sortedKeys(sets) {
			msg += fmt.Sprintf(" %s: %s;", joinLabels(sets[k]), k)
		}
		return []verdict.Finding{finding(verdict.RuleNCCLIgnoreNetMismatch, verdict.SeverityFail, rs,
			msg+" NCCL builds channels on NICs the peer does not have and hangs without an error (NVIDIA/nccl#2428)",
			"remove NCCL_IGNORE_NET_MISMATCH and give every rank the same NICs (NCCL_IB_HCA naming NICs every node has, the same RDMA resources in every replica)")}
	}
	if judged >= 2 && judged == len(in.Ranks) {
		return nil // every rank's NICs known and alike
	}
	return []verdict.Finding{finding(verdict.RuleNCCLIgnoreNetMismatch, verdict.SeverityWarn, rs,
		fmt.Sprintf("%s: %s=1: where ranks' NIC sets differ NCCL then hangs without an error instead of refusing to start (NVIDIA/nccl#2428); the ranks' NICs are not known here, so it cannot be ruled out", joinLabels(rs), envIgnoreNetMismatch),
		"remove NCCL_IGNORE_NET_MISMATCH unless every node of the job has the same NICs")}
}

func ruleSettingsDiffer(in Input) []verdict.Finding {
	var known []Rank
	for _, r := range in.Ranks {
		if r.Env != nil {
			known = append(known, r)
		}
	}
	if len(known) < 2 {
		return nil
	}
	names := map[string]bool{}
	for _, r := range known {
		for _, k := range r.Env.Tuning() {
			if !perNode[k] {
				names[k] = true
			}
		}
	}
	var differ []string
	for _, k := range sortedKeys(names) {
		vals := map[string]bool{}
		unresolved := false
		for _, r := range known {
			v, _, ok := r.Env.String(k)
			if !ok {
				unresolved = true
				break
			}
			vals[canon(v)] = true
		}
		if !unresolved && len(vals) > 1 {
			differ = append(differ, k)
		}
	}
	if len(differ) == 0 {
		return nil
	}
	var detail []string
	for _, k := range differ[:min(len(differ), 6)] {
		byVal := map[string][]Rank{}
		for _, r := range known {
			v, _, _ := r.Env.String(k)
			if v == "" {
				v = "(unset)"
			}
			byVal[v] = append(byVal[v], r)
		}
		var parts []string
		for _, v := range sortedKeys(byVal) {
			parts = append(parts, fmt.Sprintf("%s on %s", v, joinLabels(byVal[v])))
		}
		detail = append(detail, k+": "+strings.Join(parts, ", "))
	}
	if len(differ) > 6 {
		detail = append(detail, fmt.Sprintf("and %d more", len(differ)-6))
	}
	return []verdict.Finding{finding(verdict.RuleNCCLSettingsDiffer, verdict.SeverityWarn, known,
		"NCCL, libfabric or UCX settings differ between ranks of one job; ranks that disagree on transports, protocols or algorithms fail or hang at init: "+strings.Join(detail, "; "),
		"give every replica type the same NCCL_*, FI_* and UCX_* settings (differences in interface names per node belong in /etc/nccl.conf on the nodes)")}
}

func ruleSocketIfname(in Input) []verdict.Finding {
	var out []verdict.Finding
	for _, r := range in.Ranks {
		s, set, known := r.Env.String(envSocketIfname)
		if !set || !known || r.Net == nil {
			continue
		}
		l := parseIfList(s)
		if len(l.selected(r.Net.Interfaces)) > 0 {
			continue
		}
		out = append(out, finding(verdict.RuleNCCLSocketIfnameMissing, verdict.SeverityFail, []Rank{r},
			fmt.Sprintf("%s sets %s=%s and its node has no such interface (it has %s): NCCL's bootstrap finds no socket interface and init fails", r.label(), envSocketIfname, s, listOrNone(r.Net.Interfaces)),
			"name an interface the node has, a prefix every node's interface starts with (eth, ens), or unset NCCL_SOCKET_IFNAME"))
	}
	return out
}

func ruleIBHCA(in Input) []verdict.Finding {
	var out []verdict.Finding
	for _, r := range in.Ranks {
		s, set, known := r.Env.String(envIBHCA)
		if !set || !known || r.Net == nil || !r.Net.HCAsKnown {
			continue
		}
		if len(parseIfList(s).selected(r.Net.HCAs)) > 0 {
			continue
		}
		out = append(out, finding(verdict.RuleNCCLIBHCAMissing, verdict.SeverityWarn, []Rank{r},
			fmt.Sprintf("%s sets %s=%s and its node has no such RDMA device (it has %s): NCCL finds no IB device and falls back to TCP sockets", r.label(), envIBHCA, s, listOrNone(r.Net.HCAs)),
			"name HCAs the node has (`ls /sys/class/infiniband`), give the pod its RDMA devices, or unset NCCL_IB_HCA"))
	}
	return out
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// canon is a value as NCCL compares it: numbers by the integer NCCL reads
// ("0x1" and "1" agree), other values as written, blanks trimmed.
func canon(v string) string {
	v = strings.TrimSpace(v)
	if v != "" && (v[0] == '-' || v[0] == '+' || (v[0] >= '0' && v[0] <= '9')) {
		if n, ok := strtoll(v); ok {
			return fmt.Sprint(n)
		}
	}
	return v
}
