package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// The JobSet and Trainer controllers do not run in these tests (they do in
// the real chain, chain_test.go): the test creates what they would (the JobSet a TrainJob makes, the batch Jobs of a
// JobSet, the pods of those Jobs), labelled and owned as they do it
// (JobSet v0.12.0 labelAndAnnotateObject; the Job controller's
// completion index), and the init container and job-name label the
// mutating webhook adds to a gated JobSet's rank template.

// newJobSet creates a JobSet of one ReplicatedJob "node": one Indexed Job
// of n pods, made from a Trainer runtime when trainer (its Job template
// labelled with the trainer step), controlled by owner when not nil.
func newJobSet(t *testing.T, ns, name string, n int32, owner *trainjob.TrainJob) *jobsetapi.JobSet {
	t.Helper()
	rj := jobsetapi.ReplicatedJob{Name: "node", Replicas: 1}
	rj.Template.Spec = batchv1.JobSpec{Parallelism: ptr.To(n), Completions: ptr.To(n), CompletionMode: ptr.To(batchv1.IndexedCompletion),
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "node", Image: "pytorch/pytorch"}}}}}
	js := &jobsetapi.JobSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{contract.KeyGate: "enabled"}},
		Spec: jobsetapi.JobSetSpec{ReplicatedJobs: []jobsetapi.ReplicatedJob{rj}}}
	if owner != nil {
		rj.Template.Labels = map[string]string{jobset.LabelTrainJobAncestor: jobset.AncestorTrainer}
		js.Spec.ReplicatedJobs = []jobsetapi.ReplicatedJob{rj}
		js.OwnerReferences = []metav1.OwnerReference{{APIVersion: trainjob.GroupVersion.String(), Kind: "TrainJob", Name: owner.Name, UID: owner.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	}
	require.NoError(t, k8s.Create(context.Background(), js))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), js) })
	return js
}

// jobSetRankPods creates Job 0 of the JobSet's ReplicatedJob "node" and
// its n pods (completion index i on nodes[i], unbound for ""), each
// requesting gpu; edit, if given, changes each pod before it is created.
func jobSetRankPods(t *testing.T, js *jobsetapi.JobSet, n int, nodes []string, gpu string, edit ...func(*corev1.Pod)) []*corev1.Pod {
	t.Helper()
	ctx := context.Background()
	jobName := js.Name + "-node-0"
	labels := map[string]string{
		jobset.LabelJobSetName: js.Name, jobset.LabelJobSetUID: string(js.UID), jobset.LabelReplicatedJob: "node",
		jobset.LabelJobIndex: "0", jobset.LabelJobGlobalIndex: "0", jobset.LabelRestartAttempt: "0",
		jobsetapi.ReplicatedJobReplicas: "1", jobsetapi.GlobalReplicasKey: "1",
		// The mutating webhook's label on a gated JobSet's rank template.
		controller.LabelJobName: js.Name,
	}
	bj := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: jobName, Namespace: js.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: jobset.GVK.GroupVersion().String(), Kind: "JobSet", Name: js.Name, UID: js.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Parallelism: ptr.To(int32(n)), Completions: ptr.To(int32(n)), CompletionMode: ptr.To(batchv1.IndexedCompletion),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "node", Image: "pytorch/pytorch"}}}}},
	}
	require.NoError(t, k8s.Create(ctx, bj))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), bj) })
	res := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(gpu): resource.MustParse("1")}}
	var out []*corev1.Pod
	for i := 0; i < n; i++ {
		l := map[string]string{jobset.LabelCompletionIndex: strconv.Itoa(i), "batch.kubernetes.io/job-name": jobName}
		for k, v := range labels {
			l[k] = v
		}
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d-x7k2p", jobName, i), Namespace: js.Namespace, Labels: l,
				Annotations: map[string]string{jobset.LabelCompletionIndex: strconv.Itoa(i)},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: jobName, UID: bj.UID,
					Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
			Spec: corev1.PodSpec{
				ServiceAccountName: serviceAccount, NodeName: nodes[i], RestartPolicy: corev1.RestartPolicyNever,
				InitContainers: []corev1.Container{{Name: "rankgate-init", Image: "rankgate", Resources: res}},
				Containers:     []corev1.Container{{Name: "node", Image: "pytorch/pytorch", Resources: res}},
			},
		}
		for _, e := range edit {
			e(p)
		}
		require.NoError(t, k8s.Create(ctx, p))
		out = append(out, p)
	}
	return out
}

func jobSetSuspended(t testing.TB, js *jobsetapi.JobSet) bool {
	t.Helper()
	fresh := &jobsetapi.JobSet{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(js), fresh))
	return ptr.Deref(fresh.Spec.Suspend, false)
}

// JobSets are gated like PyTorchJobs, by a controller holding only the
// shipped permissions (rbac.yaml, under admission-policy.yaml): two ranks
// on full GPUs report and pass; two ranks on MIG instances of different
// physical GPUs disagree, the gang fails, and the JobSet is suspended; the
// JobSet a TrainJob made fails through its TrainJob, which is suspended
// (the Trainer would undo a suspend of its JobSet) and carries the verdict;
// that JobSet, though it carries the gate label, opens no gang of its own.
func TestE2EJobSetGang(t *testing.T) {
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	for _, f := range []string{"namespace.yaml", "rbac.yaml", "admission-policy.yaml"} {
		applyManifest(t, filepath.Join(root, "configs", "deploy", f))
	}
	waitJobWritePolicy(t)
	c := startController(t, controller.Options{Config: asServiceAccount(controllerNS, controllerSA), GangTimeout: time.Minute})
	ns := newNamespace(t, "e2e-jobset", true)

	pass := newJobSet(t, ns, "ok", 2, nil)
	fail := newJobSet(t, ns, "bad", 2, nil)
	tj := &trainjob.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "fine-tune", Namespace: ns, Labels: map[string]string{contract.KeyGate: "enabled"}},
		Spec: trainjob.Spec{RuntimeRef: trainjob.RuntimeRef{Name: "torch-distributed"}, Trainer: &trainjob.Trainer{NumNodes: ptr.To(int32(2))}}}
	require.NoError(t, k8s.Create(context.Background(), tj))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), tj) })
	tjSet := newJobSet(t, ns, "fine-tune", 2, tj)

	var ranks []*rank
	for _, p := range jobSetRankPods(t, pass, 2, []string{"node-0", "node-1"}, "nvidia.com/gpu") {
		ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), fullGPURank...))
	}
	for _, js := range []*jobsetapi.JobSet{fail, tjSet} {
		for i, p := range jobSetRankPods(t, js, 2, []string{"h100-node", "h100-node"}, "nvidia.com/mig-3g.40gb") {
			ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), "--sample", "h100-mig", "--devices", []string{"0:0", "1:0"}[i]))
		}
	}
	for i, r := range ranks {
		want := 0
		if i >= 2 {
			want = verdict.ExitFail
		}
		require.Equal(t, want, r.wait(t, time.Minute), joinRanks(ranks))
	}
	require.Equal(t, "pass", appliedVerdict(t, pass)[contract.AnnotationVerdict])
	require.False(t, jobSetSuspended(t, pass))
	require.Equal(t, "fail", appliedVerdict(t, fail)[contract.AnnotationVerdict])
	require.True(t, jobSetSuspended(t, fail), "JobSet not suspended")
	require.Eventually(t, func() bool { return len(jobEvents(t, fail)["GangFailed"]) == 1 }, 10*time.Second, 100*time.Millisecond)

	tjVerdict := appliedVerdict(t, tj)
	require.Equal(t, "fail", tjVerdict[contract.AnnotationVerdict])
	require.Contains(t, tjVerdict[contract.AnnotationRules], "GANG_MIG_SPANS_GPUS")
	var tjEvents []string
	require.Eventually(t, func() bool { tjEvents = jobEvents(t, tj)["GangFailed"]; return len(tjEvents) == 1 }, 10*time.Second, 100*time.Millisecond)
	t.Logf("TrainJob annotations: %v\nevent: %s\nrank 0: %s", tjVerdict, tjEvents[0], ranks[4].termination())
	fresh := &trainjob.TrainJob{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(tj), fresh))
	require.True(t, ptr.Deref(fresh.Spec.Suspend, false), "TrainJob not suspended")
	require.Empty(t, jobAnnotations(t, tjSet)[contract.AnnotationVerdict], "the verdict is the TrainJob's, not its JobSet's")
	require.Nil(t, gangOf(t, tjSet), "the TrainJob's JobSet, labelled with the gate as the Trainer copies it, is no gang of its own")
	require.NotNil(t, gangOf(t, tj))
	require.EqualValues(t, 3, c.Decisions())

	// The CLI reads them live by kind/name: status shows the TrainJob's
	// gang, diagnose judges the JobSet.
	kubeconfig := kubeconfigFile(t)
	out, err := exec.Command(binary, "status", "trainjob/fine-tune", "-n", ns, "--kubeconfig", kubeconfig).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "GANG_MIG_SPANS_GPUS")
	out, _ = exec.Command(binary, "diagnose", "job", "jobset/ok", "-n", ns, "--kubeconfig", kubeconfig, "-o", "json").Output()
	require.Contains(t, string(out), `"subject": "JobSet `+ns+`/ok"`)
	require.NotContains(t, c.logs.String(), "forbidden", "the controller hit a permission it lacks")
	require.NotContains(t, c.logs.String(), "Forbidden", "the controller hit a permission it lacks")
}

// The shipped mutating webhook, on the real CRDs: a labelled TrainJob gets
// the runtime patch that carries its opt-in to its JobSet (the TrainJob
// schema accepts it); a JobSet as the Trainer makes it, in an opted-in
// namespace, gets the init container and the job-name label on its node
// template, and its initializer none; a JobSet of a namespace not opted
// in, unlabelled, is left as it was.
func TestE2EWebhookJobSetAndTrainJob(t *testing.T) {
	webhookController(t, "rankgate-tls-jobset", controller.Options{})
	ctx := context.Background()

	plain := newNamespace(t, "e2e-wh-trainjob", false)
	tj := &trainjob.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "fine-tune", Namespace: plain, Labels: map[string]string{contract.KeyGate: "enabled"}},
		Spec: trainjob.Spec{RuntimeRef: trainjob.RuntimeRef{Name: "torch-distributed"}, Trainer: &trainjob.Trainer{NumNodes: ptr.To(int32(2))}}}
	require.NoError(t, k8s.Create(ctx, tj))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), tj) })
	require.Len(t, tj.Spec.RuntimePatches, 1)
	p := tj.Spec.RuntimePatches[0]
	require.Equal(t, contract.RuntimePatchManager, p.Manager)
	require.Equal(t, map[string]string{contract.KeyGate: "enabled"}, p.TrainingRuntimeSpec.Template.Metadata.Labels)

	ns := newNamespace(t, "e2e-wh-jobset", true)
	gpu := corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1")}}
	step := func(name, ancestor string, n int32) jobsetapi.ReplicatedJob {
		rj := jobsetapi.ReplicatedJob{Name: name, Replicas: 1}
		rj.Template.Labels = map[string]string{jobset.LabelTrainJobAncestor: ancestor}
		rj.Template.Spec = batchv1.JobSpec{Parallelism: ptr.To(n), Completions: ptr.To(n), CompletionMode: ptr.To(batchv1.IndexedCompletion),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: name, Image: "pytorch/pytorch", Resources: gpu}}}}}
		return rj
	}
	js := &jobsetapi.JobSet{ObjectMeta: metav1.ObjectMeta{Name: "fine-tune", Namespace: ns},
		Spec: jobsetapi.JobSetSpec{ReplicatedJobs: []jobsetapi.ReplicatedJob{step("model-initializer", "model-initializer", 1), step("node", "trainer", 2)}}}
	require.NoError(t, k8s.Create(ctx, js))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), js) })
	node := js.Spec.ReplicatedJobs[1].Template.Spec.Template
	require.Empty(t, node.Spec.InitContainers, "the pods get it, not the template")
	require.Equal(t, "fine-tune", node.Labels[controller.LabelJobName])
	require.Equal(t, contract.ValueInjectRanks, node.Labels[contract.LabelInject])
	require.Empty(t, js.Spec.ReplicatedJobs[0].Template.Spec.Template.Labels, "the initializer runs no rank")
	// A node pod as the Job controller makes it gets the init container
	// from the Pod webhook, through the API server.
	pod := nodePod(t, js)
	require.Equal(t, 1, countInit(pod.Spec))
	require.Equal(t, "rankgate-init", pod.Spec.InitContainers[0].Name)
	require.Equal(t, initImage, pod.Spec.InitContainers[0].Image)
	require.Equal(t, "1", pod.Spec.InitContainers[0].Resources.Limits.Name("nvidia.com/mig-1g.10gb", "").String())

	other := &jobsetapi.JobSet{ObjectMeta: metav1.ObjectMeta{Name: "untouched", Namespace: plain},
		Spec: jobsetapi.JobSetSpec{ReplicatedJobs: []jobsetapi.ReplicatedJob{step("node", "trainer", 2)}}}
	require.NoError(t, k8s.Create(ctx, other))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), other) })
	require.Empty(t, other.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.InitContainers)
	require.Empty(t, other.Spec.ReplicatedJobs[0].Template.Spec.Template.Labels)
	require.Zero(t, countInit(nodePod(t, other).Spec), "a pod of a JobSet not opted in")

	// The shipped example runtime is a valid ClusterTrainingRuntime; the
	// JobSet the Trainer makes of it (its template, its labels, numNodes 2)
	// keeps the runtime's init container and gets the job-name label.
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	rt := applyManifest(t, filepath.Join(root, "configs", "deploy", "examples", "clustertrainingruntime-gated.yaml"))[0]
	tmpl, _, _ := unstructured.NestedMap(rt.Object, "spec", "template")
	fromRuntime := &jobsetapi.JobSet{}
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"metadata": tmpl["metadata"], "spec": tmpl["spec"]}, fromRuntime))
	fromRuntime.Name, fromRuntime.Namespace = "from-runtime", plain
	fromRuntime.Spec.ReplicatedJobs[0].Replicas = 1
	fromRuntime.Spec.ReplicatedJobs[0].Template.Spec.Parallelism = ptr.To(int32(2))
	fromRuntime.Spec.ReplicatedJobs[0].Template.Spec.Completions = ptr.To(int32(2))
	fromRuntime.Spec.ReplicatedJobs[0].Template.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
	require.NoError(t, k8s.Create(ctx, fromRuntime))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), fromRuntime) })
	pt := fromRuntime.Spec.ReplicatedJobs[0].Template.Spec.Template
	require.Equal(t, "from-runtime", pt.Labels[controller.LabelJobName])
	require.Len(t, pt.Spec.InitContainers, 1)
	require.Equal(t, "ghcr.io/rankgate/rankgate:v0.1.0", pt.Spec.InitContainers[0].Image, "the runtime's own init container")
}

const jobSetWritePolicy = "rankgate-controller-jobset-writes"

// The shipped policy for TrainJobs and JobSets lets the controller's
// service account write what it writes (rankgate.io/ annotations,
// spec.suspend) and refuses every other change it tries.
func TestE2EJobSetWritePolicy(t *testing.T) {
	dir := deployDir(t)
	for _, f := range []string{"namespace.yaml", "rbac.yaml", "admission-policy.yaml"} {
		applyManifest(t, filepath.Join(dir, f))
	}
	ctx := context.Background()
	ctl, err := client.New(asServiceAccount(controllerNS, controllerSA), client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)
	ns := newNamespace(t, "e2e-jobset-policy", true)
	js := newJobSet(t, ns, "policy", 2, nil)
	tj := &trainjob.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "policy", Namespace: ns, Annotations: map[string]string{"team": "vision"}},
		Spec: trainjob.Spec{RuntimeRef: trainjob.RuntimeRef{Name: "torch-distributed"}, Trainer: &trainjob.Trainer{NumNodes: ptr.To(int32(2))}}}
	require.NoError(t, k8s.Create(ctx, tj))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), tj) })
	// The API server loads a new policy asynchronously: a probe that
	// changes something each time (a change, not the object, is judged).
	for i, deadline := 1, time.Now().Add(30*time.Second); ; i++ {
		time.Sleep(200 * time.Millisecond)
		err := ctl.Patch(ctx, js, client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"ttlSecondsAfterFinished":%d}}`, i))))
		if err != nil && strings.Contains(err.Error(), jobSetWritePolicy) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server never enforced %s: %v", jobSetWritePolicy, err)
		}
	}

	// A spec field the kind's own schema lets change.
	other := map[string]string{
		"JobSet":   `{"spec":{"ttlSecondsAfterFinished":60}}`,
		"TrainJob": `{"spec":{"runtimePatches":[{"manager":"example.com/other","trainingRuntimeSpec":{"template":{"metadata":{"labels":{"a":"b"}}}}}]}}`,
	}
	for _, job := range []client.Object{js, tj} {
		t.Run(jobKind(t, job), func(t *testing.T) {
			spec := other[jobKind(t, job)]
			for _, p := range []string{
				`{"metadata":{"annotations":{"rankgate.io/verdict":"fail","rankgate.io/action":"suspend"}},"spec":{"suspend":true}}`,
				`{"metadata":{"annotations":{"rankgate.io/action":null}},"spec":{"suspend":false}}`,
			} {
				require.NoError(t, ctl.Patch(ctx, job, client.RawPatch(types.MergePatchType, []byte(p))), p)
			}
			for what, p := range map[string]string{
				"another spec field":             spec,
				"suspend with another field":     strings.Replace(spec, `{"spec":{`, `{"spec":{"suspend":true,`, 1),
				"an annotation outside rankgate": `{"metadata":{"annotations":{"team":"other"}}}`,
				"a label":                        `{"metadata":{"labels":{"kueue.x-k8s.io/queue-name":"free"}}}`,
			} {
				err := ctl.Patch(ctx, job, client.RawPatch(types.MergePatchType, []byte(p)))
				require.Error(t, err, "%s: allowed", what)
				require.Contains(t, err.Error(), jobSetWritePolicy, "%s: refused by something else: %v", what, err)
			}
		})
	}
}

// A Kueue-managed TrainJob whose gang fails: its Workload (which Kueue
// makes for the TrainJob, not for its JobSet) is deactivated, its
// spec.suspend is left to Kueue, and it carries the verdict.
func TestE2EKueueTrainJobGangFail(t *testing.T) {
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	for _, f := range []string{"namespace.yaml", "rbac.yaml"} {
		applyManifest(t, filepath.Join(root, "configs", "deploy", f))
	}
	ns := newNamespace(t, "e2e-kueue-trainjob", true)
	c := startController(t, controller.Options{Config: asServiceAccount(controllerNS, controllerSA), GangTimeout: time.Minute, Namespace: controllerNS})
	tj := &trainjob.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "bert", Namespace: ns, Labels: map[string]string{controller.LabelKueueQueue: "gpu"}},
		Spec: trainjob.Spec{RuntimeRef: trainjob.RuntimeRef{Name: "torch-distributed"}, Trainer: &trainjob.Trainer{NumNodes: ptr.To(int32(2))}}}
	require.NoError(t, k8s.Create(context.Background(), tj))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), tj) })
	w := kueueWorkload(t, tj)
	js := newJobSet(t, ns, "bert", 2, tj)
	var ranks []*rank
	for i, p := range jobSetRankPods(t, js, 2, []string{"h100-node", "h100-node"}, "nvidia.com/mig-3g.40gb") {
		ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), "--sample", "h100-mig", "--devices", []string{"0:0", "1:0"}[i]))
	}
	for _, r := range ranks {
		require.Equal(t, verdict.ExitFail, r.wait(t, time.Minute), r.String())
	}
	a := appliedVerdict(t, tj)
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	require.False(t, workloadActive(t, w), "the Kueue Workload was not deactivated")
	fresh := &trainjob.TrainJob{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(tj), fresh))
	require.False(t, ptr.Deref(fresh.Spec.Suspend, false), "rankgate set spec.suspend on a Kueue-managed TrainJob")
	require.False(t, jobSetSuspended(t, js))
	require.NotContains(t, c.logs.String(), "orbidden", "the controller hit a permission it lacks")
}

// The Pending watchdog judges a TrainJob from its JobSet's pods: node pods
// asking a MIG shape no node offers get the TrainJob suspended with
// SHAPE_MISMATCH within the pending grace, no rank having reported; its
// JobSet is left to the Trainer.
func TestE2EPendingTrainJobShapeMismatchSuspended(t *testing.T) {
	ns := newNamespace(t, "e2e-pending-trainjob", true)
	startScheduler(t)
	a100All1g20(t, "pend-trainjob-a100")
	c := startController(t, controller.Options{GangTimeout: time.Hour})
	mig := corev1.ResourceList{"nvidia.com/mig-2g.20gb": resource.MustParse("1")}
	tj := &trainjob.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "shape", Namespace: ns},
		Spec: trainjob.Spec{RuntimeRef: trainjob.RuntimeRef{Name: "torch-distributed"},
			Trainer: &trainjob.Trainer{NumNodes: ptr.To(int32(2)), ResourcesPerNode: &corev1.ResourceRequirements{Limits: mig}}}}
	require.NoError(t, k8s.Create(context.Background(), tj))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), tj) })
	js := newJobSet(t, ns, "shape", 2, tj)
	start := time.Now()
	for _, p := range jobSetRankPods(t, js, 2, []string{"", ""}, "nvidia.com/mig-2g.20gb", scheduled) {
		waitUnschedulable(t, p)
	}
	require.Eventually(t, func() bool {
		fresh := &trainjob.TrainJob{}
		require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(tj), fresh))
		return ptr.Deref(fresh.Spec.Suspend, false)
	}, 20*time.Second, 100*time.Millisecond, c.logs.String())
	t.Logf("suspended after %s", time.Since(start).Round(time.Millisecond))
	a := appliedVerdict(t, tj)
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	require.Contains(t, strings.Split(a[contract.AnnotationRules], ","), verdict.RuleShapeMismatch)
	require.Empty(t, firstReportAt(t, tj), "a rank reported")
	require.Len(t, jobEvents(t, tj)["PendingFailed"], 1)
	require.False(t, jobSetSuspended(t, js))
	require.Empty(t, jobAnnotations(t, js)[contract.AnnotationVerdict])
}

// The Trainer creates its JobSet by server-side apply (field manager
// "trainer") and applies it again while it is suspended, as when Kueue
// admits the TrainJob and it is resumed: the init container and label the
// webhook added at creation are still on the rank template after that
// apply, which does not carry them.
func TestE2EWebhookJobSetSurvivesTrainerApply(t *testing.T) {
	webhookController(t, "rankgate-tls-jobset-apply", controller.Options{})
	ctx := context.Background()
	ns := newNamespace(t, "e2e-wh-apply", true)
	apply := func(suspend bool) *jobsetapi.JobSet {
		t.Helper()
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
			"metadata": map[string]any{"name": "applied", "namespace": ns},
			"spec": map[string]any{"suspend": suspend, "replicatedJobs": []any{map[string]any{
				"name": "node", "replicas": int64(1),
				"template": map[string]any{
					"metadata": map[string]any{"labels": map[string]any{jobset.LabelTrainJobAncestor: jobset.AncestorTrainer}},
					"spec": map[string]any{"parallelism": int64(2), "completions": int64(2), "completionMode": "Indexed",
						"template": map[string]any{"spec": map[string]any{"restartPolicy": "Never", "containers": []any{map[string]any{
							"name": "node", "image": "pytorch/pytorch",
							"resources": map[string]any{"limits": map[string]any{"nvidia.com/mig-1g.10gb": "1"}}}}}}}}}}},
		}}
		require.NoError(t, k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("trainer"), client.ForceOwnership))
		js := &jobsetapi.JobSet{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(u), js))
		return js
	}
	js := apply(true)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), js) })
	pt := js.Spec.ReplicatedJobs[0].Template.Spec.Template
	require.Equal(t, contract.ValueInjectRanks, pt.Labels[contract.LabelInject], "gated at creation")
	js = apply(false)
	require.False(t, ptr.Deref(js.Spec.Suspend, true))
	pt = js.Spec.ReplicatedJobs[0].Template.Spec.Template
	require.Equal(t, contract.ValueInjectRanks, pt.Labels[contract.LabelInject], "the Trainer's apply dropped the gate's label")
	require.Equal(t, "applied", pt.Labels[controller.LabelJobName])
	require.Equal(t, 1, countInit(nodePod(t, js).Spec), "a pod of the applied JobSet")
}

// nodePod creates pod 0 of Job 0 of js's ReplicatedJob `node` as the
// JobSet and Job controllers make it (jobSetNodeJob, jobIndexPod), through
// the API server and its webhooks, and returns it as created.
func nodePod(t *testing.T, js *jobsetapi.JobSet) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	job := jobSetNodeJob(js)
	job.Spec.Suspend = ptr.To(true)
	require.NoError(t, k8s.Create(ctx, job))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), job) })
	p := jobIndexPod(job, 0)
	require.NoError(t, k8s.Create(ctx, p))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), p) })
	return p
}
