package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// mpiTrainJob creates a gated TrainJob of n nodes on an MPI runtime and
// the JobSet the Trainer makes of it (Trainer v2.3.0's MPI runtimes
// without runLauncherAsNode): ReplicatedJob node, one Indexed Job of n
// pods (the MPI ranks), and ReplicatedJob launcher, labelled as the
// trainer step, one pod that runs mpirun.
func mpiTrainJob(t *testing.T, ns, name string, n int32) (*trainjob.TrainJob, *jobsetapi.JobSet) {
	t.Helper()
	ctx := context.Background()
	tj := &trainjob.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
		Labels: map[string]string{contract.KeyGate: "enabled", contract.KeyLauncherGate: "enabled"}},
		Spec: trainjob.Spec{RuntimeRef: trainjob.RuntimeRef{Name: "mpi-distributed"}, Trainer: &trainjob.Trainer{NumNodes: ptr.To(n)}}}
	require.NoError(t, k8s.Create(ctx, tj))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), tj) })
	step := func(name string, pods int32, labels map[string]string, c corev1.Container) jobsetapi.ReplicatedJob {
		rj := jobsetapi.ReplicatedJob{Name: name, Replicas: 1}
		rj.Template.Labels = labels
		rj.Template.Spec = batchv1.JobSpec{Parallelism: ptr.To(pods), Completions: ptr.To(pods), CompletionMode: ptr.To(batchv1.IndexedCompletion),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{c}}}}
		return rj
	}
	js := &jobsetapi.JobSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{contract.KeyGate: "enabled", contract.KeyLauncherGate: "enabled"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: trainjob.GroupVersion.String(), Kind: "TrainJob", Name: tj.Name, UID: tj.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: jobsetapi.JobSetSpec{ReplicatedJobs: []jobsetapi.ReplicatedJob{
			step(jobset.TrainerNode, n, nil, corev1.Container{Name: "node", Image: "mpioperator/base", Command: []string{"/usr/sbin/sshd", "-De"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}),
			step(jobset.TrainerLauncher, 1, map[string]string{jobset.LabelTrainJobAncestor: jobset.AncestorTrainer},
				corev1.Container{Name: "node", Image: "mpioperator/base", Command: []string{"mpirun", "-np", "2", "python", "train.py"}}),
		}},
	}
	require.NoError(t, k8s.Create(ctx, js))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), js) })
	return tj, js
}

// trainJobLauncherPod creates the JobSet's launcher Job and its pod on
// node, labelled as the JobSet and Job controllers label it, with the
// job-name label the launcher gate adds to the launcher's template.
func trainJobLauncherPod(t *testing.T, js *jobsetapi.JobSet, node string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	jobName := js.Name + "-launcher-0"
	labels := map[string]string{
		jobset.LabelJobSetName: js.Name, jobset.LabelJobSetUID: string(js.UID), jobset.LabelReplicatedJob: jobset.TrainerLauncher,
		jobset.LabelJobIndex: "0", jobset.LabelJobGlobalIndex: "0", jobset.LabelRestartAttempt: "0",
		controller.LabelJobName: js.Name,
	}
	c := corev1.Container{Name: "node", Image: "mpioperator/base", Command: []string{"mpirun"}}
	bj := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: jobName, Namespace: js.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: jobset.GVK.GroupVersion().String(), Kind: "JobSet", Name: js.Name, UID: js.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Parallelism: ptr.To(int32(1)), Completions: ptr.To(int32(1)), CompletionMode: ptr.To(batchv1.IndexedCompletion),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{c}}}},
	}
	require.NoError(t, k8s.Create(ctx, bj))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), bj) })
	l := map[string]string{jobset.LabelCompletionIndex: "0", "batch.kubernetes.io/job-name": jobName}
	for k, v := range labels {
		l[k] = v
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: jobName + "-0-q9f3z", Namespace: js.Namespace, Labels: l,
			Annotations: map[string]string{jobset.LabelCompletionIndex: "0"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: jobName, UID: bj.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: corev1.PodSpec{ServiceAccountName: serviceAccount, NodeName: node, RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{c}},
	}
	require.NoError(t, k8s.Create(ctx, p))
	return p
}

// An MPI TrainJob with the launcher gate, as TestE2EMPIJobLauncherGate
// for an MPIJob: the launcher of its JobSet (no rank) waits on the gate's
// verdict endpoint for the TrainJob's gang; mpirun starts only after the
// node pods' gang passes. On a fail the launcher exits 1 with the reason,
// mpirun never starts, and the TrainJob is suspended. A rankgate init in
// the launcher pod is refused: it is no rank.
func TestE2ETrainJobMPILauncherGate(t *testing.T) {
	ns := newNamespace(t, "e2e-tj-launcher-gate", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute})

	t.Run("pass: mpirun starts after the verdict", func(t *testing.T) {
		_, js := mpiTrainJob(t, ns, "tlg-pass", 2)
		l, marker := startLauncher(t, c.URL, trainJobLauncherPod(t, js, "node-0"))
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(l.stderr.String(), "waiting for the gang verdict of "+ns+"/TrainJob/tlg-pass") {
			require.True(t, time.Now().Before(deadline), "the launcher never waited:\n%s", l)
			time.Sleep(50 * time.Millisecond)
		}
		require.False(t, exists(marker), "mpirun started before the verdict")
		require.True(t, l.running())

		var ranks []*rank
		for _, p := range jobSetRankPods(t, js, 2, []string{"node-1", "node-2"}, "nvidia.com/gpu") {
			ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), fullGPURank...))
		}
		for _, r := range ranks {
			require.Equal(t, 0, r.wait(t, time.Minute), r.String())
		}
		require.Equal(t, 0, l.wait(t, time.Minute), l.String())
		require.True(t, exists(marker))
		require.Contains(t, l.stdout.String(), "mpirun started")
		require.Contains(t, l.stderr.String(), "gang verdict for "+ns+"/TrainJob/tlg-pass: pass; starting CMD")
	})

	t.Run("fail: the launcher exits 1 with the reason, mpirun never starts", func(t *testing.T) {
		tj, js := mpiTrainJob(t, ns, "tlg-fail", 2)
		l, marker := startLauncher(t, c.URL, trainJobLauncherPod(t, js, "node-0"))
		var ranks []*rank
		for i, p := range jobSetRankPods(t, js, 2, []string{"h100-node", "h100-node"}, "nvidia.com/mig-3g.40gb") {
			ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), "--sample", "h100-mig", "--devices", []string{"0:0", "1:0"}[i]))
		}
		for _, r := range ranks {
			require.Equal(t, verdict.ExitFail, r.wait(t, time.Minute), r.String())
		}
		require.Equal(t, verdict.ExitFail, l.wait(t, time.Minute), l.String())
		require.False(t, exists(marker), "mpirun started after a fail")
		require.Contains(t, l.stderr.String(), "gang verdict fail for "+ns+"/TrainJob/tlg-fail (job action: suspend)")
		require.Contains(t, l.stderr.String(), "GANG_MIG_SPANS_GPUS")
		require.Contains(t, l.stderr.String(), "CMD not started")
		require.Contains(t, l.termination(), "GANG_MIG_SPANS_GPUS")
		t.Logf("launcher stderr:\n%s", l.stderr.String())
		require.Eventually(t, func() bool {
			fresh := &trainjob.TrainJob{}
			require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(tj), fresh))
			return ptr.Deref(fresh.Spec.Suspend, false)
		}, 20*time.Second, 100*time.Millisecond, "TrainJob not suspended")
	})

	t.Run("reports from the launcher are still refused", func(t *testing.T) {
		_, js := mpiTrainJob(t, ns, "tlg-report", 1)
		lp := trainJobLauncherPod(t, js, "node-0")
		r := startRank(t, c.URL, lp, token(t, lp, gate.Audience), fullGPURank...)
		require.Equal(t, verdict.ExitUsage, r.wait(t, time.Minute), r.String())
		require.Contains(t, r.stderr.String(), gate.CodeNotARank)
	})
}

// The shipped mutating webhook on the real CRDs, for an MPI TrainJob that
// asks for the launcher gate: the TrainJob's runtime patch carries the
// gate and the launcher-gate ask to its JobSet (the TrainJob schema keeps
// both labels); the JobSet the Trainer makes with those labels gets the
// label that gates its node pods (each gets the rank init container as it
// is made) and, on its launcher (no rank),
// the launcher gate and the job-name label the gate finds its job by.
func TestE2EWebhookTrainJobMPILauncher(t *testing.T) {
	webhookController(t, "rankgate-tls-tj-launcher", controller.Options{})
	ctx := context.Background()
	ns := newNamespace(t, "e2e-wh-tj-launcher", true)

	tj, js := mpiTrainJob(t, ns, "mpi-train", 2)
	require.Len(t, tj.Spec.RuntimePatches, 1)
	require.Equal(t, map[string]string{contract.KeyGate: "enabled", contract.KeyLauncherGate: "enabled"},
		tj.Spec.RuntimePatches[0].TrainingRuntimeSpec.Template.Metadata.Labels)

	got := &jobsetapi.JobSet{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(js), got))
	node := got.Spec.ReplicatedJobs[0].Template.Spec.Template
	require.Equal(t, contract.ValueInjectRanks, node.Labels[contract.LabelInject], "the node step runs the ranks")
	require.Equal(t, "mpi-train", node.Labels[controller.LabelJobName])
	require.Equal(t, 1, countInit(nodePod(t, got).Spec), "a node pod gets the rank init container")
	l := got.Spec.ReplicatedJobs[1].Template.Spec.Template
	require.Len(t, l.Spec.InitContainers, 1)
	require.Equal(t, "rankgate-copy", l.Spec.InitContainers[0].Name)
	require.Equal(t, "mpi-train", l.Labels[controller.LabelJobName])
	argv := l.Spec.Containers[0].Command
	require.Equal(t, []string{"launch", "--gang"}, argv[1:3])
	require.Equal(t, []string{"--", "mpirun", "-np", "2", "python", "train.py"}, argv[len(argv)-6:])
}

// The controller, as its shipped service account under the shipped RBAC,
// reads the runtime a TrainJob names when the TrainJob is created: a
// ClusterTrainingRuntime that runs its MPI launcher as a node puts
// rankgate.io/mpi-launcher-is-node in the webhook's runtime patch, and a
// TrainingRuntime of the TrainJob's namespace that does not leaves it out.
func TestE2EWebhookReadsRuntimesAsItsServiceAccount(t *testing.T) {
	dir := deployDir(t)
	for _, f := range []string{"namespace.yaml", "rbac.yaml"} {
		applyManifest(t, filepath.Join(dir, f))
	}
	ctx := context.Background()
	// The shipped RBAC lets the controller read its own Secret only.
	t.Cleanup(func() {
		_ = k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: controllerNS, Name: "rankgate-tls"}})
	})
	webhookController(t, "rankgate-tls", controller.Options{Config: asServiceAccount(controllerNS, controllerSA)})
	ns := newNamespace(t, "e2e-wh-runtimes", true)
	name := fmt.Sprintf("as-node-%d", time.Now().UnixNano())
	runtime := func(kind, namespace string, asNode bool) {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind,
			"metadata": map[string]any{"name": name, "namespace": namespace},
			"spec": map[string]any{
				"mlPolicy": map[string]any{"numNodes": int64(1), "mpi": map[string]any{"numProcPerNode": int64(1), "runLauncherAsNode": asNode}},
				"template": map[string]any{"spec": map[string]any{"replicatedJobs": []any{map[string]any{"name": "node",
					"template": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
						"containers": []any{map[string]any{"name": "node", "image": "mpi"}}}}}}}}}},
			},
		}}
		require.NoError(t, k8s.Create(ctx, u))
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), u) })
	}
	runtime(trainjob.KindClusterTrainingRuntime, "", true)
	runtime(trainjob.KindTrainingRuntime, ns, false)
	labels := func(kind string) map[string]string {
		tj := &trainjob.TrainJob{ObjectMeta: metav1.ObjectMeta{GenerateName: "tj-", Namespace: ns},
			Spec: trainjob.Spec{RuntimeRef: trainjob.RuntimeRef{Name: name, Kind: ptr.To(kind)}, Trainer: &trainjob.Trainer{NumNodes: ptr.To(int32(3))}}}
		require.NoError(t, k8s.Create(ctx, tj, client.DryRunAll))
		require.Len(t, tj.Spec.RuntimePatches, 1)
		return tj.Spec.RuntimePatches[0].TrainingRuntimeSpec.Template.Metadata.Labels
	}
	require.Equal(t, "true", labels(trainjob.KindClusterTrainingRuntime)[contract.LabelMPILauncherIsNode])
	require.NotContains(t, labels(trainjob.KindTrainingRuntime), contract.LabelMPILauncherIsNode)
}
