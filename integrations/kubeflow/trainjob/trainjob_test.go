package trainjob_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
)

// A TrainJob as people post it (the Trainer's own example, with a
// runtime patch as Kueue writes one).
const doc = `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: fine-tune
  namespace: ml
  labels:
    rankgate.io/gate: enabled
spec:
  runtimeRef:
    name: torch-distributed
  suspend: true
  activeDeadlineSeconds: 3600
  trainer:
    image: pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime
    numNodes: 2
    numProcPerNode: 1
    resourcesPerNode:
      limits:
        nvidia.com/mig-1g.10gb: 1
  runtimePatches:
  - manager: kueue.x-k8s.io/manager
    trainingRuntimeSpec:
      template:
        metadata:
          labels:
            kueue.x-k8s.io/podset: node
`

func decode(t *testing.T) kubeflow.Job {
	t.Helper()
	u := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object))
	j, err := kubeflow.FromUnstructured(u)
	require.NoError(t, err)
	return j
}

// nodePod is the pod of completion index c of the TrainJob's JobSet's
// node step, labelled as the JobSet and Job controllers label it.
func nodePod(step string, c int) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "fine-tune-" + step + "-0-" + strconv.Itoa(c) + "-x7k2p", Namespace: "ml",
		Labels: map[string]string{
			jobset.LabelJobSetName: "fine-tune", jobset.LabelReplicatedJob: step,
			jobset.LabelJobIndex: "0", jobset.LabelCompletionIndex: strconv.Itoa(c),
		},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "fine-tune-" + step + "-0", Controller: ptr.To(true)}},
	}}
}

// The node step's pods are ranks 0..numNodes-1 by completion index; the
// node template carries resourcesPerNode on the trainer container.
func TestNodeRanks(t *testing.T) {
	j := decode(t)
	require.NoError(t, j.Validate())
	require.Equal(t, 2, kubeflow.RankPods(j))
	require.True(t, j.Suspended())
	require.Equal(t, "1", *j.NprocPerNode())
	for c := 0; c < 2; c++ {
		r, err := kubeflow.RankOf(j, nodePod("node", c))
		require.NoError(t, err)
		require.Equal(t, c, r)
		require.True(t, j.OwnsPod(nodePod("node", c)))
		require.NoError(t, j.PodNameFits(nodePod("node", c), "node"))
	}
	_, err := kubeflow.RankOf(j, nodePod("node", 2))
	require.ErrorContains(t, err, "node index 2 is outside the spec's 2 node replica(s)")
	specs := j.ReplicaSpecs()
	require.Len(t, specs, 1)
	lim := specs[0].Template.Spec.Containers[0].Resources.Limits
	require.True(t, lim[corev1.ResourceName("nvidia.com/mig-1g.10gb")].Equal(resource.MustParse("1")))
	require.Empty(t, j.Templates(), "the templates are the runtime's")
}

func TestInitializersAndLauncherAreNoRank(t *testing.T) {
	j := decode(t)
	for _, step := range []string{trainjob.DatasetInitializer, trainjob.ModelInitializer, trainjob.Launcher} {
		_, err := kubeflow.RankOf(j, nodePod(step, 0))
		require.ErrorIs(t, err, kubeflow.ErrNoRank, step)
	}
	p := nodePod("node", 0)
	delete(p.Labels, jobset.LabelCompletionIndex)
	_, err := kubeflow.RankOf(j, p)
	require.ErrorContains(t, err, "the node pod has no batch.kubernetes.io/job-completion-index label")
	p = nodePod("node", 0)
	p.Labels[jobset.LabelJobIndex] = "1"
	_, err = kubeflow.RankOf(j, p)
	require.ErrorContains(t, err, "the Trainer runs the node step as one Job (index 0)")
}

// Without numNodes the TrainJob alone does not say its world size: no
// rank can be numbered, and Validate says what to set.
func TestNumNodesUnset(t *testing.T) {
	tj := &trainjob.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ml"}, Spec: trainjob.Spec{RuntimeRef: trainjob.RuntimeRef{Name: "torch-distributed"}}}
	j, err := kubeflow.FromObject(tj)
	require.NoError(t, err)
	require.ErrorContains(t, j.Validate(), "spec.trainer.numNodes is not set")
	require.Empty(t, j.ReplicaSpecs())
	require.Equal(t, 0, kubeflow.RankPods(j))
	_, err = kubeflow.RankOf(j, nodePod("node", 0))
	require.ErrorContains(t, err, "spec.trainer.numNodes is not set")
}

// SetSuspended writes spec.suspend; DeepCopy shares nothing.
func TestSuspendAndDeepCopy(t *testing.T) {
	j := decode(t)
	tj := j.Object().(*trainjob.TrainJob)
	cp := tj.DeepCopy()
	j.SetSuspended(false)
	require.False(t, *tj.Spec.Suspend)
	require.True(t, *cp.Spec.Suspend, "the copy keeps its own suspend")
	*cp.Spec.Trainer.NumNodes = 5
	cp.Spec.RuntimePatches[0].TrainingRuntimeSpec.Template.Metadata.Labels["x"] = "y"
	cp.Spec.Trainer.ResourcesPerNode.Limits["cpu"] = resource.MustParse("1")
	require.Equal(t, int32(2), *tj.Spec.Trainer.NumNodes)
	require.NotContains(t, tj.Spec.RuntimePatches[0].TrainingRuntimeSpec.Template.Metadata.Labels, "x")
	require.NotContains(t, tj.Spec.Trainer.ResourcesPerNode.Limits, corev1.ResourceCPU)
	require.Equal(t, cp.DeepCopy(), cp)

	l := &trainjob.TrainJobList{Items: []trainjob.TrainJob{*tj}}
	lc := l.DeepCopyObject().(*trainjob.TrainJobList)
	lc.Items[0].Name = "other"
	require.Equal(t, "fine-tune", l.Items[0].Name)
}

// A TrainJob whose runtime runs its MPI launcher as a node (the webhook
// said so in its runtime patch) has numNodes-1 node pods, at least one:
// the ranks; the launcher stays no rank. The controller's cached copy
// keeps that patch and drops the others.
func TestLauncherAsNodeCountsOneNodeLess(t *testing.T) {
	asNode := trainjob.RuntimePatch{Manager: "rankgate.io/webhook", TrainingRuntimeSpec: &trainjob.TrainingRuntimeSpecPatch{
		Template: &trainjob.JobSetTemplatePatch{Metadata: &trainjob.PatchMetadata{Labels: map[string]string{
			"rankgate.io/gate": "enabled", "rankgate.io/mpi-launcher-is-node": "true"}}}}}
	for nodes, ranks := range map[int32]int{4: 3, 2: 1, 1: 1} {
		tj := &trainjob.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "fine-tune", Namespace: "ml"}, Spec: trainjob.Spec{
			RuntimeRef: trainjob.RuntimeRef{Name: "deepspeed-distributed"}, Trainer: &trainjob.Trainer{NumNodes: ptr.To(nodes)},
			RuntimePatches: []trainjob.RuntimePatch{{Manager: "kueue.x-k8s.io/manager"}, asNode}}}
		trainjob.Kind.Strip(tj)
		require.Equal(t, []trainjob.RuntimePatch{asNode}, tj.Spec.RuntimePatches, "the cached copy keeps the webhook's patch only")
		j, err := kubeflow.FromObject(tj)
		require.NoError(t, err)
		require.Equal(t, ranks, kubeflow.RankPods(j), "numNodes %d", nodes)
		r, err := kubeflow.RankOf(j, nodePod("node", ranks-1))
		require.NoError(t, err)
		require.Equal(t, ranks-1, r)
		_, err = kubeflow.RankOf(j, nodePod("node", ranks))
		require.Error(t, err)
		_, err = kubeflow.RankOf(j, nodePod(trainjob.Launcher, 0))
		require.ErrorIs(t, err, kubeflow.ErrNoRank)
	}
	// The same label in someone else's patch says nothing.
	forged := asNode
	forged.Manager = "example.com/me"
	tj := &trainjob.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "fine-tune", Namespace: "ml"}, Spec: trainjob.Spec{
		RuntimeRef: trainjob.RuntimeRef{Name: "x"}, Trainer: &trainjob.Trainer{NumNodes: ptr.To(int32(4))}, RuntimePatches: []trainjob.RuntimePatch{forged}}}
	j, err := kubeflow.FromObject(tj)
	require.NoError(t, err)
	require.Equal(t, 4, kubeflow.RankPods(j))
	trainjob.Kind.Strip(tj)
	require.Nil(t, tj.Spec.RuntimePatches)
}
