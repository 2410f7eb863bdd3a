package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/validate"
	"github.com/rankgate/rankgate/verdict"
)

// The gate never blocks its own action. The shipped install as it is
// (namespace, RBAC, both ValidatingAdmissionPolicies, the FlowSchema, the
// Services, both webhook configurations with their shipped rules and
// selectors, only their address pointed at the test's replica), the
// controller running as its own service account with its own
// certificates, leader election and the shipped admission policies, and a
// real kube-scheduler. Every kind of write the controller makes must pass
// that whole chain:
//   - jobs (the verdict annotations and suspend) for a job admitted while
//     its MIG shape existed and then left hopeless by the pool's
//     retirement, a job created while the webhooks were down, and a job
//     created before its namespace was opted in;
//   - a Kueue Workload (deactivation) for a Kueue-managed job;
//   - Gangs (create and status), Events, the CA ConfigMaps of opted-in
//     namespaces, the gate's EndpointSlice, its Secret, the CA bundle of
//     its webhook configurations, its election Lease;
//
// and a person's harmless update (a label) of the hopeless job is admitted.
func TestE2EOwnWritesPassTheShippedChain(t *testing.T) {
	ctx := context.Background()
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	for _, f := range []string{"namespace.yaml", "rbac.yaml", "admission-policy.yaml", "flowschema.yaml", "service.yaml"} {
		applyManifest(t, filepath.Join(root, "configs", "deploy", f))
	}
	waitJobWritePolicy(t)
	whAddr := freePort(t)
	installWebhooks(t, "localhost:"+strings.Split(whAddr, ":")[1])
	t.Cleanup(func() {
		_ = k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: controllerNS, Name: "rankgate-tls"}})
		_ = k8s.Delete(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: controllerNS, Name: controller.GateEndpointSliceName("rankgate-gate")}})
	})
	const shape = "nvidia.com/mig-1g.5gb"

	// While no replica answers (failurePolicy Ignore): admitted unchanged.
	nsDown := newNamespace(t, "e2e-own-down", true)
	down := migJob(t, nsDown, "down", shape, nil)
	require.Empty(t, down.Spec.PyTorchReplicaSpecs[kubeflowv1.PyTorchJobReplicaTypeWorker].Template.Spec.InitContainers, "mutated while no replica answered")
	// Before its namespace is opted in: no webhook sees it.
	nsLate := newNamespace(t, "e2e-own-late", false)
	late := migJob(t, nsLate, "late", shape, nil)

	startScheduler(t)
	c := startController(t, controller.Options{Config: asServiceAccount(controllerNS, controllerSA), GangTimeout: time.Hour,
		LeaderElection: true, Namespace: controllerNS, LeaderElectionNamespace: controllerNS, LeaderElectionID: "rankgate-controller",
		GateService: "rankgate-gate", GateEndpointIP: "192.0.2.78", CertDir: t.TempDir(),
		WebhookOptions: controller.WebhookOptions{ManageCerts: true, WebhookAddr: whAddr, InitImage: initImage,
			CertDNS: []string{"localhost"}, CertInterval: 200 * time.Millisecond, AdmissionPolicies: validate.DefaultPolicies()}})
	waitInjected(t, c)
	require.Eventually(t, c.IsLeader, 20*time.Second, 50*time.Millisecond)
	// The pool that offers the shape, and a node that stays (no GPU node at
	// all: the webhook judges no placement).
	pool := "e2e-own-a100-40gb"
	a100x40All1g5(t, pool)
	a100All1g20(t, "e2e-own-a100-80gb")

	// Admitted while the pool offers the shape, and mutated.
	nsMain := newNamespace(t, "e2e-own-main", true)
	var retired *kubeflowv1.PyTorchJob
	require.Eventually(t, func() bool {
		j, err := tryMigJob(nsMain, "retired", shape, nil)
		if err != nil {
			return false
		}
		retired = j
		return true
	}, 20*time.Second, 200*time.Millisecond, "the job was refused while the pool offered its shape")
	t.Cleanup(func() { _ = k8s.Delete(ctx, retired) })
	require.Len(t, retired.Spec.PyTorchReplicaSpecs[kubeflowv1.PyTorchJobReplicaTypeWorker].Template.Spec.InitContainers, 1, "not mutated")
	queued := migJob(t, nsMain, "queued", shape, map[string]string{controller.LabelKueueQueue: "gpu"})
	w := kueueWorkload(t, queued)

	// The pool is retired: the shape exists nowhere, a create is refused.
	require.NoError(t, k8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: pool}}))
	require.Eventually(t, func() bool {
		probe := retired.DeepCopy()
		probe.ObjectMeta = metav1.ObjectMeta{Name: "probe", Namespace: nsMain}
		err := k8s.Create(ctx, probe, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), verdict.RuleShapeMismatch)
	}, 20*time.Second, 200*time.Millisecond, "a create of the retired shape is still admitted")

	// A person's label on the now hopeless job is admitted.
	grant(t, nsMain, "alice", "kubeflow.org", []string{"pytorchjobs"}, "get", "patch")
	alice := asUser(t, "alice")
	require.NoError(t, alice.Patch(ctx, retired, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"vision"}}}`))),
		"an editor's label on a job whose shape was retired")

	jobs := []*kubeflowv1.PyTorchJob{retired, down, late, queued}
	for _, j := range jobs {
		for _, typ := range []string{"master", "worker"} {
			rankPod(t, j, typ, 0, "", shape, withGPUs(shape, 1), scheduled)
		}
	}
	for _, j := range jobs {
		for _, typ := range []string{"master", "worker"} {
			waitUnschedulable(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: j.Namespace, Name: j.Name + "-" + typ + "-0"}})
		}
	}
	unschedulable := time.Now()
	optIn := &corev1.Namespace{}
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Name: nsLate}, optIn))
	optIn.Labels = map[string]string{contract.KeyGate: "enabled"}
	require.NoError(t, k8s.Update(ctx, optIn))

	within := controller.DefaultPendingGrace + 15*time.Second
	for _, j := range []*kubeflowv1.PyTorchJob{retired, down, late} {
		require.NoError(t, waitFor(within, func() bool { return isSuspended(t, j) }),
			"%s/%s not suspended within grace + 15 s\n%s", j.Namespace, j.Name, c.logs.String())
	}
	require.NoError(t, waitFor(within, func() bool { return !workloadActive(t, w) }), "the Kueue Workload was not deactivated")
	t.Logf("all suspended or deactivated %s after the pods were unschedulable", time.Since(unschedulable).Round(time.Millisecond))
	require.False(t, isSuspended(t, queued), "rankgate set runPolicy.suspend on a Kueue-managed job")

	for _, j := range jobs {
		a := appliedVerdict(t, j) // the Gang was created and says Applied
		require.Equal(t, "fail", a[contract.AnnotationVerdict], j.Name)
		require.Contains(t, a[contract.AnnotationRules], verdict.RuleShapeMismatch, j.Name)
		g := gangOf(t, j)
		require.True(t, meta.IsStatusConditionTrue(g.Status.Conditions, contract.ConditionDecided), j.Name)
		require.Eventually(t, func() bool { return len(jobEvents(t, j)["PendingFailed"]) == 1 }, 10*time.Second, 100*time.Millisecond,
			"no PendingFailed Event on %s", j.Name)
		require.Equal(t, "team=vision", labelOf(t, retired, "team"))
	}

	// The CA ConfigMap in every opted-in namespace (nsLate once opted in).
	for _, ns := range []string{nsMain, nsDown, nsLate} {
		require.Eventually(t, func() bool {
			cm := &corev1.ConfigMap{}
			return k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: webhook.CAConfigMapName}, cm) == nil && cm.Data[webhook.CAKey] != ""
		}, 20*time.Second, 100*time.Millisecond, "no CA ConfigMap in %s", ns)
	}
	// Its own Secret, the gate's EndpointSlice, its Lease.
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Namespace: controllerNS, Name: "rankgate-tls"}, &corev1.Secret{}))
	require.Eventually(t, func() bool {
		es := &discoveryv1.EndpointSlice{}
		return k8s.Get(ctx, types.NamespacedName{Namespace: controllerNS, Name: controller.GateEndpointSliceName("rankgate-gate")}, es) == nil &&
			len(es.Endpoints) == 1 && slices.Equal(es.Endpoints[0].Addresses, []string{"192.0.2.78"})
	}, 20*time.Second, 100*time.Millisecond, "the gate's EndpointSlice")
	lease := &coordinationv1.Lease{}
	require.NoError(t, k8s.Get(ctx, types.NamespacedName{Namespace: controllerNS, Name: "rankgate-controller"}, lease))
	require.NotEmpty(t, ptr.Deref(lease.Spec.HolderIdentity, ""), "the election Lease has no holder")

	logs := c.logs.String()
	for _, s := range []string{"denied the request", "orbidden", "admission webhook"} {
		require.NotContains(t, logs, s, "a write of the controller was refused")
	}
}

// migJob creates a PyTorchJob (Master and one Worker) whose containers ask
// one device of res each and start one torchrun process; extra labels on
// the job.
func migJob(t *testing.T, ns, name, res string, labels map[string]string) *kubeflowv1.PyTorchJob {
	t.Helper()
	j, err := tryMigJob(ns, name, res, labels)
	require.NoError(t, err)
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), j) })
	return j
}

func tryMigJob(ns, name, res string, labels map[string]string) (*kubeflowv1.PyTorchJob, error) {
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "pytorch", Image: "nvcr.io/nvidia/pytorch:25.10-py3", Command: []string{"torchrun", "--nproc-per-node=1", "train.py"},
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(res): resource.MustParse("1")}},
	}}}}
	j := &kubeflowv1.PyTorchJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: kubeflowv1.PyTorchJobSpec{PyTorchReplicaSpecs: map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{
			kubeflowv1.PyTorchJobReplicaTypeMaster: {Replicas: ptr.To(int32(1)), Template: *tmpl.DeepCopy()},
			kubeflowv1.PyTorchJobReplicaTypeWorker: {Replicas: ptr.To(int32(1)), Template: *tmpl.DeepCopy()},
		}},
	}
	return j, k8s.Create(context.Background(), j)
}

// a100x40All1g5 is an A100-40GB node laid out all-1g.5gb (GFD and
// mig-manager labels, mixed strategy).
func a100x40All1g5(t testing.TB, name string) {
	gpuNode(t, name, "nvidia.com/mig-1g.5gb", 56)
	realNode(t, name, map[string]int64{"nvidia.com/mig-1g.5gb": 56}, map[string]string{
		"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "40960",
		"nvidia.com/mig-1g.5gb.count": "56", "nvidia.com/mig-1g.5gb.memory": "4864", "nvidia.com/mig-1g.5gb.multiprocessors": "14",
		"nvidia.com/mig.capable": "true", "nvidia.com/mig.config": "all-1g.5gb", "nvidia.com/mig.config.state": "success",
		"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.deploy.device-plugin": "true",
	})
}

// labelOf is "key=value" of the job's label key as stored.
func labelOf(t testing.TB, o client.Object, key string) string {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvkOf(t, o))
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(o), u))
	return fmt.Sprintf("%s=%s", key, u.GetLabels()[key])
}
