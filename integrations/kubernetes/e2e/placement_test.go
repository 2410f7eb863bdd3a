package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mpiv2beta1 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// withGPUs makes every container of the pod ask n of its GPU resource, and
// adds the init containers given.
func withGPUs(res string, n int, extra ...corev1.Container) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		rl := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(int64(n), resource.DecimalSI)}}
		p.Spec.InitContainers[0].Resources, p.Spec.Containers[0].Resources = rl, rl
		p.Spec.InitContainers = append(p.Spec.InitContainers, extra...)
	}
}

// openGang starts a job of two workers whose worker 0 reports (a passing
// rank) and whose worker 1 is created by edit, unbound, and then marked
// unschedulable by the scheduler with msg. It returns the reporting rank.
func openGang(t *testing.T, c *ctrl, ns, name string, annotations map[string]string, msg string, edit func(*corev1.Pod)) (*kubeflowv1.PyTorchJob, *rank, *corev1.Pod) {
	t.Helper()
	job := pytorchJob(t, ns, name, false, 2, annotations)
	p0 := rankPod(t, job, "worker", 0, "node-1", "")
	p1 := rankPod(t, job, "worker", 1, "", "nvidia.com/gpu", edit)
	r := startRank(t, c.URL, p0, token(t, p0, gate.Audience), fullGPURank...)
	require.Eventually(t, func() bool { return firstReportAt(t, job) != "" }, 20*time.Second, 50*time.Millisecond)
	markUnschedulable(t, p1, msg)
	return job, r, p1
}

// Whether a missing rank can ever be placed is the schedule engine's
// answer (diagnose's), from the controller's caches: a MIG profile no node
// offers and a sidecar that takes the pod past the largest node fail the
// gang at once with the engine's reason; a pod that only waits for busy
// GPUs does not (the deadline decides).
func TestE2EPlacementFromTheEngine(t *testing.T) {
	ns := newNamespace(t, "e2e-placement", true)
	gpuNode(t, "place-mig-1g", "nvidia.com/mig-1g.20gb", 7)
	gpuNode(t, "place-gpu-8", "nvidia.com/gpu", 8)
	c := startController(t, controller.Options{GangTimeout: time.Hour, ResendGrace: time.Second})

	unplaceable := func(t *testing.T, r *rank, job client.Object, pod *corev1.Pod, start time.Time, reason ...string) {
		t.Helper()
		require.Equal(t, verdict.ExitFail, r.wait(t, 30*time.Second), r.String())
		require.Less(t, time.Since(start), 20*time.Second, "not decided at once")
		v := decodeVerdict(t, r)
		require.Equal(t, []string{verdict.RuleGangRankUnplaceable}, v.RuleIDs(), r.String())
		f := v.Findings[0]
		require.Equal(t, []int{1}, f.Ranks)
		require.Equal(t, []string{pod.Name}, f.Pods)
		for _, s := range reason {
			require.Contains(t, f.Message, s)
		}
		a := appliedVerdict(t, job)
		require.Equal(t, "fail", a[contract.AnnotationVerdict])
		require.Equal(t, verdict.RuleGangRankUnplaceable, a[contract.AnnotationRules])
		require.Contains(t, a[contract.AnnotationReason], pod.Name)
	}

	t.Run("MIG profile no node offers", func(t *testing.T) {
		start := time.Now()
		job, r, p1 := openGang(t, c, ns, "mig2g", nil, "0/3 nodes are available: 3 Insufficient nvidia.com/mig-2g.20gb.", withGPUs("nvidia.com/mig-2g.20gb", 1))
		// The engine's reason: the shape asked, that no node offers it, and
		// the nearest shapes the cluster has.
		unplaceable(t, r, job, p1, start, "SHAPE_MISMATCH: ", "asks nvidia.com/mig-2g.20gb", "no node offers it", "The cluster has", "nvidia.com/mig-1g.20gb")
	})

	t.Run("sidecar beyond the largest node", func(t *testing.T) {
		// 8 GPUs for the trainer and 1 for a restartable init container
		// (a sidecar, which runs beside it): 9 on nodes of at most 8. The
		// old answer (largest request of one container) missed it.
		sidecar := corev1.Container{Name: "gpu-monitor", Image: "dcgm-exporter", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}
		start := time.Now()
		job, r, p1 := openGang(t, c, ns, "sidecar", nil, "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", withGPUs("nvidia.com/gpu", 8, sidecar))
		unplaceable(t, r, job, p1, start, "SHAPE_MISMATCH: ", "asks {nvidia.com/gpu: 9} per pod", "The most any node offers: nvidia.com/gpu 8")
	})

	t.Run("busy GPUs wait for the deadline", func(t *testing.T) {
		// 8 GPUs fit an empty node of 8: the pod waits for busy GPUs, and
		// only the gang deadline fails it.
		start := time.Now()
		_, r, p1 := openGang(t, c, ns, "busy", map[string]string{contract.AnnotationGangTimeout: "4s"}, "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", withGPUs("nvidia.com/gpu", 8))
		require.Equal(t, verdict.ExitFail, r.wait(t, 30*time.Second), r.String())
		require.GreaterOrEqual(t, time.Since(start), 3500*time.Millisecond, "failed before the deadline: %s", r.String())
		v := decodeVerdict(t, r)
		require.Equal(t, []string{verdict.RuleGangIncomplete}, v.RuleIDs(), r.String())
		require.Equal(t, []string{p1.Name}, v.Findings[0].Pods)
		require.Contains(t, v.Findings[0].Message, "Insufficient nvidia.com/gpu")
	})
}

// The base install grants no delete on jobs. A failing gang whose policy is
// delete (the flag, or the job's annotation) is suspended instead: the
// ranks hear "suspend", the job carries rankgate.io/action: suspend and is
// suspended, and the Event says the delete was not allowed. A verdict
// recorded as delete (allowed then) whose delete is refused when applied
// is suspended the same way.
func TestE2EOnFailDeleteWithoutPermissionSuspends(t *testing.T) {
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	for _, f := range []string{"namespace.yaml", "rbac.yaml", "admission-policy.yaml"} {
		applyManifest(t, filepath.Join(root, "configs", "deploy", f))
	}
	waitJobWritePolicy(t)
	cfg := rest.CopyConfig(restCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: controllerUser,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + controllerNS, "system:authenticated"}}
	ns := newNamespace(t, "e2e-ondelete", true)

	// A verdict an earlier leader recorded with the delete action.
	recorded := pytorchJob(t, ns, "recorded", false, 2, nil)
	rep := verdict.NewReport(ns+"/PyTorchJob/recorded: 2 of 2 ranks reported", []verdict.Finding{{
		Rule: verdict.RuleGangMIGSpansGPUs, Severity: verdict.SeverityFail, Message: "ranks 0 and 1 use MIG instances on 2 physical GPUs"}})
	recordGang(t, recorded, ns, string(recorded.UID), true, rep, controller.ActionDelete, "replica-crashed", time.Now())

	c := startController(t, controller.Options{Config: cfg, GangTimeout: time.Minute, OnFail: controller.ActionDelete, Namespace: controllerNS})
	byFlag := mpiJob(t, ns, "by-flag", 2)
	byAnnotation := pytorchJob(t, ns, "by-annotation", false, 2, map[string]string{contract.AnnotationOnFail: "delete"})
	var ranks []*rank
	for _, job := range []client.Object{byFlag, byAnnotation} {
		for i, dev := range []string{"0:0", "1:0"} {
			p := rankPod(t, job, "worker", i, "h100-node", "nvidia.com/mig-3g.40gb")
			ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), "--sample", "h100-mig", "--devices", dev))
		}
	}
	for _, r := range ranks {
		require.Equal(t, verdict.ExitFail, r.wait(t, time.Minute), joinRanks(ranks))
		require.Contains(t, r.termination(), "job action: suspend", r.String())
	}
	for _, job := range []client.Object{byFlag, byAnnotation, recorded} {
		a := appliedVerdict(t, job)
		require.Equal(t, "fail", a[contract.AnnotationVerdict], job.GetName())
		require.Eventually(t, func() bool { return jobAnnotations(t, job)[contract.AnnotationAction] == controller.ActionSuspend }, 10*time.Second, 100*time.Millisecond,
			"%s: action %q", job.GetName(), jobAnnotations(t, job)[contract.AnnotationAction])
		require.Eventually(t, func() bool { return suspended(t, job) }, 10*time.Second, 100*time.Millisecond, "%s not suspended", job.GetName())
		require.Eventually(t, func() bool {
			ev := jobEvents(t, job)["GangFailed"]
			return len(ev) == 1 && strings.Contains(ev[0], "job suspended, not deleted") && strings.Contains(ev[0], "configs/overlays/on-fail-delete")
		}, 10*time.Second, 100*time.Millisecond, "%s: events %v", job.GetName(), jobEvents(t, job))
	}
	require.Eventually(t, func() bool { return gaugeValue(t, "rankgate_verdicts_unapplied") == 0 }, 10*time.Second, 50*time.Millisecond)
	require.EqualValues(t, 2, c.Decisions())
}

// suspended reads the job's runPolicy.suspend and that it still exists.
func suspended(t *testing.T, job client.Object) bool {
	t.Helper()
	ctx := context.Background()
	switch j := job.(type) {
	case *kubeflowv1.PyTorchJob:
		fresh := &kubeflowv1.PyTorchJob{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(j), fresh))
		require.Nil(t, fresh.DeletionTimestamp, "job deleted")
		return ptr.Deref(fresh.Spec.RunPolicy.Suspend, false)
	case *mpiv2beta1.MPIJob:
		fresh := &mpiv2beta1.MPIJob{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(j), fresh))
		require.Nil(t, fresh.DeletionTimestamp, "job deleted")
		return ptr.Deref(fresh.Spec.RunPolicy.Suspend, false)
	}
	t.Fatalf("unknown job kind %T", job)
	return false
}

// With delete permission (here the test's admin), the dry run that checks
// it deletes nothing: the verdict is recorded and applied (Event "job
// deleted"), then the job is deleted, and the ranks hear "delete".
func TestE2EOnFailDeleteWithPermissionDeletes(t *testing.T) {
	ns := newNamespace(t, "e2e-ondelete-ok", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute, OnFail: controller.ActionDelete})
	job := mpiJob(t, ns, "bad", 2)
	var ranks []*rank
	for i, dev := range []string{"0:0", "1:0"} {
		p := rankPod(t, job, "worker", i, "h100-node", "nvidia.com/mig-3g.40gb")
		ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), "--sample", "h100-mig", "--devices", dev))
	}
	for _, r := range ranks {
		require.Equal(t, verdict.ExitFail, r.wait(t, time.Minute), joinRanks(ranks))
		require.Contains(t, r.termination(), "job action: delete", r.String())
	}
	require.Eventually(t, func() bool {
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), &mpiv2beta1.MPIJob{})
		return apierrors.IsNotFound(err)
	}, 10*time.Second, 100*time.Millisecond, "job not deleted")
	require.Eventually(t, func() bool {
		ev := jobEvents(t, job)["GangFailed"]
		return len(ev) == 1 && strings.HasPrefix(ev[0], "job deleted: ")
	}, 10*time.Second, 100*time.Millisecond, "events %v", jobEvents(t, job))
	require.EqualValues(t, 1, c.Decisions())
}
