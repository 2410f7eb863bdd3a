package schedule

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A Model changed node by node judges exactly as NewCluster over the same
// nodes, after every change of a random sequence.
func TestModelMatchesNewCluster(t *testing.T) {
	e := New()
	pool := benchFleet(60, 0)
	rng := rand.New(rand.NewPCG(7, 11))
	m := e.NewModel()
	cur := map[string]Node{}
	jobs := benchJobs()
	// Small jobs too, so that some fit and some wait.
	jobs["small-2g"] = Workload{Kind: "PyTorchJob", Namespace: "ml", Name: "small", PodSets: []PodSet{
		{Name: "Worker", Count: 4, Requests: Resources{MIGPrefix + "2g.20gb": 1, ResourcePods: 1}, Pods: []string{"ml/small-worker-0"}},
	}}
	jobs["gpu-pinned"] = Workload{Kind: "PyTorchJob", Namespace: "ml", Name: "pinned", PodSets: []PodSet{
		{Name: "Worker", Count: 2, Requests: Resources{ResourceGPU: 8, ResourcePods: 1},
			Constraints: Constraints{NodeSelector: map[string]string{"topology.kubernetes.io/zone": "zone-1"}, Tolerations: []Toleration{{Key: "gpu", Operator: "Exists"}}}},
	}}
	mutate := func(n Node) Node {
		n.Labels = maps.Clone(n.Labels)
		n.Allocatable = maps.Clone(n.Allocatable)
		switch rng.IntN(6) {
		case 0:
			n.Unschedulable = !n.Unschedulable
		case 1:
			n.NotReady = !n.NotReady
		case 2:
			n.Labels[LabelMIGConfig] = []string{"all-1g.10gb", "all-disabled", "all-balanced", "all-2g.20gb"}[rng.IntN(4)]
			n.Labels[LabelMIGConfigState] = []string{MIGStateSuccess, MIGStatePending, MIGStateFailed}[rng.IntN(3)]
		case 3:
			n.Taints = append(slices.Clone(n.Taints), Taint{Key: "gpu", Value: "x", Effect: "NoSchedule"})
		case 4:
			for r := range n.Allocatable {
				if strings.HasPrefix(r, MIGPrefix) || r == ResourceGPU {
					n.Allocatable[r] = int64(rng.IntN(9))
				}
			}
		case 5:
			n.Labels[LabelMIGStrategy] = []string{StrategyMixed, StrategySingle}[rng.IntN(2)]
			n.Labels[LabelCount] = "x" // a label error, sometimes
			if rng.IntN(2) == 0 {
				n.Labels[LabelCount] = "8"
			}
		}
		return n
	}
	for step := 0; step < 300; step++ {
		n := pool[rng.IntN(len(pool))]
		switch _, there := cur[n.Name]; {
		case there && rng.IntN(4) == 0:
			require.True(t, m.Delete(n.Name))
			delete(cur, n.Name)
		case there:
			n = mutate(cur[n.Name])
			fallthrough
		default:
			cur[n.Name] = n
			m.Set(n)
		}
		nodes := slices.SortedFunc(maps.Values(cur), func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
		full := e.NewCluster(nodes)
		inc := m.Cluster()
		require.Equal(t, len(nodes), m.Len())
		require.Equal(t, full.LabelErrors, inc.LabelErrors, "step %d", step)
		used := map[string]Resources{}
		if len(nodes) > 0 {
			k := rng.IntN(len(nodes))
			used[nodes[k].Name] = Resources{ResourcePods: 1, ResourceGPU: 2}
		}
		withUsed := slices.Clone(nodes)
		for i := range withUsed {
			if u, ok := used[withUsed[i].Name]; ok {
				sum := maps.Clone(withUsed[i].Used)
				for r, v := range u {
					sum[r] += v
				}
				withUsed[i].Used = sum
			}
		}
		fullUsed := e.NewCluster(withUsed)
		for name, w := range jobs {
			require.Equal(t, e.Diagnose(full, w), e.Diagnose(inc, w), "step %d job %s", step, name)
			require.Equal(t, e.Diagnose(fullUsed, w), e.Diagnose(inc.WithUsed(used), w), "step %d job %s with used", step, name)
		}
	}
}
