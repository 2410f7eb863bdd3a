package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// Kueue-managed jobs (label kueue.x-k8s.io/queue-name) are stopped by
// deactivating their Kueue Workload, never by runPolicy.suspend, which
// Kueue owns. Kueue's own Workload CRD (v0.17.0) is installed; no Kueue
// controller runs, so the Workloads are created as Kueue creates them for
// an admitted job: in the job's namespace, controlled by the job.

// queueLabel puts job in Kueue LocalQueue "gpu" (before any of its pods
// exist, as a user's manifest does).
func queueLabel(t testing.TB, job client.Object) {
	t.Helper()
	patch := `{"metadata":{"labels":{"` + controller.LabelKueueQueue + `":"gpu"}}}`
	require.NoError(t, k8s.Patch(context.Background(), job, client.RawPatch(types.MergePatchType, []byte(patch))))
}

// kueueWorkload creates the Workload Kueue creates for job (active,
// admitted: the job runs).
func kueueWorkload(t testing.TB, job client.Object) *unstructured.Unstructured {
	t.Helper()
	gvk, err := k8s.GroupVersionKindFor(job)
	require.NoError(t, err)
	w := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"queueName": "gpu",
			"active":    true,
			"podSets": []any{map[string]any{
				"name": "main", "count": int64(2),
				"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "train", "image": "pytorch/pytorch"}}}},
			}},
		},
	}}
	w.SetGroupVersionKind(controller.WorkloadGVK)
	w.SetNamespace(job.GetNamespace())
	w.SetName(strings.ToLower(gvk.Kind) + "-" + job.GetName() + "-kueue")
	w.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: job.GetName(),
		UID: job.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}})
	require.NoError(t, k8s.Create(context.Background(), w))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), w) })
	return w
}

// workloadActive reads spec.active of w from the API server.
func workloadActive(t testing.TB, w *unstructured.Unstructured) bool {
	t.Helper()
	f := &unstructured.Unstructured{}
	f.SetGroupVersionKind(controller.WorkloadGVK)
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(w), f))
	active, found, err := unstructured.NestedBool(f.Object, "spec", "active")
	require.NoError(t, err)
	return !found || active
}

// A Kueue-managed MPIJob whose gang fails (MIG slices on two GPUs): its
// Workload is deactivated, runPolicy.suspend is left to Kueue, the verdict
// annotations and the Event are as for any job. The controller runs with
// the shipped RBAC (impersonating its service account), which must allow
// the Workload patch.
func TestE2EKueueGangFailDeactivatesWorkload(t *testing.T) {
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	for _, f := range []string{"namespace.yaml", "rbac.yaml"} {
		applyManifest(t, filepath.Join(root, "configs", "deploy", f))
	}
	cfg := rest.CopyConfig(restCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:rankgate-system:rankgate-controller",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:rankgate-system", "system:authenticated"}}
	ns := newNamespace(t, "e2e-kueue-gang", true)
	c := startController(t, controller.Options{Config: cfg, GangTimeout: time.Minute, Namespace: "rankgate-system"})
	job := mpiJob(t, ns, "bert", 2)
	queueLabel(t, job)
	w := kueueWorkload(t, job)
	var ranks []*rank
	for i, dev := range []string{"0:0", "1:0"} {
		p := rankPod(t, job, "worker", i, "h100-node", "nvidia.com/mig-3g.40gb")
		ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), "--sample", "h100-mig", "--devices", dev))
	}
	for _, r := range ranks {
		require.Equal(t, verdict.ExitFail, r.wait(t, time.Minute), r.String())
		require.Contains(t, r.termination(), "GANG_MIG_SPANS_GPUS", r.String())
	}
	a := appliedVerdict(t, job)
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	require.Equal(t, controller.ActionSuspend, a[contract.AnnotationAction])
	require.Contains(t, a[contract.AnnotationRules], "GANG_MIG_SPANS_GPUS")
	require.False(t, workloadActive(t, w), "the Kueue Workload was not deactivated")
	require.False(t, isSuspended(t, job), "rankgate set runPolicy.suspend on a Kueue-managed job")
	var ev []string
	require.Eventually(t, func() bool {
		ev = jobEvents(t, job)["GangFailed"]
		return len(ev) == 1
	}, 10*time.Second, 100*time.Millisecond, "no GangFailed event")
	require.Contains(t, ev[0], "Kueue Workload "+w.GetName()+" deactivated")
	require.Contains(t, ev[0], "GANG_MIG_SPANS_GPUS")
	// Not resumed: the job stays as the verdict left it (no re-gate while
	// the Workload is inactive).
	time.Sleep(time.Second)
	require.Equal(t, "fail", jobAnnotations(t, job)[contract.AnnotationVerdict])
	require.NotContains(t, c.logs.String(), "orbidden", "the controller hit a permission it lacks")
	t.Logf("event: %s", ev[0])
}

// A Kueue-managed PyTorchJob whose pods the scheduler cannot place (MIG
// shape mismatch): the Pending watchdog deactivates its Workload instead
// of suspending it.
func TestE2EKueuePendingDeactivatesWorkload(t *testing.T) {
	ns := newNamespace(t, "e2e-kueue-pending", true)
	startScheduler(t)
	a100All1g20(t, "kueue-a100-1g-a")
	c := startController(t, controller.Options{GangTimeout: time.Hour, PendingGrace: ptr.To(2 * time.Second)})
	job, pods := schedJob(t, ns, "shape", nil, 1, "nvidia.com/mig-2g.20gb", 1)
	queueLabel(t, job)
	w := kueueWorkload(t, job)
	for _, p := range pods {
		waitUnschedulable(t, p)
	}
	require.Eventually(t, func() bool { return !workloadActive(t, w) }, 20*time.Second, 100*time.Millisecond, c.logs.String())
	a := appliedVerdict(t, job)
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	require.Contains(t, strings.Split(a[contract.AnnotationRules], ","), verdict.RuleShapeMismatch)
	require.False(t, isSuspended(t, job), "rankgate set runPolicy.suspend on a Kueue-managed job")
	ev := jobEvents(t, job)
	require.Len(t, ev["PendingFailed"], 1, "%v", ev)
	require.Contains(t, ev["PendingFailed"][0], "Kueue Workload "+w.GetName()+" deactivated")
	require.Contains(t, ev["PendingFailed"][0], "SHAPE_MISMATCH")
	time.Sleep(time.Second)
	require.Equal(t, "fail", jobAnnotations(t, job)[contract.AnnotationVerdict], "re-gated while the Workload is inactive")
	require.False(t, workloadActive(t, w))
}

// A Kueue-managed job not admitted yet has no Workload: the verdict is
// annotated, nothing else is written, and the Event says so.
func TestE2EKueueNoWorkloadAnnotatesOnly(t *testing.T) {
	ns := newNamespace(t, "e2e-kueue-nowl", true)
	startScheduler(t)
	a100All1g20(t, "kueue-a100-1g-b")
	c := startController(t, controller.Options{GangTimeout: time.Hour, PendingGrace: ptr.To(time.Second)})
	job, pods := schedJob(t, ns, "unadmitted", nil, 1, "nvidia.com/mig-2g.20gb", 1)
	queueLabel(t, job)
	for _, p := range pods {
		waitUnschedulable(t, p)
	}
	var ev []string
	require.Eventually(t, func() bool {
		ev = jobEvents(t, job)["PendingFailed"]
		return len(ev) == 1
	}, 20*time.Second, 100*time.Millisecond, c.logs.String())
	require.Contains(t, ev[0], "not admitted by Kueue yet")
	require.Equal(t, "fail", appliedVerdict(t, job)[contract.AnnotationVerdict])
	require.False(t, isSuspended(t, job), "rankgate set runPolicy.suspend on a Kueue-managed job")
}

// A forged Workload, controlled by the job and created by someone allowed
// to create Workloads, never stands in for the one Kueue made: a fail
// verdict deactivates every Workload the job controls, and the forged one
// set active again does not count as the job being resumed.
func TestE2EKueueForgedWorkloadDoesNotShieldTheJob(t *testing.T) {
	ns := newNamespace(t, "e2e-kueue-forged", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute})
	job := mpiJob(t, ns, "bert", 2)
	queueLabel(t, job)
	real := kueueWorkload(t, job)
	// Listed first (by name): the first match was taken before.
	forged := &unstructured.Unstructured{Object: map[string]any{"spec": real.Object["spec"]}}
	forged.SetGroupVersionKind(controller.WorkloadGVK)
	forged.SetNamespace(ns)
	forged.SetName("aaa-" + real.GetName())
	forged.SetOwnerReferences(real.GetOwnerReferences())
	require.NoError(t, k8s.Create(context.Background(), forged))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), forged) })
	var ranks []*rank
	for i, dev := range []string{"0:0", "1:0"} {
		p := rankPod(t, job, "worker", i, "h100-node", "nvidia.com/mig-3g.40gb")
		ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), "--sample", "h100-mig", "--devices", dev))
	}
	for _, r := range ranks {
		require.Equal(t, verdict.ExitFail, r.wait(t, time.Minute), r.String())
	}
	require.Equal(t, "fail", appliedVerdict(t, job)[contract.AnnotationVerdict])
	require.False(t, workloadActive(t, real), "the Workload Kueue made was not deactivated")
	require.False(t, workloadActive(t, forged))
	// The forger turns theirs back on: the job is not taken as resumed.
	require.NoError(t, k8s.Patch(context.Background(), forged, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"active":true}}`))))
	time.Sleep(2 * time.Second)
	require.Equal(t, "fail", jobAnnotations(t, job)[contract.AnnotationVerdict], "re-gated on a forged Workload")
	require.False(t, workloadActive(t, real))
}
