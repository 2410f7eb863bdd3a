package schedule

import (
	"strconv"
	"strings"
)

// exclusion says why a node is excluded for a pod set. The zero value
// admits the node.
type exclusion struct {
	kind   exclusionKind
	detail string // the taint, the selector key, ...
}

type exclusionKind uint8

const (
	admitted exclusionKind = iota
	exNodeName
	exSelector
	exAffinity
	exTaint
	exCordoned
	exNotReady
)

// transient: the node is out only while cordoned or unhealthy (taints
// Kubernetes sets from node conditions: node.kubernetes.io/...).
func (e exclusion) transient() bool {
	return e.kind == exCordoned || e.kind == exNotReady ||
		e.kind == exTaint && strings.HasPrefix(e.detail, "node.kubernetes.io/")
}

func (k exclusionKind) String() string {
	switch k {
	case exNodeName:
		return "not the node the pod is pinned to (spec.nodeName)"
	case exSelector:
		return "nodeSelector does not match"
	case exAffinity:
		return "required node affinity does not match"
	case exTaint:
		return "taint not tolerated"
	case exCordoned:
		return "cordoned (spec.unschedulable)"
	case exNotReady:
		return "not Ready"
	}
	return "admitted"
}

// admits applies a pod's constraints to a node with kube-scheduler's
// semantics for nodeName, nodeSelector, required node affinity, taints with
// NoSchedule/NoExecute effects and cordons.
//
// It answers what k8s.io/component-helpers' nodeaffinity and
// FindMatchingUntoleratedTaint answer (TestAdmitsEqualsLibrary, 50,000
// random pods and nodes, and FuzzAdmitsEqualsLibrary prove it) and stays
// hand-written: it runs for every pod set and node of every placement over
// the engine's own model, which `rankgate diagnose` also fills from pasted
// outputs, and says which taint or selector pair excludes a node.
// BenchmarkAdmits measures 0 allocations and about 0.4-0.65 µs a node here
// against 6 allocations (640 B) and 1.7-5 µs with the libraries on objects
// converted ahead of time.
func (c *Constraints) admits(n *Node) exclusion {
	if c.NodeName != "" && c.NodeName != n.Name {
		return exclusion{kind: exNodeName, detail: c.NodeName}
	}
	for k, v := range c.NodeSelector {
		if got, ok := n.Labels[k]; !ok || got != v {
			return exclusion{kind: exSelector, detail: k + "=" + v}
		}
	}
	if len(c.Affinity) > 0 {
		ok := false
		for i := range c.Affinity {
			if c.Affinity[i].matches(n) {
				ok = true
				break
			}
		}
		if !ok {
			return exclusion{kind: exAffinity}
		}
	}
	if n.Unschedulable && !c.tolerates(Taint{Key: "node.kubernetes.io/unschedulable", Effect: "NoSchedule"}) {
		return exclusion{kind: exCordoned}
	}
	if n.NotReady && !c.tolerates(Taint{Key: "node.kubernetes.io/not-ready", Effect: "NoSchedule"}) {
		return exclusion{kind: exNotReady}
	}
	for _, t := range n.Taints {
		if t.Effect != "NoSchedule" && t.Effect != "NoExecute" {
			continue
		}
		if !c.tolerates(t) {
			return exclusion{kind: exTaint, detail: t.String()}
		}
	}
	return exclusion{}
}

func (c *Constraints) tolerates(t Taint) bool {
	for _, tol := range c.Tolerations {
		if tol.tolerates(t) {
			return true
		}
	}
	return false
}

// tolerates follows k8s.io/api/core/v1 Toleration.ToleratesTaint with
// comparison operators enabled.
func (tol Toleration) tolerates(t Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	if tol.Key != "" && tol.Key != t.Key {
		return false
	}
	switch tol.Operator {
	case "", "Equal":
		return tol.Value == t.Value
	case "Exists":
		return true
	case "Lt", "Gt":
		// Alpha in Kubernetes 1.35 (TaintTolerationComparisonOperators):
		// the API server accepts them only with the gate on. Both values
		// must be canonical decimal integers ("5", not "05" or "+5").
		tv, ok1 := decimalInteger(tol.Value)
		nv, ok2 := decimalInteger(t.Value)
		if !ok1 || !ok2 {
			return false
		}
		if tol.Operator == "Lt" {
			return nv < tv
		}
		return nv > tv
	}
	return false
}

func (s *SelectorTerm) matches(n *Node) bool {
	// A term with no requirements matches nothing (Kubernetes semantics).
	if len(s.MatchExpressions) == 0 && len(s.MatchFields) == 0 {
		return false
	}
	for _, r := range s.MatchExpressions {
		v, ok := n.Labels[r.Key]
		if !r.matches(v, ok) {
			return false
		}
	}
	for _, r := range s.MatchFields {
		if !r.matchesField(n) {
			return false
		}
	}
	return true
}

// matchesField applies a matchFields requirement: In or NotIn with one
// value, against metadata.name (the one field Kubernetes offers; any
// other field reads as empty). Any other requirement is invalid and, as
// in Kubernetes, fails its term.
func (r *Requirement) matchesField(n *Node) bool {
	if len(r.Values) != 1 {
		return false
	}
	v := ""
	if r.Key == "metadata.name" {
		v = n.Name
	}
	switch r.Operator {
	case "In":
		return v == r.Values[0]
	case "NotIn":
		return v != r.Values[0]
	}
	return false
}

func (r *Requirement) matches(v string, present bool) bool {
	switch r.Operator {
	// An invalid requirement (In or NotIn without values, Exists or
	// DoesNotExist with values) fails its term, as in Kubernetes.
	case "In":
		return present && contains(r.Values, v)
	case "NotIn":
		return len(r.Values) > 0 && (!present || !contains(r.Values, v))
	case "Exists":
		return len(r.Values) == 0 && present
	case "DoesNotExist":
		return len(r.Values) == 0 && !present
	case "Gt", "Lt":
		if !present || len(r.Values) != 1 {
			return false
		}
		have, err1 := strconv.ParseInt(v, 10, 64)
		want, err2 := strconv.ParseInt(r.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if r.Operator == "Gt" {
			return have > want
		}
		return have < want
	}
	return false
}

// decimalInteger parses a canonical decimal integer: an optional minus,
// no leading zeros, no plus sign (as Kubernetes reads the values of Lt and
// Gt tolerations and taints).
func decimalInteger(s string) (int64, bool) {
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || digits[0] < '1' && digits != "0" || digits == "0" && s != "0" {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

func contains(list []string, v string) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}
