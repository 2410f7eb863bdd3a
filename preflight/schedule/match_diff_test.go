package schedule

import (
	"math/rand/v2"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// The engine matches its own model (Constraints, Node) and stays pure Go;
// these tests prove that admits answers what kube-scheduler's libraries
// answer for the same pod and node: k8s.io/component-helpers'
// nodeaffinity (nodeSelector and required node affinity) and
// FindMatchingUntoleratedTaint (NoSchedule and NoExecute taints, with the
// Lt and Gt toleration operators enabled), with spec.nodeName, cordons and
// not-Ready nodes as the scheduler's NodeName and NodeUnschedulable
// plugins and the node lifecycle controller's taints treat them.
//
// Keys and values are drawn from what the API server accepts in labels
// (it rejects a pod or node with others); operators, value counts and
// field selectors are drawn freely, invalid ones included.

// chooser draws choices: math/rand for the seeded test, the fuzzer's
// bytes for the fuzz target.
type chooser interface{ IntN(n int) int }

type byteChooser struct{ b []byte }

func (c *byteChooser) IntN(n int) int {
	if len(c.b) == 0 {
		return 0
	}
	v := int(c.b[0])
	c.b = c.b[1:]
	return v % n
}

var (
	diffKeys   = []string{"gpu", "zone", "nvidia.com/gpu.product", "example.com/tier", "node.kubernetes.io/not-ready", "node.kubernetes.io/unschedulable"}
	diffValues = []string{"", "a100", "h100", "1", "2", "10", "05", "0", "9223372036854775807", "99999999999999999999"}
	diffOps    = []string{"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Equal", ""}
	diffTolOps = []string{"", "Equal", "Exists", "Lt", "Gt", "In"}
	diffEffect = []string{"", "NoSchedule", "PreferNoSchedule", "NoExecute"}
	diffNames  = []string{"n0", "n1", "n2"}
)

func pick(r chooser, xs []string) string { return xs[r.IntN(len(xs))] }

func randValues(r chooser) []string {
	var out []string
	for range r.IntN(4) {
		out = append(out, pick(r, diffValues))
	}
	return out
}

func randRequirements(r chooser, keys []string) []Requirement {
	var out []Requirement
	for range r.IntN(3) {
		out = append(out, Requirement{Key: pick(r, keys), Operator: pick(r, diffOps), Values: randValues(r)})
	}
	return out
}

func randConstraints(r chooser) Constraints {
	var c Constraints
	if r.IntN(6) == 0 {
		c.NodeName = pick(r, diffNames)
	}
	if n := r.IntN(3); n > 0 {
		c.NodeSelector = map[string]string{}
		for range n {
			c.NodeSelector[pick(r, diffKeys)] = pick(r, diffValues)
		}
	}
	if r.IntN(2) == 0 {
		for range r.IntN(3) + 1 {
			c.Affinity = append(c.Affinity, SelectorTerm{
				MatchExpressions: randRequirements(r, diffKeys),
				MatchFields:      randRequirements(r, []string{"metadata.name", "metadata.name", "spec.unschedulable"}),
			})
		}
	}
	for range r.IntN(4) {
		tol := Toleration{Operator: pick(r, diffTolOps), Value: pick(r, diffValues), Effect: pick(r, diffEffect)}
		if r.IntN(4) != 0 {
			tol.Key = pick(r, diffKeys)
		}
		c.Tolerations = append(c.Tolerations, tol)
	}
	return c
}

func randNode(r chooser) *Node {
	n := &Node{Name: pick(r, diffNames), Unschedulable: r.IntN(5) == 0, NotReady: r.IntN(5) == 0}
	if k := r.IntN(4); k > 0 {
		n.Labels = map[string]string{}
		for range k {
			n.Labels[pick(r, diffKeys)] = pick(r, diffValues)
		}
	}
	for range r.IntN(4) {
		n.Taints = append(n.Taints, Taint{Key: pick(r, diffKeys), Value: pick(r, diffValues), Effect: pick(r, diffEffect[1:])})
	}
	return n
}

func coreRequirements(in []Requirement) []corev1.NodeSelectorRequirement {
	var out []corev1.NodeSelectorRequirement
	for _, q := range in {
		out = append(out, corev1.NodeSelectorRequirement{Key: q.Key, Operator: corev1.NodeSelectorOperator(q.Operator), Values: q.Values})
	}
	return out
}

// corePod and coreNode are the Kubernetes objects the model stands for.
func corePod(c *Constraints) *corev1.Pod {
	p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: c.NodeName, NodeSelector: c.NodeSelector}}
	if c.Affinity != nil {
		sel := &corev1.NodeSelector{}
		for _, t := range c.Affinity {
			sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, corev1.NodeSelectorTerm{
				MatchExpressions: coreRequirements(t.MatchExpressions), MatchFields: coreRequirements(t.MatchFields),
			})
		}
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: sel}}
	}
	for _, t := range c.Tolerations {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{
			Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value, Effect: corev1.TaintEffect(t.Effect),
		})
	}
	return p
}

func coreNode(n *Node) *corev1.Node {
	out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels}, Spec: corev1.NodeSpec{Unschedulable: n.Unschedulable}}
	for _, t := range n.Taints {
		out.Spec.Taints = append(out.Spec.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	return out
}

// libraryAdmits judges with the libraries, in the order admits reports.
func libraryAdmits(c *Constraints, n *Node) exclusion {
	pod, node := corePod(c), coreNode(n)
	log := logr.Discard()
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Name {
		return exclusion{kind: exNodeName, detail: c.NodeName}
	}
	selectorOnly := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: pod.Spec.NodeSelector}}
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(selectorOnly).Match(node); !ok {
		return exclusion{kind: exSelector}
	}
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !ok {
		return exclusion{kind: exAffinity}
	}
	tols := pod.Spec.Tolerations
	if n.Unschedulable && !v1helper.TolerationsTolerateTaint(log, tols, &corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}, true) {
		return exclusion{kind: exCordoned}
	}
	if n.NotReady && !v1helper.TolerationsTolerateTaint(log, tols, &corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}, true) {
		return exclusion{kind: exNotReady}
	}
	t, untolerated := v1helper.FindMatchingUntoleratedTaint(log, node.Spec.Taints, tols, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, true)
	if untolerated {
		return exclusion{kind: exTaint, detail: Taint{Key: t.Key, Value: t.Value, Effect: string(t.Effect)}.String()}
	}
	return exclusion{}
}

func checkAdmitsAgainstLibrary(t testing.TB, c *Constraints, n *Node) {
	got, want := c.admits(n), libraryAdmits(c, n)
	if got.kind == exSelector {
		got.detail = "" // the library does not say which pair failed
	}
	require.Equal(t, want, got, "constraints %+v\nnode %+v", *c, *n)
}

func TestAdmitsEqualsLibrary(t *testing.T) {
	r := rand.New(rand.NewPCG(26, 2))
	for range 50000 {
		c, n := randConstraints(r), randNode(r)
		checkAdmitsAgainstLibrary(t, &c, n)
	}
}

// go test ./preflight/schedule -run '^$' -fuzz FuzzAdmitsEqualsLibrary -fuzztime 60s
func FuzzAdmitsEqualsLibrary(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 1, 2, 1, 0, 3, 1, 4, 2, 5, 1, 1, 0, 2, 3, 1, 7, 5, 1, 2, 0, 1, 3, 3, 2, 1, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &byteChooser{b: data}
		c := randConstraints(r)
		checkAdmitsAgainstLibrary(t, &c, randNode(r))
	})
}

// Cases where admits once answered otherwise than Kubernetes.
func TestAdmitsAsKubernetes(t *testing.T) {
	node := &Node{Name: "n1", Labels: map[string]string{"gpu": "a100"}, Taints: []Taint{{Key: "gpu", Value: "05", Effect: "NoSchedule"}}}
	term := func(r ...Requirement) []SelectorTerm { return []SelectorTerm{{MatchExpressions: r}} }
	gpuTol := []Toleration{{Key: "gpu", Operator: "Exists"}}
	for name, tc := range map[string]struct {
		c    Constraints
		want exclusionKind
	}{
		"Gt reads only canonical integers: taint value 05 is no number": {
			c: Constraints{Tolerations: []Toleration{{Key: "gpu", Operator: "Gt", Value: "3"}}}, want: exTaint,
		},
		"NotIn without values fails its term": {
			c: Constraints{Affinity: term(Requirement{Key: "zone", Operator: "NotIn"}), Tolerations: gpuTol}, want: exAffinity,
		},
		"Exists with values fails its term": {
			c: Constraints{Affinity: term(Requirement{Key: "gpu", Operator: "Exists", Values: []string{"a100"}}), Tolerations: gpuTol}, want: exAffinity,
		},
		"matchFields In takes exactly one value": {
			c:    Constraints{Affinity: []SelectorTerm{{MatchFields: []Requirement{{Key: "metadata.name", Operator: "In", Values: []string{"n1", "n2"}}}}}, Tolerations: gpuTol},
			want: exAffinity,
		},
		"matchFields NotIn on metadata.name": {
			c:    Constraints{Affinity: []SelectorTerm{{MatchFields: []Requirement{{Key: "metadata.name", Operator: "NotIn", Values: []string{"n2"}}}}}, Tolerations: gpuTol},
			want: admitted,
		},
	} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.c.admits(node).kind)
			require.Equal(t, tc.want, libraryAdmits(&tc.c, node).kind)
		})
	}
}

// BenchmarkAdmits measures admits, the inner loop of every placement
// (pod sets × nodes), against the libraries on objects converted ahead of
// time (library): a rank pod set with a nodeSelector, a required affinity
// and two tolerations over GPU nodes with two taints.
//
//	go test ./preflight/schedule -run '^$' -bench BenchmarkAdmits -benchmem
func BenchmarkAdmits(b *testing.B) {
	c := Constraints{
		NodeSelector: map[string]string{"nvidia.com/gpu.product": "h100"},
		Affinity: []SelectorTerm{{MatchExpressions: []Requirement{
			{Key: "zone", Operator: "In", Values: []string{"a100", "h100"}},
			{Key: "example.com/tier", Operator: "NotIn", Values: []string{"1"}},
		}}},
		Tolerations: []Toleration{{Key: "nvidia.com/gpu.product", Operator: "Exists", Effect: "NoSchedule"}, {Key: "gpu", Value: "10"}},
	}
	nodes := make([]*Node, 1000)
	for i := range nodes {
		nodes[i] = &Node{Name: diffNames[i%len(diffNames)],
			Labels: map[string]string{"nvidia.com/gpu.product": "h100", "zone": "h100", "example.com/tier": "2", "kubernetes.io/hostname": "x"},
			Taints: []Taint{{Key: "nvidia.com/gpu.product", Value: "h100", Effect: "NoSchedule"}, {Key: "gpu", Value: "10", Effect: "NoExecute"}}}
	}
	b.Run("own", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, n := range nodes {
				if c.admits(n).kind != admitted {
					b.Fatal("excluded")
				}
			}
		}
	})
	b.Run("library", func(b *testing.B) {
		pod := corePod(&c)
		aff := nodeaffinity.GetRequiredNodeAffinity(pod)
		core := make([]*corev1.Node, len(nodes))
		for i, n := range nodes {
			core[i] = coreNode(n)
		}
		noSchedule := func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}
		b.ReportAllocs()
		for b.Loop() {
			for _, n := range core {
				ok, _ := aff.Match(n)
				_, untolerated := v1helper.FindMatchingUntoleratedTaint(logr.Discard(), n.Spec.Taints, pod.Spec.Tolerations, noSchedule, true)
				if !ok || untolerated {
					b.Fatal("excluded")
				}
			}
		}
	})
}
