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
		// the API server accepts them only with the gate on.
		tv, err1 := strconv.ParseInt(tol.Value, 10, 64)
		nv, err2 := strconv.ParseInt(t.Value, 10, 64)
		if err1 != nil || err2 != nil {
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
		if r.Key != "metadata.name" || !r.matches(n.Name, true) {
			return false
		}
	}
	return true
}

func (r *Requirement) matches(v string, present bool) bool {
	switch r.Operator {
	case "In":
		return present && contains(r.Values, v)
	case "NotIn":
		return !present || !contains(r.Values, v)
	case "Exists":
		return present
	case "DoesNotExist":
		return !present
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

func contains(list []string, v string) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}
