package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/verdict"
)

// An admin takes a node's two H100s out of service with a DeviceTaintRule
// (resource.k8s.io/v1, GA in Kubernetes 1.37) selecting the node's pool:
// the ResourceSlice stays untainted, kube-scheduler applies the rule's
// taint before it allocates and allocates neither GPU to the job's
// claims, which match only them; both ranks stay Pending. rankgate applies
// the rule as the scheduler does: the job waits, never suspended, with
// DRA_DEVICE_UNHEALTHY naming each device and the rule. Once the rule is
// deleted, the scheduler binds both ranks and the cause is removed.
func TestE2EPendingDRADeviceTaintRule(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "e2e-pending-dra-rule", true)
	startScheduler(t)
	node := "pend-dra-rule"
	draNode(t, node)
	slice := clustertest.GPUSlice(node, draH100s...)
	rule := &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "maint-" + node}, Spec: resourcev1.DeviceTaintRuleSpec{
		DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr.To(clustertest.NVIDIADRADriver), Pool: ptr.To(node)},
		Taint:          resourcev1.DeviceTaint{Key: "gpu.example.com/maintenance", Value: "drain", Effect: resourcev1.DeviceTaintEffectNoSchedule},
	}}
	draObjects(t, clustertest.DeviceClass("gpu.nvidia.com", ""), slice, rule)
	// The API server serves v1 DeviceTaintRules and stamps the taint.
	stored := &resourcev1.DeviceTaintRule{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(rule), stored))
	require.NotNil(t, stored.Spec.Taint.TimeAdded)
	sel := "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"
	tmpl := claimTemplate(t, ns, "h100", "gpu.nvidia.com", sel)
	c := startController(t, controller.Options{GangTimeout: time.Hour, PendingGrace: ptr.To(time.Duration(0))})
	job, pods := claimJob(t, ns, "maint", node, tmpl)
	// The real scheduler refuses the tainted GPUs: both ranks are marked
	// unschedulable, none bound, no claim allocated.
	for _, p := range pods {
		f := waitUnschedulable(t, p)
		require.Empty(t, f.Spec.NodeName)
		for _, c := range f.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				t.Logf("%s: the scheduler said %q", p.Name, c.Message)
			}
		}
	}
	claims := &resourcev1.ResourceClaimList{}
	require.NoError(t, k8s.List(ctx, claims, client.InNamespace(ns)))
	require.Len(t, claims.Items, 2)
	for _, cl := range claims.Items {
		require.Nil(t, cl.Status.Allocation, "the scheduler allocated ResourceClaim %s despite the DeviceTaintRule", cl.Name)
	}
	var wf string
	require.Eventually(t, func() bool { wf = jobAnnotations(t, job)[contract.AnnotationWaitingFor]; return wf != "" }, 20*time.Second, 100*time.Millisecond, c.logs.String())
	taint := "gpu.example.com/maintenance=drain:NoSchedule from DeviceTaintRule " + rule.Name
	want := verdict.RuleDRADeviceUnhealthy + ": Master (1 pod) + Worker (1 pod): the published devices would serve the DRA requests (resource claims gpu) of all 2 pending pods, " +
		"but matching devices are tainted (as unhealthy by the driver, or by a DeviceTaintRule) and the scheduler allocates none of those: the healthy ones serve 0. " +
		"claim template " + ns + "/h100 request gpu: 1 device(s) of DeviceClass gpu.nvidia.com where " + sel + ": 2 published devices match, 2 of them tainted: " +
		"gpu-0 on " + node + " (" + taint + "); gpu-1 on " + node + " (" + taint + "). " +
		"The pods wait until those devices are repaired and published untainted, and the rules' taints removed."
	require.Equal(t, want, wf)
	// Re-judged (a node change), past the grace: still waiting.
	labelNode(t, node, map[string]string{"resync": "1"})
	time.Sleep(time.Second)
	require.False(t, isSuspended(t, job), "a job waiting for devices a DeviceTaintRule took out was suspended:\n%s", c.logs.String())
	a := jobAnnotations(t, job)
	require.Empty(t, a[contract.AnnotationVerdict])
	require.Equal(t, want, a[contract.AnnotationWaitingFor])
	ev := jobEvents(t, job)
	require.Empty(t, ev["PendingFailed"], "%v", ev)
	require.NotEmpty(t, ev["PendingWaiting"], "%v", ev)
	require.Contains(t, ev["PendingWaiting"][0], "gpu-0 on "+node+" ("+taint+")")

	// Serviced: the admin deletes the rule; the slice never changed.
	require.NoError(t, k8s.Delete(ctx, rule))
	boundAndWarned(t, c, job, pods, node, "the scheduler did not bind the ranks once the DeviceTaintRule was deleted")
	t.Logf("waiting-for: %s", wf)
}
