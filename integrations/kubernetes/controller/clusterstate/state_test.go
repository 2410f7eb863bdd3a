package clusterstate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/preflight/schedule"
)

var t0 = time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)

func gpuNode(name, rv string, gpus int64) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI), corev1.ResourceCPU: resource.MustParse("96")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

func boundPod(name, node string, gpus int64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// Nothing is judged before the informers' initial lists; then one live
// snapshot is shared until a node changes, or a pod changes and it is
// LiveFresh old.
func TestLiveSnapshot(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s := New(schedule.New(), clk)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Live(cancelled)
	require.ErrorIs(t, err, ErrNodesNotSynced)

	s.Nodes.SetSynced(func() bool { return true })
	s.Nodes.Apply(gpuNode("n1", "1", 8))
	_, err = s.Live(cancelled)
	require.ErrorIs(t, err, ErrUsageNotSynced, "the pods' usage has no source yet")
	s.Usage.AddSource(func() bool { return true })

	ctx := context.Background()
	l1, err := s.Live(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), l1.Seq)
	require.Equal(t, 1, l1.Cluster.NodeCount())
	again, err := s.Live(ctx)
	require.NoError(t, err)
	require.Same(t, l1, again, "nothing changed: the same snapshot")

	h := s.Usage.Handler("jobs")
	h.OnAdd(boundPod("p", "n1", 2), false)
	again, _ = s.Live(ctx)
	require.Same(t, l1, again, "a pod change within LiveFresh shares the snapshot")
	clk.Step(LiveFresh)
	l2, err := s.Live(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), l2.Seq, "a pod change once the snapshot is LiveFresh old")

	s.Nodes.Apply(gpuNode("n2", "2", 8))
	l3, err := s.Live(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(3), l3.Seq, "a node change at once")
	require.Equal(t, 2, l3.Cluster.NodeCount())

	s.Nodes.Apply(gpuNode("n2", "2", 8))
	again, _ = s.Live(ctx)
	require.Same(t, l3, again, "the same resourceVersion again is no change")
}

// A node the converter refuses stops judging (the error names it) until
// it is fixed or gone; Fleet counts the nodes that advertise GPUs.
func TestNodesRefusedAndFleet(t *testing.T) {
	nm := NewNodes(schedule.New())
	nm.SetSynced(func() bool { return true })
	nm.Apply(gpuNode("n1", "1", 8))
	cpu := gpuNode("cpu", "1", 0)
	delete(cpu.Status.Allocatable, "nvidia.com/gpu")
	nm.Apply(cpu)
	_, gpus, err := nm.Fleet(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, gpus)

	nm.Apply(gpuNode("bad", "1", -1))
	_, _, err = nm.Cluster()
	require.ErrorContains(t, err, "node bad: status.allocatable nvidia.com/gpu is -1")
	_, _, err = nm.Fleet(context.Background())
	require.Error(t, err)
	nm.Apply(gpuNode("bad", "2", 8))
	_, _, err = nm.Cluster()
	require.NoError(t, err, "fixed")
	nm.Apply(gpuNode("bad", "3", -1))
	nm.Remove("bad")
	_, gen, err := nm.Cluster()
	require.NoError(t, err)
	nm.Remove("missing")
	_, gen2, _ := nm.Cluster()
	require.Equal(t, gen, gen2, "removing a node never seen changes nothing")

	calls := 0
	judge := func() bool { calls++; return true }
	require.True(t, nm.Hopeless(gen, "sig", judge))
	require.True(t, nm.Hopeless(gen, "sig", judge))
	require.Equal(t, 1, calls, "one judgement per signature and generation")
	nm.Apply(gpuNode("n1", "2", 4))
	_, gen3, _ := nm.Cluster()
	nm.Hopeless(gen3, "sig", judge)
	require.Equal(t, 2, calls)
}

// A pod whose request the cache could not keep makes the usage fail, as
// a full read fails on it, until it is gone; finished and unbound pods
// hold nothing.
func TestUsageUnreadableAndFinished(t *testing.T) {
	u := NewUsage()
	u.AddSource(func() bool { return true })
	h := u.Handler("jobs")
	bad := boundPod("bad", "n1", 1)
	bad.Annotations = map[string]string{contract.CachedAnnotationUnreadableRequest: "too many containers"}
	h.OnAdd(bad, false)
	_, _, err := u.Used()
	require.ErrorContains(t, err, "pod ml/bad: too many containers")
	_, err = u.Generation()
	require.Error(t, err)
	h.OnDelete(bad)

	p := boundPod("p", "n1", 2)
	h.OnAdd(p, false)
	done := p.DeepCopy()
	done.Status.Phase = corev1.PodSucceeded
	unbound := boundPod("q", "", 4)
	h.OnAdd(unbound, false)
	used, _, err := u.Used()
	require.NoError(t, err)
	require.EqualValues(t, 2, used["n1"]["nvidia.com/gpu"])
	h.OnUpdate(p, done)
	used, _, err = u.Used()
	require.NoError(t, err)
	require.Empty(t, used, "a finished pod holds nothing")
}

// The node informer's handler is the model's one writer: it applies every
// add and delete and every change that Matters, then tells the watchers,
// who find the node in the model; a heartbeat changes nothing and is
// told to no one.
func TestNodesHandlerAppliesThenTells(t *testing.T) {
	nm := NewNodes(schedule.New())
	nm.SetSynced(func() bool { return true })
	var told []string
	nm.Watch(func(o, n *corev1.Node) {
		cl, _, err := nm.Cluster()
		require.NoError(t, err)
		switch {
		case o == nil:
			told = append(told, fmt.Sprintf("+%s %d", n.Name, cl.NodeCount()))
		case n == nil:
			told = append(told, fmt.Sprintf("-%s %d", o.Name, cl.NodeCount()))
		default:
			told = append(told, fmt.Sprintf("~%s %d", n.Name, cl.NodeCount()))
		}
	})
	h := nm.Handler()
	h.OnAdd(gpuNode("n1", "1", 8), false)
	_, gen, _ := nm.Cluster()
	beat := gpuNode("n1", "2", 8)
	beat.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(t0)
	h.OnUpdate(gpuNode("n1", "1", 8), beat)
	_, gen2, _ := nm.Cluster()
	require.Equal(t, gen, gen2, "a heartbeat is not applied")
	h.OnUpdate(beat, gpuNode("n1", "3", 4))
	h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "n1", Obj: gpuNode("n1", "3", 4)})
	require.Equal(t, []string{"+n1 1", "~n1 1", "-n1 0"}, told)

	cordoned := gpuNode("n2", "1", 8)
	require.False(t, Matters(cordoned, gpuNode("n2", "2", 8)))
	cordoned.Spec.Unschedulable = true
	require.True(t, Matters(gpuNode("n2", "1", 8), cordoned))
	tainted := gpuNode("n2", "1", 8)
	tainted.Spec.Taints = []corev1.Taint{{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}}
	require.True(t, Matters(gpuNode("n2", "1", 8), tainted))
}
