package controller

import (
	"github.com/rankgate/rankgate/integrations/kubeflow"

	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

// gpuNodeObj is a Ready node as a kubelet reports it: cpu, memory and pods
// besides count of GPU resource res.
func gpuNodeObj(name, res string, count int) *corev1.Node {
	rl := corev1.ResourceList{"cpu": resource.MustParse("96"), "memory": resource.MustParse("1Ti"), "pods": resource.MustParse("110"),
		corev1.ResourceName(res): resource.MustParse(fmt.Sprint(count))}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Status: corev1.NodeStatus{Allocatable: rl, Capacity: rl, Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue}, {Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}},
			Images: []corev1.ContainerImage{{Names: []string{"nvcr.io/nvidia/pytorch:25.10-py3"}, SizeBytes: 9e9}}},
	}
}

// rankJob makes a cached PyTorchJob with one Worker per pod, and makes the
// pods its workers (labels and controller owner as the operator sets them).
func rankJob(t *testing.T, pods ...*corev1.Pod) (job, []*corev1.Pod) {
	t.Helper()
	pj := ptJob(false, int32(len(pods)))
	pj.Name, pj.UID = "j", "job-uid"
	k, _ := kubeflow.ByName(kubeflow.PyTorchJobGVK.Kind)
	k.Strip(pj)
	for i, p := range pods {
		p.Namespace = "ml"
		if p.Name == "" {
			p.Name = fmt.Sprintf("j-worker-%d", i)
		}
		if p.UID == "" {
			p.UID = types.UID(p.Name + "-uid")
		}
		p.Labels = map[string]string{LabelJobName: "j", LabelReplicaType: "worker", LabelReplicaIndex: fmt.Sprint(i)}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: "j", UID: "job-uid", Controller: ptr.To(true)}}
	}
	return kubeflow.MustFromObject(pj), pods
}

// judgeTrimmed judges through the cache transforms, as the controller does.
func judgeTrimmed(t *testing.T, j job, pods []*corev1.Pod, nodes ...*corev1.Node) map[string]string {
	t.Helper()
	var tn []corev1.Node
	for _, n := range nodes {
		o, err := trimNode(n.DeepCopy())
		require.NoError(t, err)
		tn = append(tn, *o.(*corev1.Node))
	}
	var tp []*corev1.Pod
	api := fake.NewClientBuilder()
	for _, p := range pods {
		o, err := trimPod(p.DeepCopy())
		require.NoError(t, err)
		tp = append(tp, o.(*corev1.Pod))
		full := p.DeepCopy()
		full.ManagedFields = nil
		api.WithObjects(full)
	}
	// The placement rules of the pods judged are read from the API server.
	c := &Controller{api: api.Build()}
	tp, err := c.judgedPods(context.Background(), j, tp)
	require.NoError(t, err)
	why, err := judgePlacement(schedule.New(), tn, nil, j, tp)
	require.NoError(t, err)
	return why
}

func gpus(res string, n int) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(res): resource.MustParse(fmt.Sprint(n))}}
}

// pendingPod is an unbound rank pod the scheduler gave up on: an init
// container (the gate) and the trainer, both asking res.
func pendingPod(res string, n int) *corev1.Pod {
	return &corev1.Pod{
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "rankgate-init", Image: "rankgate", Resources: gpus(res, n)}},
			Containers:     []corev1.Container{{Name: "train", Image: "pytorch", Resources: gpus(res, n), Env: []corev1.EnvVar{{Name: "A", Value: "B"}}}},
			Tolerations:    []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/2 nodes are available"}}},
	}
}

// A rank is unplaceable exactly when the engine's verdict for its pod set
// (or for the whole gang) is hopeless; waiting is not.
func TestJudgePlacement(t *testing.T) {
	sidecar := func(p *corev1.Pod) *corev1.Pod {
		// A restartable init container runs beside the trainer: its GPU
		// adds to the pod's request (8 + 1 on nodes of 8).
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "monitor", Image: "dcgm",
			RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), Resources: gpus("nvidia.com/gpu", 1)})
		return p
	}
	bigInit := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.InitContainers[0].Resources = gpus("nvidia.com/gpu", 16)
		return p
	}
	tainted := func(n *corev1.Node) *corev1.Node {
		n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "inference", Effect: corev1.TaintEffectNoSchedule}}
		return n
	}
	cordoned := func(n *corev1.Node) *corev1.Node { n.Spec.Unschedulable = true; return n }
	labelled := func(n *corev1.Node, k, v string) *corev1.Node { n.Labels[k] = v; return n }
	selecting := func(p *corev1.Pod, k, v string) *corev1.Pod { p.Spec.NodeSelector = map[string]string{k: v}; return p }
	bound := func(p *corev1.Pod, node string) *corev1.Pod {
		p.Spec.NodeName, p.Status = node, corev1.PodStatus{Phase: corev1.PodRunning}
		return p
	}
	two := func(f func(int) *corev1.Node) []*corev1.Node { return []*corev1.Node{f(0), f(1)} }
	full := func(i int) *corev1.Node { return gpuNodeObj(fmt.Sprintf("n%d", i), "nvidia.com/gpu", 8) }
	mig1g := func(i int) *corev1.Node { return gpuNodeObj(fmt.Sprintf("n%d", i), "nvidia.com/mig-1g.20gb", 7) }
	for _, tc := range []struct {
		name  string
		pods  []*corev1.Pod
		nodes []*corev1.Node
		rule  string // "" when no rank is unplaceable
		has   string // in the reason
		ranks int    // how many ranks are unplaceable
	}{
		{"MIG profile no node offers", []*corev1.Pod{pendingPod("nvidia.com/mig-2g.20gb", 1)}, two(mig1g), verdict.RuleShapeMismatch, "nvidia.com/mig-1g.20gb", 1},
		{"MIG profile offered", []*corev1.Pod{pendingPod("nvidia.com/mig-1g.20gb", 1)}, two(mig1g), "", "", 0},
		{"sidecar GPU beyond any node", []*corev1.Pod{sidecar(pendingPod("nvidia.com/gpu", 8))}, two(full), verdict.RuleShapeMismatch, "nvidia.com/gpu 8", 1},
		{"init container beyond any node", []*corev1.Pod{bigInit(pendingPod("nvidia.com/gpu", 1))}, two(full), verdict.RuleShapeMismatch, "nvidia.com/gpu 8", 1},
		{"busy GPUs: waits", []*corev1.Pod{bound(pendingPod("nvidia.com/gpu", 8), "n0"), bound(pendingPod("nvidia.com/gpu", 8), "n1"), pendingPod("nvidia.com/gpu", 8)},
			[]*corev1.Node{full(0), full(1), full(2)}, "", "", 0},
		{"gang larger than the cluster", []*corev1.Pod{pendingPod("nvidia.com/gpu", 8), pendingPod("nvidia.com/gpu", 8), pendingPod("nvidia.com/gpu", 8)}, two(full), verdict.RuleGangTooLarge, "even an empty cluster", 3},
		{"taint not tolerated", []*corev1.Pod{pendingPod("nvidia.com/gpu", 1)}, []*corev1.Node{tainted(full(0))}, verdict.RuleNodeConstraints, "dedicated=inference:NoSchedule", 1},
		{"node selector matches a label", []*corev1.Pod{selecting(pendingPod("nvidia.com/gpu", 1), "pool", "train")}, []*corev1.Node{full(0), labelled(full(1), "pool", "train")}, "", "", 0},
		{"node selector matches none", []*corev1.Pod{selecting(pendingPod("nvidia.com/gpu", 1), "pool", "train")}, two(full), verdict.RuleNodeConstraints, "pool", 1},
		// Worker 0 runs on n0 from before its taint: the pending worker
		// needs only n1 (judging both again would find them too many).
		{"bound sibling on a node since tainted", []*corev1.Pod{bound(pendingPod("nvidia.com/gpu", 8), "n0"), pendingPod("nvidia.com/gpu", 8)},
			[]*corev1.Node{tainted(full(0)), full(1)}, "", "", 0},
		{"only cordoned nodes: waits", []*corev1.Pod{pendingPod("nvidia.com/gpu", 1)}, []*corev1.Node{cordoned(full(0))}, "", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, pods := rankJob(t, tc.pods...)
			why := judgeTrimmed(t, j, pods, tc.nodes...)
			require.Len(t, why, tc.ranks, "%v", why)
			for _, r := range why {
				require.Contains(t, r, tc.rule+": ")
				require.Contains(t, r, tc.has)
			}
		})
	}
}

// The cache keeps what the engine reads of a node, and the engine's model
// of a trimmed node is the model of the full one (GPU capacity aside: only
// its GPU resources are kept, the only ones the engine reads there).
func TestTrimNodeKeepsTheEngineModel(t *testing.T) {
	n := gpuNodeObj("n0", "nvidia.com/mig-1g.10gb", 7)
	n.Labels["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-80GB"
	n.Labels["nvidia.com/mig.config"] = "all-1g.10gb"
	n.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}}
	n.Spec.Unschedulable = true
	n.Status.Capacity["nvidia.com/mig-3g.40gb"] = resource.MustParse("0")
	out, err := trimNode(n.DeepCopy())
	require.NoError(t, err)
	tn := out.(*corev1.Node)
	require.Nil(t, tn.ManagedFields)
	require.Empty(t, tn.Status.Images)
	require.Len(t, tn.Status.Conditions, 1)
	got, err := cluster.NodeFromCore(tn)
	require.NoError(t, err)
	want, err := cluster.NodeFromCore(n)
	require.NoError(t, err)
	want.Capacity = schedule.Resources{"nvidia.com/mig-1g.10gb": 7, "nvidia.com/mig-3g.40gb": 0}
	require.Equal(t, want, got)
}

// An unbound pod keeps its effective request and a fingerprint of its
// placement rules, never the rules or containers; the rules read back for
// judging (judgedPods) are the pod's. A bound one keeps its request only.
func TestTrimPodKeepsScheduling(t *testing.T) {
	p := pendingPod("nvidia.com/gpu", 4)
	p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "side", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"cpu": resource.MustParse("500m")}}})
	p.Spec.Overhead = corev1.ResourceList{"memory": resource.MustParse("1Gi")}
	p.Spec.NodeSelector = map[string]string{"pool": "train"}
	p.Spec.Affinity = &corev1.Affinity{
		NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"NVIDIA-H100-80GB-HBM3"}}}}}}},
		PodAntiAffinity: &corev1.PodAntiAffinity{},
	}
	j, pods := rankJob(t, p)
	out, err := trimPod(p.DeepCopy())
	require.NoError(t, err)
	tp := out.(*corev1.Pod)
	require.Empty(t, tp.Spec.Containers)
	require.Empty(t, tp.Spec.InitContainers)
	require.Nil(t, tp.Spec.Affinity)
	require.Empty(t, tp.Spec.NodeSelector)
	require.Empty(t, tp.Spec.Tolerations)
	require.Equal(t, placementFingerprint(&p.Spec), tp.Annotations[annoPlacement])
	got, err := cluster.PodRequests(&tp.Spec)
	require.NoError(t, err)
	want, err := cluster.PodRequests(&p.Spec)
	require.NoError(t, err)
	require.Equal(t, want, got)

	c := &Controller{api: fake.NewClientBuilder().WithObjects(pods[0].DeepCopy()).Build()}
	judged, err := c.judgedPods(context.Background(), j, []*corev1.Pod{tp})
	require.NoError(t, err)
	require.Len(t, judged, 1)
	require.Equal(t, cluster.ConstraintsOf(&p.Spec), cluster.ConstraintsOf(&judged[0].Spec))
	got, err = cluster.PodRequests(&judged[0].Spec)
	require.NoError(t, err)
	require.Equal(t, want, got)
	// Read once: the rules are remembered while the fingerprint holds.
	c.api = fake.NewClientBuilder().Build()
	judged, err = c.judgedPods(context.Background(), j, []*corev1.Pod{tp})
	require.NoError(t, err)
	require.Equal(t, cluster.ConstraintsOf(&p.Spec), cluster.ConstraintsOf(&judged[0].Spec))

	p.Spec.NodeName = "n0"
	out, err = trimPod(p)
	require.NoError(t, err)
	require.Empty(t, out.(*corev1.Pod).Spec.Containers)
	require.Empty(t, out.(*corev1.Pod).Spec.InitContainers)
	require.Nil(t, out.(*corev1.Pod).Spec.Affinity)
	require.Empty(t, out.(*corev1.Pod).Annotations[annoPlacement])
}
