package cluster

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func ctr(name string, req, lim corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
}

func TestPodRequests(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	tests := []struct {
		name string
		spec corev1.PodSpec
		want schedule.Resources
	}{
		{
			name: "containers add up; limits stand in for missing requests",
			spec: corev1.PodSpec{Containers: []corev1.Container{
				ctr("a", rl("cpu", "500m", "memory", "1Gi"), rl("nvidia.com/gpu", "2")),
				ctr("b", rl("cpu", "1"), nil),
			}},
			want: schedule.Resources{"cpu": 1500, "memory": 1 << 30, "nvidia.com/gpu": 2, "pods": 1},
		},
		{
			name: "rankgate init container asks the same GPUs: max, not sum",
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{ctr("rankgate-init", rl("cpu", "100m"), rl("nvidia.com/mig-1g.10gb", "1"))},
				Containers:     []corev1.Container{ctr("pytorch", rl("cpu", "4"), rl("nvidia.com/mig-1g.10gb", "1"))},
			},
			want: schedule.Resources{"cpu": 4000, "nvidia.com/mig-1g.10gb": 1, "pods": 1},
		},
		{
			name: "sidecars add to the app containers and to later init containers",
			spec: corev1.PodSpec{
				InitContainers: []corev1.Container{
					func() corev1.Container { c := ctr("proxy", rl("cpu", "1"), nil); c.RestartPolicy = &always; return c }(),
					ctr("setup", rl("cpu", "6"), nil),
				},
				Containers: []corev1.Container{ctr("main", rl("cpu", "2"), nil)},
				Overhead:   rl("cpu", "250m"),
			},
			want: schedule.Resources{"cpu": 7250, "pods": 1},
		},
		{
			name: "pod-level resources replace the container sum",
			spec: corev1.PodSpec{
				Resources:  &corev1.ResourceRequirements{Requests: rl("cpu", "8")},
				Containers: []corev1.Container{ctr("main", rl("cpu", "2"), rl("nvidia.com/gpu", "1"))},
			},
			want: schedule.Resources{"cpu": 8000, "nvidia.com/gpu": 1, "pods": 1},
		},
		{
			name: "pod-level resources replace init containers too",
			spec: corev1.PodSpec{
				Resources:      &corev1.ResourceRequirements{Requests: rl("cpu", "2")},
				InitContainers: []corev1.Container{ctr("setup", rl("cpu", "6"), nil)},
				Containers:     []corev1.Container{ctr("main", rl("cpu", "1"), rl("nvidia.com/gpu", "1"))},
			},
			want: schedule.Resources{"cpu": 2000, "nvidia.com/gpu": 1, "pods": 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PodRequests(&tc.spec)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestQuantityErrors(t *testing.T) {
	tests := []struct {
		name string
		spec corev1.PodSpec
		err  string
	}{
		{"negative", corev1.PodSpec{Containers: []corev1.Container{ctr("a", rl("nvidia.com/gpu", "-1"), nil)}}, "spec.containers[a].resources nvidia.com/gpu is -1: must not be negative"},
		{"absurd GPUs", corev1.PodSpec{Containers: []corev1.Container{ctr("a", rl("nvidia.com/gpu", "1M"), nil)}}, "nvidia.com/gpu is 1M: not a plausible amount"},
		{"absurd cpu", corev1.PodSpec{Containers: []corev1.Container{ctr("a", rl("cpu", "1e12"), nil)}}, "cpu is 1e12: not a plausible amount"},
		{"absurd memory", corev1.PodSpec{Containers: []corev1.Container{ctr("a", rl("memory", "1e30"), nil)}}, "memory is 1e30"},
		{"sum over containers", corev1.PodSpec{Containers: []corev1.Container{
			ctr("a", rl("nvidia.com/gpu", "4000"), nil), ctr("b", rl("nvidia.com/gpu", "4000"), nil)}}, "requests nvidia.com/gpu 8000 in one pod"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := PodRequests(&tc.spec)
			require.ErrorContains(t, err, tc.err)
		})
	}
	n := clustertest.MakeNode("gpu-1").Obj()
	n.Status.Allocatable["nvidia.com/gpu"] = resource.MustParse("-8")
	_, err := NodeFromCore(n)
	require.ErrorContains(t, err, "status.allocatable nvidia.com/gpu is -8: must not be negative")
	n.Name = ""
	_, err = NodeFromCore(n)
	require.ErrorContains(t, err, "metadata.name is empty")
}

func TestNodeFromCore(t *testing.T) {
	n := clustertest.MakeNode("gpu-1").Allocatable("nvidia.com/gpu", "8").
		Taint("nvidia.com/gpu", "present", corev1.TaintEffectNoSchedule).Cordon().NotReady().Obj()
	got, err := NodeFromCore(n)
	require.NoError(t, err)
	require.Equal(t, int64(8), got.Allocatable["nvidia.com/gpu"])
	require.Equal(t, int64(96000), got.Allocatable["cpu"])
	require.Equal(t, []schedule.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}}, got.Taints)
	require.True(t, got.Unschedulable)
	require.True(t, got.NotReady)

	// Capacity only (hand-written dumps): it stands in for allocatable.
	n = clustertest.MakeNode("gpu-2").Obj()
	n.Status.Allocatable = nil
	got, err = NodeFromCore(n)
	require.NoError(t, err)
	require.Equal(t, int64(110), got.Allocatable["pods"])
}

func TestConstraintsOf(t *testing.T) {
	spec := corev1.PodSpec{
		NodeSelector: map[string]string{"pool": "train"},
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"NVIDIA-H100-80GB-HBM3"}}}}},
		}}},
		Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
	}
	c := ConstraintsOf(&spec)
	require.Equal(t, schedule.Constraints{
		NodeSelector: map[string]string{"pool": "train"},
		Affinity: []schedule.SelectorTerm{{
			MatchExpressions: []schedule.Requirement{{Key: "nvidia.com/gpu.product", Operator: "In", Values: []string{"NVIDIA-H100-80GB-HBM3"}}},
			MatchFields:      []schedule.Requirement{},
		}},
		Tolerations: []schedule.Toleration{{Key: "nvidia.com/gpu", Operator: "Exists", Effect: "NoSchedule"}},
	}, c)
}

// The engine's toleration semantics follow k8s.io/api's ToleratesTaint.
func TestTolerationsMatchKubernetes(t *testing.T) {
	taints := []corev1.Taint{
		{Key: "a", Value: "x", Effect: corev1.TaintEffectNoSchedule},
		{Key: "a", Value: "", Effect: corev1.TaintEffectNoExecute},
		{Key: "b", Value: "y", Effect: corev1.TaintEffectNoSchedule},
		{Key: "gen", Value: "5", Effect: corev1.TaintEffectNoSchedule},
	}
	tols := []corev1.Toleration{
		{Key: "a", Operator: corev1.TolerationOpEqual, Value: "x"},
		{Key: "a", Operator: corev1.TolerationOpExists},
		{Key: "a", Value: "x", Effect: corev1.TaintEffectNoExecute},
		{Operator: corev1.TolerationOpExists},
		{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "b", Value: "y"},
		{Key: "b", Operator: corev1.TolerationOpEqual, Value: ""},
		{Key: "gen", Operator: corev1.TolerationOpLt, Value: "6"},
		{Key: "gen", Operator: corev1.TolerationOpGt, Value: "5"},
		{Key: "gen", Operator: corev1.TolerationOpGt, Value: "x"},
	}
	for _, taint := range taints {
		for _, tol := range tols {
			n := schedule.Node{Name: "n", Taints: []schedule.Taint{{Key: taint.Key, Value: taint.Value, Effect: string(taint.Effect)}}}
			c := ConstraintsOf(&corev1.PodSpec{Tolerations: []corev1.Toleration{tol}})
			w := schedule.Workload{Kind: "Pod", Namespace: "ns", Name: "p", PodSets: []schedule.PodSet{{Name: "p", Count: 1, Requests: schedule.Resources{"x": 1}, Constraints: c}}}
			n.Allocatable = schedule.Resources{"x": 1}
			e := schedule.New()
			res := e.Diagnose(e.NewCluster([]schedule.Node{n}), w)
			want := tol.ToleratesTaint(logr.Discard(), &taint, true)
			require.Equal(t, want, res.Rule == verdict.RuleSchedulable, "taint %v toleration %v: %s", taint, tol, res.Report.Reason(0))
		}
	}
}
