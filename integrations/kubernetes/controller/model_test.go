package controller

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/clusterstate"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/watchdog"
	"github.com/rankgate/rankgate/preflight/schedule"
)

// fleetKinds are the node layouts of the model tests and benchmarks.
var fleetKinds = []struct {
	product, config string
	res             map[string]int
}{
	{"NVIDIA-A100-SXM4-80GB", "all-disabled", map[string]int{"nvidia.com/gpu": 8}},
	{"NVIDIA-A100-SXM4-80GB", "all-1g.20gb", map[string]int{"nvidia.com/mig-1g.20gb": 32}},
	{"NVIDIA-H100-80GB-HBM3", "all-balanced", map[string]int{"nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-2g.20gb": 8, "nvidia.com/mig-3g.40gb": 8}},
	{"NVIDIA-H100-80GB-HBM3", "all-disabled", map[string]int{"nvidia.com/gpu": 8}},
	{"", "", nil}, // a CPU node
}

// fleetNode is node i of a fleet as the node cache keeps it (trimmed),
// with resourceVersion rv.
func fleetNode(i, kind int, rv int) *corev1.Node {
	k := fleetKinds[kind%len(fleetKinds)]
	name := fmt.Sprintf("node-%05d", i)
	rl := corev1.ResourceList{"cpu": resource.MustParse("96"), "memory": resource.MustParse("1Ti"), "pods": resource.MustParse("110")}
	labels := map[string]string{"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%4)}
	if k.product != "" {
		for key, v := range map[string]string{schedule.LabelProduct: k.product, schedule.LabelCount: "8", schedule.LabelMIGCapable: "true",
			schedule.LabelMIGStrategy: schedule.StrategyMixed, schedule.LabelMIGConfig: k.config, schedule.LabelMIGConfigState: schedule.MIGStateSuccess,
			schedule.LabelDriverFull: "570.172.08"} {
			labels[key] = v
		}
		for r, n := range k.res {
			rl[corev1.ResourceName(r)] = *resource.NewQuantity(int64(n), resource.DecimalSI)
		}
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, ResourceVersion: fmt.Sprint(rv)},
		Status: corev1.NodeStatus{Allocatable: rl, Capacity: rl.DeepCopy(), Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	o, err := trimNode(n)
	if err != nil {
		panic(err)
	}
	return o.(*corev1.Node)
}

// modelJob is a PyTorchJob of workers asking one res each (with its pod
// template, as the watchdog reads it), and its worker pods, bound ones on
// the given nodes, the others unschedulable.
func modelJob(name, res string, workers int, boundOn []string) (job, []*corev1.Pod) {
	rr := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(res): resource.MustParse("1")}}
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pytorch", Image: "pytorch", Resources: rr}}}}
	pj := &kubeflowv1.PyTorchJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID(name + "-uid")},
		Spec: kubeflowv1.PyTorchJobSpec{PyTorchReplicaSpecs: map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{
			kubeflowv1.PyTorchJobReplicaTypeWorker: {Replicas: ptr.To(int32(workers)), Template: tmpl}}}}
	var pods []*corev1.Pod
	for i := 0; i < workers; i++ {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-worker-%d", name, i), Namespace: "ml",
				Labels:          map[string]string{LabelJobName: name, LabelReplicaType: "worker", LabelReplicaIndex: fmt.Sprint(i)},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: name, UID: pj.UID, Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pytorch", Image: "pytorch", Resources: rr}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				Reason: corev1.PodReasonUnschedulable, Message: "0/5000 nodes are available"}}},
		}
		if i < len(boundOn) {
			p.Spec.NodeName, p.Status = boundOn[i], corev1.PodStatus{Phase: corev1.PodRunning}
		}
		o, err := trimPod(p)
		if err != nil {
			panic(err)
		}
		pods = append(pods, o.(*corev1.Pod))
	}
	return kubeflow.MustFromObject(pj), pods
}

// mutateNode changes what the model reads of a node, at random.
func mutateNode(rng *rand.Rand, n *corev1.Node, rv int) *corev1.Node {
	n = n.DeepCopy()
	n.ResourceVersion = fmt.Sprint(rv)
	switch rng.IntN(6) {
	case 0:
		n.Spec.Unschedulable = !n.Spec.Unschedulable
	case 1:
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoSchedule})
	case 2:
		if n.Labels[schedule.LabelProduct] != "" {
			n.Labels[schedule.LabelMIGConfig] = []string{"all-1g.10gb", "all-disabled", "all-balanced", "all-2g.20gb", "all-1g.20gb"}[rng.IntN(5)]
			n.Labels[schedule.LabelMIGConfigState] = []string{schedule.MIGStateSuccess, schedule.MIGStatePending, schedule.MIGStateFailed}[rng.IntN(3)]
		}
	case 3:
		n.Labels[schedule.LabelMIGStrategy] = []string{schedule.StrategyMixed, schedule.StrategySingle}[rng.IntN(2)]
	case 4:
		for r := range n.Status.Allocatable {
			if strings.HasPrefix(string(r), "nvidia.com/") {
				n.Status.Allocatable[r] = *resource.NewQuantity(int64(rng.IntN(9)), resource.DecimalSI)
			}
		}
	case 5:
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Status == corev1.ConditionTrue {
				n.Status.Conditions[i].Status = corev1.ConditionFalse
			} else {
				n.Status.Conditions[i].Status = corev1.ConditionTrue
			}
		}
	}
	return n
}

// The incremental model judges every job exactly as a full rebuild from
// the same cached nodes and pods, after each event of a random sequence
// of node adds, changes and deletes and pod binds, unbinds and deletes;
// and the node-event shortcut (one judgement per distinct workload) finds
// hopeless exactly the jobs a full judgement finds hopeless.
func TestModelMatchesFullRebuild(t *testing.T) {
	e := schedule.New()
	nm := clusterstate.NewNodes(e)
	nm.SetSynced(func() bool { return true })
	rng := rand.New(rand.NewPCG(3, 5))
	nodes := map[string]*corev1.Node{}
	rv := 0
	for i := 0; i < 40; i++ {
		rv++
		n := fleetNode(i, i, rv)
		nodes[n.Name] = n
		nm.Apply(n)
	}
	type jobPods struct {
		j    job
		pods []*corev1.Pod
	}
	var jobs []jobPods
	for i, res := range []string{"nvidia.com/mig-2g.20gb", "nvidia.com/mig-1g.20gb", "nvidia.com/gpu", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-7g.80gb"} {
		j, pods := modelJob(fmt.Sprintf("job-%d", i), res, 2+i%3, []string{"node-00001", "node-00002"}[:i%3])
		jobs = append(jobs, jobPods{j, pods})
	}
	hopelessSeen, waitingSeen := 0, 0
	for step := 0; step < 400; step++ {
		name := fmt.Sprintf("node-%05d", rng.IntN(50))
		rv++
		switch old, there := nodes[name]; {
		case rng.IntN(5) == 0 && len(jobs) > 0:
			// A pod event: bind, unbind or drop one pod of a job.
			jp := &jobs[rng.IntN(len(jobs))]
			k := rng.IntN(len(jp.pods))
			p := jp.pods[k].DeepCopy()
			switch rng.IntN(3) {
			case 0:
				p.Spec.NodeName, p.Status.Phase = name, corev1.PodRunning
			case 1:
				p.Spec.NodeName, p.Status.Phase = "", corev1.PodPending
			case 2:
				p.Status.Phase = corev1.PodSucceeded
			}
			jp.pods = slices.Clone(jp.pods)
			jp.pods[k] = p
		case there && rng.IntN(4) == 0:
			delete(nodes, name)
			nm.Remove(name)
		case there:
			n := mutateNode(rng, old, rv)
			nodes[name] = n
			nm.Apply(n)
		default:
			var i int
			fmt.Sscanf(name, "node-%d", &i)
			n := fleetNode(i, rng.IntN(len(fleetKinds)), rv)
			nodes[name] = n
			nm.Apply(n)
		}
		// The full rebuild, over the cache's list (in no particular order).
		list := make([]corev1.Node, 0, len(nodes))
		for _, n := range nodes {
			list = append(list, *n)
		}
		cl, gen, err := nm.Cluster()
		require.NoError(t, err)
		for _, jp := range jobs {
			for _, onlyUnbound := range []bool{false, true} {
				fres, fw, fok, ferr := judgeJob(e, list, nil, jp.j, jp.pods, onlyUnbound)
				ires, iw, _, iok, ierr := judgeOn(e, cl, nil, jp.j, jp.pods, onlyUnbound)
				require.Equal(t, ferr, ierr, "step %d %s", step, jp.j.Name())
				require.Equal(t, fok, iok)
				require.Equal(t, fw, iw)
				require.Equal(t, fres, ires, "step %d %s onlyUnbound=%t", step, jp.j.Name(), onlyUnbound)
				if onlyUnbound || !fok {
					continue
				}
				want, _ := watchdog.Cause(fres, false)
				got := nm.Hopeless(gen, signature(iw), func() bool {
					h, _ := watchdog.Cause(e.Diagnose(cl, iw), false)
					return h
				})
				require.Equal(t, want, got, "step %d %s: shortcut", step, jp.j.Name())
				if want {
					hopelessSeen++
				} else {
					waitingSeen++
				}
			}
		}
	}
	// The sequence covers both verdicts.
	require.Positive(t, hopelessSeen)
	require.Positive(t, waitingSeen)
}

// The validating webhook's fleet is the model's snapshot and how many
// nodes advertise a GPU resource now: a node that loses its GPUs, or
// goes, is no longer counted; nothing is served before the initial list.
func TestModelFleetCountsGPUNodes(t *testing.T) {
	nm := clusterstate.NewNodes(schedule.New())
	_, _, err := nm.Fleet(context.Background())
	require.ErrorIs(t, err, clusterstate.ErrNodesNotSynced)
	nm.SetSynced(func() bool { return true })
	a, b, cpu := gpuNodeObj("gpu-a", "nvidia.com/gpu", 8), gpuNodeObj("gpu-b", "nvidia.com/mig-1g.10gb", 7), gpuNodeObj("cpu", "example.com/none", 0)
	for i, n := range []*corev1.Node{a, b, cpu} {
		n.ResourceVersion = fmt.Sprint(i + 1)
		nm.Apply(n)
	}
	cl, gpus, err := nm.Fleet(context.Background())
	require.NoError(t, err)
	require.NotNil(t, cl)
	require.Equal(t, 2, gpus)
	drained := b.DeepCopy()
	drained.ResourceVersion = "9"
	drained.Status.Allocatable["nvidia.com/mig-1g.10gb"] = resource.MustParse("0")
	nm.Apply(drained)
	nm.Remove("gpu-a")
	_, gpus, err = nm.Fleet(context.Background())
	require.NoError(t, err)
	require.Zero(t, gpus)
}
