package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook"
	"github.com/rankgate/rankgate/verdict"
)

// chainRuntime is the Trainer's shipped torch-distributed
// ClusterTrainingRuntime (manifests/base/runtimes) with a dataset
// initializer step before the trainer, as the Trainer's runtimes with
// initializers have, and the test's scheduler and service account on
// every pod.
const chainRuntime = "torch-distributed-e2e"

func createChainRuntime(t *testing.T) {
	t.Helper()
	podSpec := func(name string) map[string]any {
		return map[string]any{"schedulerName": testScheduler, "serviceAccountName": serviceAccount,
			"containers": []any{map[string]any{"name": name, "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"}}}
	}
	rj := func(name, step string) map[string]any {
		return map[string]any{"name": name, "template": map[string]any{
			"metadata": map[string]any{"labels": map[string]any{jobset.LabelTrainJobAncestor: step}},
			"spec":     map[string]any{"template": map[string]any{"spec": podSpec(name)}}}}
	}
	initializer := rj("dataset-initializer", "dataset-initializer")
	node := rj("node", jobset.AncestorTrainer)
	node["dependsOn"] = []any{map[string]any{"name": "dataset-initializer", "status": "Complete"}}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
		"metadata": map[string]any{"name": chainRuntime, "labels": map[string]any{"trainer.kubeflow.org/framework": "torch"}},
		"spec": map[string]any{
			"mlPolicy": map[string]any{"numNodes": int64(1), "torch": map[string]any{}},
			"template": map[string]any{"spec": map[string]any{"replicatedJobs": []any{initializer, node}}},
		},
	}}
	require.NoError(t, k8s.Create(context.Background(), u))
}

// chainTrainJob creates a TrainJob of nodes nodes, each asking res: 1,
// on the chain's runtime.
func chainTrainJob(t *testing.T, ns, name string, nodes int32, res corev1.ResourceName, labels map[string]string) *trainjob.TrainJob {
	t.Helper()
	tj := &trainjob.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: trainjob.Spec{RuntimeRef: trainjob.RuntimeRef{Name: chainRuntime}, Trainer: &trainjob.Trainer{NumNodes: ptr.To(nodes),
			ResourcesPerNode: &corev1.ResourceRequirements{Limits: corev1.ResourceList{res: resource.MustParse("1")}}}}}
	require.NoError(t, k8s.Create(context.Background(), tj))
	return tj
}

// stepPods lists the pods of a JobSet's ReplicatedJob step.
func stepPods(t *testing.T, ns, jobSet, step string) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	require.NoError(t, k8s.List(context.Background(), pods, client.InNamespace(ns),
		client.MatchingLabels{jobset.LabelJobSetName: jobSet, jobset.LabelReplicatedJob: step}))
	return pods.Items
}

// completeInitializer plays the kubelet for the dataset initializer: its
// pod succeeds, so the Job controller completes its Job and the JobSet
// controller creates the node step, which depends on it.
func completeInitializer(t *testing.T, ns, jobSet string) {
	t.Helper()
	var pods []corev1.Pod
	require.Eventually(t, func() bool { pods = stepPods(t, ns, jobSet, "dataset-initializer"); return len(pods) == 1 },
		60*time.Second, 100*time.Millisecond, "the Job controller made no initializer pod")
	p := pods[0]
	require.Empty(t, p.Spec.InitContainers, "an initializer pod was gated")
	require.NotContains(t, p.Labels, controller.LabelJobName, "an initializer pod carries the gate's job-name label")
	endPod(t, &p, 0)
}

// boundNodePods waits until the Job controller made n pods of the node
// step and the scheduler bound them, and returns them by completion index.
func boundNodePods(t *testing.T, ns, jobSet string, n int) []*corev1.Pod {
	t.Helper()
	out := make([]*corev1.Pod, n)
	chainEventually(t, ns, 60*time.Second, "the node pods were not made and bound", func() bool {
		pods := stepPods(t, ns, jobSet, "node")
		if len(pods) != n {
			return false
		}
		for i := range pods {
			p := &pods[i]
			idx := p.Labels[jobset.LabelCompletionIndex]
			if p.Spec.NodeName == "" || len(idx) != 1 || idx[0] < '0' || int(idx[0]-'0') >= n {
				return false
			}
			out[idx[0]-'0'] = p
		}
		return true
	})
	return out
}

// TrainJobs through the real chain (Trainer -> JobSet -> Job -> pods ->
// scheduler) with the shipped webhooks: the mutating webhook's runtime
// patch survives the Trainer's validation and reaches the JobSet, the
// rank pods the Job controller makes carry the init container and are
// numbered by their completion index, the initializer pods are neither
// gated nor counted, a pass starts nothing more, and a fail suspends the
// TrainJob, which the Trainer carries to its JobSet and the JobSet
// controller to its Jobs, whose pods the Job controller deletes: the GPUs
// are free again.
func TestE2EChainTrainJob(t *testing.T) {
	realChain(t)
	c, gateURL := webhookController(t, "rankgate-tls-chain", controller.Options{})
	createChainRuntime(t)
	gpuNode(t, "h100-chain", "nvidia.com/mig-3g.40gb", 3)
	realNode(t, "h100-chain", map[string]int64{"nvidia.com/mig-3g.40gb": 3, "nvidia.com/gpu": 2}, nil)
	ns := chainNamespace(t, "e2e-chain", true)

	// Two nodes on the two 3g.40gb instances of GPU 1: pass.
	same := chainTrainJob(t, ns, "same-gpu", 2, "nvidia.com/mig-3g.40gb", nil)
	// Two nodes, nvidia.com/gpu each, on MIG instances of two profiles.
	mixed := chainTrainJob(t, ns, "mixed", 2, "nvidia.com/gpu", nil)

	type run struct {
		tj      *trainjob.TrainJob
		devices []string
		want    int
	}
	var ranks []*rank
	for _, r := range []run{{same, []string{"1:0", "1:1"}, 0}, {mixed, []string{"0:0", "0:1"}, verdict.ExitFail}} {
		js := &jobsetapi.JobSet{}
		require.Eventually(t, func() bool { return k8s.Get(context.Background(), client.ObjectKeyFromObject(r.tj), js) == nil },
			60*time.Second, 100*time.Millisecond, "the Trainer made no JobSet")
		require.Equal(t, "enabled", js.Labels[contract.KeyGate], "the runtime patch did not carry the opt-in to the JobSet")
		completeInitializer(t, ns, js.Name)
		for i, p := range boundNodePods(t, ns, js.Name, 2) {
			require.True(t, hasGateInit(p), "node pod %s was not gated", p.Name)
			require.Equal(t, js.Name, p.Labels[controller.LabelJobName])
			ranks = append(ranks, startRank(t, gateURL, p, token(t, p, gate.Audience), "--ca-file", namespaceCA(t, ns),
				"--sample", "h100-mig", "--devices", r.devices[i]))
		}
		for _, rk := range ranks[len(ranks)-2:] {
			require.Equal(t, r.want, rk.wait(t, time.Minute), joinRanks(ranks))
		}
	}

	require.Equal(t, "pass", appliedVerdict(t, same)[contract.AnnotationVerdict])
	require.False(t, isSuspended(t, same))
	g := gangOf(t, same)
	require.NotNil(t, g)
	require.EqualValues(t, 2, g.Spec.ExpectedRanks, "the initializer was counted as a rank")

	a := appliedVerdict(t, mixed)
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	t.Logf("mixed: rules %s\nreason: %s\nrank 1: %s", a[contract.AnnotationRules], a[contract.AnnotationReason], ranks[3].termination())
	require.True(t, isSuspended(t, mixed))
	// The real chain frees the GPUs: the Trainer suspends the JobSet, the
	// JobSet controller its Jobs, and the Job controller deletes the pods.
	require.Eventually(t, func() bool { return jobSetSuspended(t, &jobsetapi.JobSet{ObjectMeta: mixed.ObjectMeta}) },
		30*time.Second, 100*time.Millisecond, "the Trainer did not suspend the JobSet")
	// (No kubelet here to finish a bound pod's deletion: deleted is
	// terminating.)
	require.Eventually(t, func() bool {
		for _, p := range stepPods(t, ns, "mixed", "node") {
			if p.DeletionTimestamp == nil {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "the rank pods of the failed TrainJob were not deleted")
	require.Empty(t, stepPods(t, ns, "same-gpu", "node")[0].DeletionTimestamp)

	// Resumed, the TrainJob is gated again: the Trainer applies its
	// JobSet again (JobSet's own webhook accepts it) and the Job
	// controller makes new rank pods, which carry the init container.
	resumeTrainJob(t, client.ObjectKeyFromObject(mixed))
	require.Eventually(t, func() bool { return !jobSetSuspended(t, &jobsetapi.JobSet{ObjectMeta: mixed.ObjectMeta}) },
		30*time.Second, 100*time.Millisecond, "the Trainer did not resume the JobSet")
	require.Eventually(t, func() bool {
		fresh := 0
		for _, p := range stepPods(t, ns, "mixed", "node") {
			if p.DeletionTimestamp == nil {
				require.True(t, hasGateInit(&p), "a rank pod of the resumed TrainJob was not gated")
				fresh++
			}
		}
		return fresh == 2
	}, 30*time.Second, 100*time.Millisecond, "the resumed TrainJob got no new rank pods")
	require.NotContains(t, c.logs.String(), "forbidden")
}

// resumeTrainJob sets spec.suspend false, as a user resuming it does.
func resumeTrainJob(t *testing.T, key client.ObjectKey) {
	t.Helper()
	tj := &trainjob.TrainJob{}
	require.NoError(t, k8s.Get(context.Background(), key, tj))
	patch := client.MergeFrom(tj.DeepCopy())
	tj.Spec.Suspend = ptr.To(false)
	require.NoError(t, k8s.Patch(context.Background(), tj, patch))
}

// namespaceCA writes the gate's CA as the controller keeps it in ns (the
// ConfigMap a rank pod mounts) to a file.
func namespaceCA(t *testing.T, ns string) string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	require.Eventually(t, func() bool {
		return k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: webhook.CAConfigMapName}, cm) == nil && cm.Data[webhook.CAKey] != ""
	}, 20*time.Second, 100*time.Millisecond, "no gate CA in namespace %s", ns)
	f := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(f, []byte(cm.Data[webhook.CAKey]), 0o600))
	return f
}

// hasGateInit: p has the rank's init container the mutating webhook adds
// (webhook.InitName; not the launcher gate's).
func hasGateInit(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == webhook.InitName })
}

// The Pending watchdog on the real chain: a TrainJob asking a MIG shape
// no node offers (mig-2g.20gb; the node has 1g.20gb instances only) is
// suspended within 15 s of its pods being found unschedulable, with SHAPE_MISMATCH, before any
// rank reports. Then, with the controller down (no webhook answers), a
// JobSet of a namespace that is not opted in, and a TrainJob of an
// opted-in one, are admitted and their pods made as if rankgate were not
// installed: its webhooks cannot block a pod.
func TestE2EChainPendingAndControllerDown(t *testing.T) {
	realChain(t)
	// The node first, as in a cluster: a node the controller sees appear
	// holds hopeless verdicts for a while (a device plugin registering).
	a100All1g20(t, "a100-chain")
	c, _ := webhookController(t, "rankgate-tls-chain-pending", controller.Options{GangTimeout: time.Hour})
	createChainRuntime(t)
	ns := chainNamespace(t, "e2e-chain-pending", true)

	tj := chainTrainJob(t, ns, "shape", 2, "nvidia.com/mig-2g.20gb", nil)
	completeInitializer(t, ns, tj.Name)
	var start time.Time
	require.Eventually(t, func() bool {
		pods := stepPods(t, ns, tj.Name, "node")
		for i := range pods {
			if !unschedulable(&pods[i]) {
				return false
			}
		}
		start = time.Now()
		return len(pods) == 2
	}, 30*time.Second, 100*time.Millisecond, "the scheduler did not find the node pods unschedulable")
	require.Eventually(t, func() bool { return isSuspended(t, tj) },
		15*time.Second, 100*time.Millisecond, "the watchdog did not suspend the TrainJob within 15 s")
	t.Logf("suspended %s after its pods were unschedulable (pending grace %s)", time.Since(start).Round(time.Millisecond), controller.DefaultPendingGrace)
	a := appliedVerdict(t, tj)
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	require.Contains(t, strings.Split(a[contract.AnnotationRules], ","), verdict.RuleShapeMismatch)
	require.Len(t, jobEvents(t, tj)["PendingFailed"], 1)
	require.Eventually(t, func() bool { return jobSetSuspended(t, &jobsetapi.JobSet{ObjectMeta: tj.ObjectMeta}) },
		30*time.Second, 100*time.Millisecond, "the Trainer did not suspend the JobSet")

	// An opted-in JobSet admitted (its rank template labelled) while the
	// controller runs, started after it stopped.
	later := simpleJobSet(ns, "later")
	later.Spec.Suspend = ptr.To(true)
	require.NoError(t, k8s.Create(context.Background(), later))
	require.Equal(t, contract.ValueInjectRanks, later.Spec.ReplicatedJobs[0].Template.Spec.Template.Labels[contract.LabelInject])

	c.Stop(t)
	free := chainNamespace(t, "e2e-chain-free", false)
	require.NoError(t, k8s.Create(context.Background(), simpleJobSet(free, "free")))
	down := chainTrainJob(t, ns, "while-down", 2, "nvidia.com/mig-1g.20gb", nil)
	completeInitializer(t, ns, down.Name)
	for _, p := range append(boundNodePods(t, free, "free", 1), boundNodePods(t, ns, "while-down", 2)...) {
		require.False(t, hasGateInit(p), "pod %s/%s was changed while no webhook answered", p.Namespace, p.Name)
		require.NotContains(t, p.Labels, controller.LabelJobName)
	}

	// The labelled JobSet's rank pod is refused while no webhook answers
	// (never made without its init container), and made, gated, once a
	// replica answers again.
	require.NoError(t, k8s.Patch(context.Background(), later, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":false}}`))))
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(namespaceEvents(t, ns), func(e corev1.Event) bool {
			return e.Reason == "FailedCreate" && strings.Contains(e.Message, "rank-pod.mutate.rankgate.io")
		})
	}, 30*time.Second, 100*time.Millisecond, "the Job controller was not refused the labelled pod")
	require.Empty(t, stepPods(t, ns, "later", "node"), "a labelled pod was made while no webhook answered")
	webhookController(t, "rankgate-tls-chain-pending-2", controller.Options{GangTimeout: time.Hour})
	for _, p := range boundNodePods(t, ns, "later", 1) {
		require.True(t, hasGateInit(p), "pod %s made without its init container", p.Name)
	}
}

// simpleJobSet is a JobSet of one ReplicatedJob `node` of one pod asking
// a 1g.20gb MIG device, placed by the test's scheduler. It sets what
// JobSet's defaulting webhook sets (network, success and startup
// policies), so that the JobSet controller never meets a JobSet without
// them should that webhook's call be lost on a loaded machine (it then
// failed a reconcile with a nil dereference, once).
func simpleJobSet(ns, name string) *jobsetapi.JobSet {
	js := &jobsetapi.JobSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: jobsetapi.JobSetSpec{ReplicatedJobs: []jobsetapi.ReplicatedJob{{Name: "node", Replicas: 1}},
			Network:       &jobsetapi.Network{EnableDNSHostnames: ptr.To(true), PublishNotReadyAddresses: ptr.To(true)},
			SuccessPolicy: &jobsetapi.SuccessPolicy{Operator: jobsetapi.OperatorAll},
			StartupPolicy: &jobsetapi.StartupPolicy{StartupPolicyOrder: jobsetapi.AnyOrder}}}
	js.Spec.ReplicatedJobs[0].Template.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
	js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec = corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
		SchedulerName: testScheduler, ServiceAccountName: serviceAccount,
		Containers: []corev1.Container{{Name: "node", Image: "pytorch/pytorch", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/mig-1g.20gb": resource.MustParse("1")}}}}}
	return js
}

// namespaceEvents: the Events in ns.
func namespaceEvents(t *testing.T, ns string) []corev1.Event {
	t.Helper()
	evs := &corev1.EventList{}
	require.NoError(t, k8s.List(context.Background(), evs, client.InNamespace(ns)))
	return evs.Items
}

// A JobSet restart on the real chain is a new gang: the ranks of restart
// 0 pass; a rank pod fails, the Job controller fails its Job (backoffLimit
// 0), the JobSet controller deletes the Jobs (in the foreground: the
// garbage collector deletes the pods, and the test, playing the kubelet,
// lets them go) and makes them again labelled restart-attempt 1. Those
// pods land on MIG instances of two GPUs: judged afresh as the job's next
// attempt, they fail, and the JobSet is suspended.
func TestE2EChainJobSetRestart(t *testing.T) {
	realChain(t)
	_, gateURL := webhookController(t, "rankgate-tls-chain-restart", controller.Options{})
	gpuNode(t, "h100-restart", "nvidia.com/mig-3g.40gb", 3)
	realNode(t, "h100-restart", map[string]int64{"nvidia.com/mig-3g.40gb": 3}, nil)
	ns := chainNamespace(t, "e2e-chain-restart", true)
	ctx := context.Background()

	// With JobSet's defaults set (as simpleJobSet does): once in a full
	// run, JobSet's own validating webhook panicked on a JobSet that
	// reached it without them.
	js := &jobsetapi.JobSet{ObjectMeta: metav1.ObjectMeta{Name: "restarts", Namespace: ns},
		Spec: jobsetapi.JobSetSpec{FailurePolicy: &jobsetapi.FailurePolicy{MaxRestarts: 1},
			ReplicatedJobs: []jobsetapi.ReplicatedJob{{Name: "node", Replicas: 1}},
			Network:        &jobsetapi.Network{EnableDNSHostnames: ptr.To(true), PublishNotReadyAddresses: ptr.To(true)},
			SuccessPolicy:  &jobsetapi.SuccessPolicy{Operator: jobsetapi.OperatorAll},
			StartupPolicy:  &jobsetapi.StartupPolicy{StartupPolicyOrder: jobsetapi.AnyOrder}}}
	jt := &js.Spec.ReplicatedJobs[0].Template.Spec
	jt.Parallelism, jt.Completions, jt.CompletionMode, jt.BackoffLimit = ptr.To(int32(2)), ptr.To(int32(2)), ptr.To(batchv1.IndexedCompletion), ptr.To(int32(0))
	jt.Template.Spec = corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, SchedulerName: testScheduler, ServiceAccountName: serviceAccount,
		Containers: []corev1.Container{{Name: "node", Image: "pytorch/pytorch", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/mig-3g.40gb": resource.MustParse("1")}}}}}
	require.NoError(t, k8s.Create(ctx, js))

	run := func(devices []string, want int) []*corev1.Pod {
		t.Helper()
		pods := boundNodePods(t, ns, js.Name, 2)
		var ranks []*rank
		for i, p := range pods {
			require.True(t, hasGateInit(p), "pod %s was not gated", p.Name)
			ranks = append(ranks, startRank(t, gateURL, p, token(t, p, gate.Audience), "--ca-file", namespaceCA(t, ns),
				"--sample", "h100-mig", "--devices", devices[i]))
		}
		for _, r := range ranks {
			require.Equal(t, want, r.wait(t, time.Minute), joinRanks(ranks))
		}
		return pods
	}
	first := run([]string{"1:0", "1:1"}, 0)
	require.Equal(t, "pass", appliedVerdict(t, js)[contract.AnnotationVerdict])

	endPod(t, first[1], 1)
	// The kubelet's part in the foreground deletion: a deleted pod goes.
	require.Eventually(t, func() bool {
		restarted := 0
		for _, p := range stepPods(t, ns, js.Name, "node") {
			switch {
			case p.DeletionTimestamp != nil:
				_ = k8s.Delete(ctx, &p, client.GracePeriodSeconds(0))
			case p.Labels[jobset.LabelRestartAttempt] == "1":
				restarted++
			}
		}
		return restarted == 2
	}, 60*time.Second, 200*time.Millisecond, "the JobSet controller did not restart the JobSet")

	run([]string{"0:0", "1:0"}, verdict.ExitFail)
	a := appliedVerdict(t, js)
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	require.Contains(t, a[contract.AnnotationRules], "GANG_MIG_SPANS_GPUS")
	require.Equal(t, "1", a[contract.AnnotationRestartAttempt])
	require.Equal(t, "2", a[contract.AnnotationAttempt], "the restart is the job's next attempt")
	require.True(t, strings.HasPrefix(a[contract.AnnotationPreviousVerdict], "pass "), a[contract.AnnotationPreviousVerdict])
	require.True(t, jobSetSuspended(t, js))
}

// endPod plays the kubelet for a pod whose one container exited with
// code: it succeeded (0) or failed.
func endPod(t *testing.T, p *corev1.Pod, code int32) {
	t.Helper()
	phase, reason, ready := corev1.PodSucceeded, "Completed", "PodCompleted"
	if code != 0 {
		phase, reason, ready = corev1.PodFailed, "Error", "PodFailed"
	}
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		now := metav1.Now()
		p.Status.Phase = phase
		p.Status.StartTime = &now
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now, Reason: ready}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, StartedAt: now, FinishedAt: now}}}}
		return k8s.Status().Update(context.Background(), p)
	}))
}
