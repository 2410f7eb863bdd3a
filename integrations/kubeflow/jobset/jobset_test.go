package jobset_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/jobkind"
	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
)

// rj is a ReplicatedJob of replicas Jobs of completions pods each
// (Indexed when completions > 1), its Job template labelled with step
// (the Trainer's ancestor label) unless step is "".
func rj(name string, replicas, completions int32, step string) jobsetapi.ReplicatedJob {
	r := jobsetapi.ReplicatedJob{Name: name, Replicas: replicas}
	r.Template.Spec.Template.Spec.Containers = []corev1.Container{{Name: "node", Image: "pytorch"}}
	if completions > 1 {
		r.Template.Spec.Completions = ptr.To(completions)
		r.Template.Spec.Parallelism = ptr.To(completions)
		r.Template.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
	}
	if step != "" {
		r.Template.Labels = map[string]string{jobset.LabelTrainJobAncestor: step}
	}
	return r
}

func makeJobSet(rjs ...jobsetapi.ReplicatedJob) *jobsetapi.JobSet {
	return &jobsetapi.JobSet{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml", UID: "js-uid"},
		Spec:       jobsetapi.JobSetSpec{ReplicatedJobs: rjs},
	}
}

func wrap(t *testing.T, js *jobsetapi.JobSet) kubeflow.Job {
	t.Helper()
	j, err := kubeflow.FromObject(js)
	require.NoError(t, err)
	return j
}

// pod is a pod of the JobSet's Job jobIdx of ReplicatedJob r, labelled as
// the JobSet and Job controllers label it (completion < 0: none).
func pod(r string, jobIdx, completion int) *corev1.Pod {
	jobName := "train-" + r + "-" + strconv.Itoa(jobIdx)
	l := map[string]string{
		jobset.LabelJobSetName: "train", jobset.LabelJobSetUID: "js-uid", jobset.LabelReplicatedJob: r,
		jobset.LabelJobIndex: strconv.Itoa(jobIdx), jobset.LabelRestartAttempt: "0",
	}
	name := jobName + "-x7k2p"
	if completion >= 0 {
		l[jobset.LabelCompletionIndex] = strconv.Itoa(completion)
		name = jobName + "-" + strconv.Itoa(completion) + "-x7k2p"
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: "ml", Labels: l,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: jobName, UID: "job-uid", Controller: ptr.To(true)}},
	}}
}

// Every pod of every rank-running ReplicatedJob maps to its own rank
// 0..world-1: Job index x completions + completion index, ReplicatedJobs
// numbered in spec order.
func TestRanksOverReplicatedJobs(t *testing.T) {
	j := wrap(t, makeJobSet(rj("driver", 1, 1, ""), rj("workers", 2, 3, "")))
	require.NoError(t, j.Validate())
	require.Equal(t, 7, kubeflow.RankPods(j))
	specs := j.ReplicaSpecs()
	require.Len(t, specs, 2)
	require.Equal(t, int32(1), specs[0].Replicas)
	require.Equal(t, int32(6), specs[1].Replicas)

	r, err := kubeflow.RankOf(j, pod("driver", 0, -1))
	require.NoError(t, err)
	require.Equal(t, 0, r)
	seen := map[int]bool{}
	for ji := 0; ji < 2; ji++ {
		for c := 0; c < 3; c++ {
			r, err := kubeflow.RankOf(j, pod("workers", ji, c))
			require.NoError(t, err)
			require.Equal(t, 1+ji*3+c, r)
			seen[r] = true
		}
	}
	require.Len(t, seen, 6)
	require.ElementsMatch(t, []string{"driver", "workers"}, keys(j.Templates()))
	require.Equal(t, []string{"spec", "replicatedJobs", "1", "template", "spec", "template"}, j.TemplatePath("workers"))
}

// In a JobSet made from a Trainer runtime only the trainer step runs
// ranks: the initializers are no rank, and get no init container.
func TestTrainerJobSetOnlyTheTrainerStepRunsRanks(t *testing.T) {
	j := wrap(t, makeJobSet(rj("dataset-initializer", 1, 1, "dataset-initializer"), rj("model-initializer", 1, 1, "model-initializer"), rj("node", 1, 2, "trainer")))
	require.NoError(t, j.Validate())
	require.Equal(t, 2, kubeflow.RankPods(j))
	r, err := kubeflow.RankOf(j, pod("node", 0, 1))
	require.NoError(t, err)
	require.Equal(t, 1, r)
	_, err = kubeflow.RankOf(j, pod("model-initializer", 0, -1))
	require.ErrorIs(t, err, kubeflow.ErrNoRank)
	require.ErrorContains(t, err, `it runs the TrainJob's "model-initializer" step`)
	require.Equal(t, []string{"node"}, keys(j.Templates()))
	require.Equal(t, []string{"spec", "replicatedJobs", "2", "template", "spec", "template"}, j.TemplatePath("node"))
	require.Nil(t, j.TemplatePath("launcher"))
}

func TestPodsThatMapToNoRank(t *testing.T) {
	j := wrap(t, makeJobSet(rj("workers", 2, 2, "")))
	noCompletion := pod("workers", 0, 1)
	delete(noCompletion.Labels, jobset.LabelCompletionIndex)
	noJobIndex := pod("workers", 0, 1)
	delete(noJobIndex.Labels, jobset.LabelJobIndex)
	noRJ := pod("workers", 0, 0)
	delete(noRJ.Labels, jobset.LabelReplicatedJob)
	badIdx := pod("workers", 0, 0)
	badIdx.Labels[jobset.LabelJobIndex] = "x"
	for name, tc := range map[string]struct {
		p    *corev1.Pod
		want string
	}{
		"no completion index": {noCompletion, "pod ml/train-workers-0-1-x7k2p of JobSet ml/train: the workers pod has no batch.kubernetes.io/job-completion-index label"},
		"no job index":        {noJobIndex, "the workers pod has no jobset.sigs.k8s.io/job-index label"},
		"no replicated job":   {noRJ, "the pod has no jobset.sigs.k8s.io/replicatedjob-name label"},
		"job index not int":   {badIdx, `label jobset.sigs.k8s.io/job-index="x" is not an index`},
		"completion too big":  {pod("workers", 0, 2), "completion index 2 is outside the 2 completions of ReplicatedJob workers"},
		"job index too big":   {pod("workers", 2, 0), "workers index 4 is outside the spec's 4 workers replica(s)"},
		"unknown rj":          {pod("ps", 0, 0), `label jobset.sigs.k8s.io/replicatedjob-name="ps" is not one of the JobSet replica types (workers)`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := kubeflow.RankOf(j, tc.p)
			require.ErrorContains(t, err, tc.want)
			require.False(t, errors.Is(err, kubeflow.ErrNoRank))
		})
	}
}

// A ReplicatedJob whose pods cannot all run at once, or carry no index,
// cannot be a gang: the spec says why.
func TestSpecsThatCannotBeNumbered(t *testing.T) {
	nonIndexed := rj("workers", 1, 2, "")
	nonIndexed.Template.Spec.CompletionMode = nil
	serial := rj("workers", 1, 4, "")
	serial.Template.Spec.Parallelism = ptr.To[int32](1)
	dup := makeJobSet(rj("w", 1, 1, ""), rj("w", 1, 1, ""))
	for name, tc := range map[string]struct {
		js   *jobsetapi.JobSet
		want string
	}{
		"non-indexed": {makeJobSet(nonIndexed), "runs 2 pods per Job without completionMode: Indexed"},
		"serial":      {makeJobSet(serial), "has parallelism 1 and completions 4: the ranks of a gang must all run at once"},
		"duplicate":   {dup, `spec.replicatedJobs[1].name "w" is empty or not unique`},
		"empty":       {makeJobSet(), "spec.replicatedJobs is empty"},
	} {
		t.Run(name, func(t *testing.T) {
			require.ErrorContains(t, wrap(t, tc.js).Validate(), tc.want)
		})
	}
}

func TestSuspendOwnershipAndNames(t *testing.T) {
	js := makeJobSet(rj("workers", 1, 2, ""))
	j := wrap(t, js)
	require.False(t, j.Suspended())
	j.SetSuspended(true)
	require.True(t, *js.Spec.Suspend)
	require.True(t, j.Suspended())

	p := pod("workers", 0, 1)
	require.True(t, j.OwnsPod(p))
	require.NoError(t, j.PodNameFits(p, "workers"))
	other := p.DeepCopy()
	other.Labels[jobset.LabelJobSetUID] = "earlier-uid"
	require.False(t, j.OwnsPod(other), "a pod of an earlier JobSet of that name")
	other = p.DeepCopy()
	other.Namespace = "elsewhere"
	require.False(t, j.OwnsPod(other))
	other = p.DeepCopy()
	other.OwnerReferences[0].Name = "train-workers-1"
	require.ErrorContains(t, j.PodNameFits(other, "workers"), "controlled by the Job train-workers-0")

	k, _ := kubeflow.ByGVK(jobset.GVK)
	require.Equal(t, []string{"TrainJob"}, []string{k.ControlledBy()[0].Kind})
	require.True(t, k.OwnsThroughBatchJob())
}

// Strip reduces the pod templates to their rank container's launch
// settings and keeps what ranks are read from.
func TestStripKeepsStepsAndCounts(t *testing.T) {
	js := makeJobSet(rj("dataset-initializer", 1, 1, "dataset-initializer"), rj("node", 1, 4, "trainer"))
	jobset.Kind.Strip(js)
	j := wrap(t, js)
	cs := js.Spec.ReplicatedJobs[1].Template.Spec.Template.Spec.Containers
	require.Len(t, cs, 1)
	require.Empty(t, cs[0].Command)
	require.Empty(t, js.Spec.ReplicatedJobs[1].Template.Spec.Template.Labels)
	require.Equal(t, 4, kubeflow.RankPods(j))
	r, err := kubeflow.RankOf(j, pod("node", 0, 3))
	require.NoError(t, err)
	require.Equal(t, 3, r)
}

// A JobSet as `kubectl get -o yaml` prints it decodes through the
// registry, fields rankgate does not read included.
func TestDecodeJobSetYAML(t *testing.T) {
	const doc = `apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: train
  namespace: ml
  labels:
    rankgate.io/gate: enabled
spec:
  suspend: false
  network:
    enableDNSHostnames: true
  replicatedJobs:
  - name: node
    replicas: 1
    template:
      metadata:
        labels:
          trainer.kubeflow.org/trainjob-ancestor-step: trainer
      spec:
        parallelism: 2
        completions: 2
        completionMode: Indexed
        template:
          spec:
            containers:
            - name: node
              image: pytorch
              resources:
                limits:
                  nvidia.com/mig-1g.10gb: 1
`
	u := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object))
	j, err := kubeflow.FromUnstructured(u)
	require.NoError(t, err)
	require.NoError(t, j.Validate())
	require.Equal(t, "JobSet", j.Kind())
	require.Equal(t, 2, kubeflow.RankPods(j))
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A pod's restart attempt is its label's number; a pod without one, or
// with a label that is no number, has none.
func TestRestartAttempt(t *testing.T) {
	for _, c := range []struct {
		labels map[string]string
		want   int32
		ok     bool
	}{
		{map[string]string{jobset.LabelRestartAttempt: "0"}, 0, true},
		{map[string]string{jobset.LabelRestartAttempt: "3"}, 3, true},
		{map[string]string{}, 0, false},
		{map[string]string{jobset.LabelRestartAttempt: "-1"}, 0, false},
		{map[string]string{jobset.LabelRestartAttempt: "x"}, 0, false},
		{map[string]string{jobset.LabelRestartAttempt: "99999999999"}, 0, false},
	} {
		got, ok := jobset.Kind.(jobkind.Restarter).RestartAttempt(c.labels)
		if got != c.want || ok != c.ok {
			t.Errorf("%v: got %d %v, want %d %v", c.labels, got, ok, c.want, c.ok)
		}
	}
}

// A JobSet made from a Trainer MPI runtime: the launcher carries the
// trainer label but runs mpirun; the node step (no label) runs the ranks.
// The launcher is no rank and is the job's launcher template.
func TestTrainerMPIJobSetLauncherIsNoRank(t *testing.T) {
	j := wrap(t, makeJobSet(rj("node", 1, 3, ""), rj("launcher", 1, 1, jobset.AncestorTrainer)))
	require.NoError(t, j.Validate())
	require.Equal(t, 3, kubeflow.RankPods(j))
	for c := 0; c < 3; c++ {
		r, err := kubeflow.RankOf(j, pod("node", 0, c))
		require.NoError(t, err)
		require.Equal(t, c, r)
	}
	_, err := kubeflow.RankOf(j, pod("launcher", 0, 0))
	require.ErrorIs(t, err, kubeflow.ErrNoRank)
	require.ErrorContains(t, err, "it starts the MPI ranks of ReplicatedJob node (mpirun)")
	require.Equal(t, []string{"node"}, keys(j.Templates()))
	typ, tpl := j.(interface {
		LauncherTemplate() (string, *corev1.PodTemplateSpec)
	}).LauncherTemplate()
	require.Equal(t, "launcher", typ)
	require.Same(t, &j.Object().(*jobsetapi.JobSet).Spec.ReplicatedJobs[1].Template.Spec.Template, tpl)

	// A torch runtime's JobSet has no launcher.
	typ, tpl = wrap(t, makeJobSet(rj("node", 1, 2, jobset.AncestorTrainer))).(interface {
		LauncherTemplate() (string, *corev1.PodTemplateSpec)
	}).LauncherTemplate()
	require.Empty(t, typ)
	require.Nil(t, tpl)
}
