package controller

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/clusterstate"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

// usagePod is a whole pod as the API server serves it: an init container,
// a sidecar, overhead and a fractional cpu request, asking gpus GPUs.
// With job set it is a replica of that job (job-name label).
func usagePod(name, job string, gpus int) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name), Annotations: map[string]string{"a": "b"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{
				{Name: "init", Image: "i", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"cpu": resource.MustParse("4")}}},
				{Name: "side", Image: "s", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"memory": resource.MustParse("1Gi"), "cpu": resource.MustParse("250m")}}},
			},
			Containers: []corev1.Container{{Name: "main", Image: "m", Env: []corev1.EnvVar{{Name: "X", Value: "y"}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{"cpu": resource.MustParse("12500m"), "memory": resource.MustParse("100Gi")},
					Limits:   corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(int64(gpus), resource.DecimalSI)}}}},
			Overhead: corev1.ResourceList{"memory": resource.MustParse("512Mi")},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/12 nodes are available: 12 Insufficient nvidia.com/gpu."}}},
	}
	if job != "" {
		p.Labels = map[string]string{LabelJobName: job, LabelReplicaType: "worker"}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: job, UID: "job-uid", Controller: ptr.To(true)}}
	}
	return p
}

// The nodes' usage kept from pod events (trimmed and slim cache objects)
// is what a full read sums, and the model with it judges a waiting job
// exactly as `rankgate diagnose job` does from the whole objects, after
// every event of a random sequence of pods created, bound, finished and
// deleted, with and without the job-name label.
func TestUsageMatchesFullRead(t *testing.T) {
	e := schedule.New()
	nm := clusterstate.NewNodes(e)
	nm.SetSynced(func() bool { return true })
	var nodes []*corev1.Node
	for i := 0; i < 6; i++ {
		n := fleetNode(i, []int{0, 3, 4}[i%3], 1)
		nodes = append(nodes, n)
		nm.Apply(n)
	}
	u := clusterstate.NewUsage()
	u.AddSource(func() bool { return true })
	jobs, others := u.Handler("jobs"), u.Handler("other")
	cached := func(p *corev1.Pod) (toolscache.ResourceEventHandler, *corev1.Pod) {
		if p.Labels[LabelJobName] != "" {
			o, err := trimPod(p.DeepCopy())
			require.NoError(t, err)
			return jobs, o.(*corev1.Pod)
		}
		o, err := slimPod(p.DeepCopy())
		require.NoError(t, err)
		return others, o.(*corev1.Pod)
	}
	// The waiting job: 4 workers of 4 GPUs (the fleet has 8 GPU nodes).
	j, _ := modelJob("waits", "nvidia.com/gpu", 4, nil)
	var waiting []*corev1.Pod
	for i := 0; i < 4; i++ {
		p := usagePod(fmt.Sprintf("waits-worker-%d", i), "waits", 4)
		p.OwnerReferences[0].UID = "waits-uid"
		waiting = append(waiting, p)
	}
	pods := map[string]*corev1.Pod{}
	rules := map[string]int{}
	rng := rand.New(rand.NewPCG(7, 11))
	for step := 0; step < 300; step++ {
		names := slices.Sorted(func(yield func(string) bool) {
			for n := range pods {
				if !yield(n) {
					return
				}
			}
		})
		var old, cur *corev1.Pod
		switch op := rng.IntN(8); {
		case op >= 5 || len(names) == 0:
			job := ""
			if rng.IntN(2) == 0 {
				job = fmt.Sprintf("busy-%d", rng.IntN(3))
			}
			cur = usagePod(fmt.Sprintf("p-%d", step), job, 1+rng.IntN(4))
		default:
			old = pods[names[rng.IntN(len(names))]]
			cur = old.DeepCopy()
			switch op {
			case 1, 2:
				cur.Spec.NodeName, cur.Status = nodes[rng.IntN(len(nodes))].Name, corev1.PodStatus{Phase: corev1.PodRunning}
			case 3:
				cur.Status.Phase = []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed}[rng.IntN(2)]
			case 4:
				cur = nil
			}
		}
		switch {
		case old == nil:
			h, c := cached(cur)
			h.OnAdd(c, false)
			pods[cur.Name] = cur
		case cur == nil:
			h, o := cached(old)
			h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: old.Name, Obj: o})
			delete(pods, old.Name)
		default:
			h, o := cached(old)
			_, c := cached(cur)
			h.OnUpdate(o, c)
			pods[cur.Name] = cur
		}
		if step%10 != 9 {
			continue
		}
		// The full read, as diagnose does it, from the whole objects.
		b := cluster.NewBuilder()
		for _, n := range nodes {
			require.NoError(t, b.AddNode(n))
		}
		for _, p := range pods {
			require.NoError(t, b.AddPod(p))
		}
		for _, p := range waiting {
			require.NoError(t, b.AddPod(p))
		}
		used, _, err := u.Used()
		require.NoError(t, err)
		require.Equal(t, b.Usage(), used, "step %d", step)
		ww, err := b.WorkloadFor(j)
		require.NoError(t, err)
		full := e.Diagnose(e.NewCluster(b.Nodes()), ww)

		base, _, err := nm.Cluster()
		require.NoError(t, err)
		var trimmed []*corev1.Pod
		for _, p := range waiting {
			_, c := cached(p)
			trimmed = append(trimmed, c)
		}
		w, ok, err := jobWorkload(cluster.NewBuilder(), nil, false, j, trimmed, false)
		require.NoError(t, err)
		require.True(t, ok)
		live := e.Diagnose(base.WithUsed(used), w)
		require.Equal(t, full.Report, live.Report, "step %d", step)
		require.Equal(t, full.Rule, live.Rule)
		rules[full.Rule]++
	}
	// The sequence went through the verdicts this is about.
	t.Logf("verdicts judged: %v", rules)
	require.Positive(t, rules[verdict.RuleWaitCapacity], "%v", rules)
	require.Positive(t, rules[verdict.RuleSchedulable], "%v", rules)
}

// A bound pod's effective request survives trimming (equal requests share
// one copy); one that cannot be read makes the usage fail, as diagnose's
// full read fails on it, until the pod is gone.
func TestUsageKeepsRequests(t *testing.T) {
	a, b := usagePod("a", "j", 2), usagePod("b", "", 2)
	a.Spec.NodeName, b.Spec.NodeName = "n1", "n1"
	ta, err := trimPod(a.DeepCopy())
	require.NoError(t, err)
	sb, err := slimPod(b.DeepCopy())
	require.NoError(t, err)
	pa, pb := ta.(*corev1.Pod), sb.(*corev1.Pod)
	require.Empty(t, pa.Spec.Containers)
	require.Empty(t, pb.Spec.InitContainers)
	require.Nil(t, pb.Annotations)
	require.Same(t, pa.Spec.Resources, pb.Spec.Resources)
	want, err := cluster.PodRequests(&a.Spec)
	require.NoError(t, err)
	for _, p := range []*corev1.Pod{pa, pb} {
		got, err := cluster.PodRequests(&p.Spec)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	require.EqualValues(t, 12750, want["cpu"])

	u := clusterstate.NewUsage()
	_, _, err = u.Used()
	require.ErrorIs(t, err, clusterstate.ErrUsageNotSynced)
	u.AddSource(func() bool { return true })
	h := u.Handler("other")
	bad := usagePod("bad", "", 1)
	bad.Spec.NodeName = "n1"
	bad.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"] = resource.MustParse("100000")
	sbad, err := slimPod(bad)
	require.NoError(t, err)
	h.OnAdd(pb, false)
	h.OnAdd(sbad, false)
	_, _, err = u.Used()
	require.ErrorContains(t, err, "pod ml/bad")
	h.OnDelete(sbad)
	used, _, err := u.Used()
	require.NoError(t, err)
	require.EqualValues(t, 2, used["n1"]["nvidia.com/gpu"])
	h.OnDelete(pb)
	used, _, err = u.Used()
	require.NoError(t, err)
	require.Empty(t, used)
}
