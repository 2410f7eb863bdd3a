package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// Pending scenarios in which the cluster changes under a waiting job and
// the real scheduler then places it.

// a100Labels are GFD's and mig-manager's labels of an A100-80GB node of 8
// GPUs laid out config (all-<profile>, perGPU instances of profile each,
// with its memory and SMs), in state.
func a100Labels(config, state, profile string, perGPU int, memMiB, sms string) map[string]string {
	l := map[string]string{
		"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81920",
		"nvidia.com/mig.capable": "true", "nvidia.com/mig.config": config, "nvidia.com/mig.config.state": state,
		"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.deploy.device-plugin": "true",
	}
	if profile != "" {
		p := "nvidia.com/mig-" + profile
		l[p+".count"], l[p+".memory"], l[p+".multiprocessors"] = strconv.Itoa(8*perGPU), memMiB, sms
	}
	return l
}

// relabel replaces a node's labels under nvidia.com/ with want.
func relabel(t testing.TB, name string, want map[string]string) {
	t.Helper()
	n := &corev1.Node{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Name: name}, n))
	for k := range n.Labels {
		if strings.HasPrefix(k, "nvidia.com/") {
			delete(n.Labels, k)
		}
	}
	for k, v := range want {
		n.Labels[k] = v
	}
	require.NoError(t, k8s.Update(context.Background(), n))
}

// passOneRank runs the job's one rank (a 2g.20gb MIG instance of the
// sample node) and checks the gang passes.
func passOneRank(t *testing.T, c *ctrl, job client.Object, p *corev1.Pod) {
	t.Helper()
	r := startRank(t, c.URL, p, token(t, p, gate.Audience), "--sample", "h100-mig", "--devices", "0:1")
	require.Equal(t, 0, r.wait(t, time.Minute), r.String())
	require.Equal(t, verdict.VerdictPass, decodeVerdict(t, r).Verdict, r.String())
	a := appliedVerdict(t, job)
	require.Equal(t, "pass", a[contract.AnnotationVerdict], a[contract.AnnotationReason])
	require.False(t, isSuspended(t, job))
	ev := jobEvents(t, job)
	require.Empty(t, ev["PendingFailed"], "%v", ev)
	require.Len(t, ev["GangPassed"], 1, "%v", ev)
}

// (h) The job of (g), one rank, on nodes laid out all-1g.20gb; before its
// grace (the default 10 s) ends, mig-manager relayouts a node to
// all-2g.20gb and the device plugin advertises the new instances: the
// scheduler places the pod, the job is never failed, and its gang passes.
func TestE2EPendingNodeGainsShape(t *testing.T) {
	ns := newNamespace(t, "e2e-pending-gains", true)
	startScheduler(t)
	for _, n := range []string{"pend-h-a", "pend-h-b"} {
		gpuNode(t, n, "nvidia.com/mig-1g.20gb", 32)
		realNode(t, n, map[string]int64{"nvidia.com/mig-1g.20gb": 32}, a100Labels("all-1g.20gb", "success", "1g.20gb", 4, "19968", "14"))
	}
	c := startController(t, controller.Options{GangTimeout: time.Hour})
	job, pods := schedJob(t, ns, "gains", nil, 0, "nvidia.com/mig-2g.20gb", 1)
	since := time.Now()
	waitUnschedulable(t, pods[0])
	relabel(t, "pend-h-b", a100Labels("all-2g.20gb", "success", "2g.20gb", 3, "19968", "28"))
	setAllocatable(t, "pend-h-b", map[string]int64{"nvidia.com/mig-2g.20gb": 24})
	require.Equal(t, "pend-h-b", boundTo(t, pods[0], 30*time.Second))
	require.Less(t, time.Since(since), controller.DefaultPendingGrace, "placed only after the grace")
	// Past the grace: still not failed.
	time.Sleep(time.Until(since.Add(controller.DefaultPendingGrace + 2*time.Second)))
	require.False(t, isSuspended(t, job), c.logs.String())
	require.Empty(t, jobAnnotations(t, job)[contract.AnnotationVerdict])
	bound := &corev1.Pod{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(pods[0]), bound))
	passOneRank(t, c, job, bound)
}

// (k) A node mid-reconfiguration (mig.config=all-2g.20gb,
// state=pending, device plugin paused) whose new layout serves the job:
// the job waits (waiting-for: MIG_RECONFIG_PENDING naming the node); once
// the state is success and the device plugin advertises 2g.20gb, the
// scheduler places it and it runs.
func TestE2EPendingMIGReconfigThenRuns(t *testing.T) {
	ns := newNamespace(t, "e2e-pending-reconfig", true)
	startScheduler(t)
	const node = "pend-k-a100"
	gpuNode(t, node, "nvidia.com/mig-1g.20gb", 0)
	mid := a100Labels("all-2g.20gb", "pending", "1g.20gb", 4, "19968", "14")
	mid["nvidia.com/gpu.deploy.device-plugin"] = "paused-for-mig-change"
	realNode(t, node, map[string]int64{"nvidia.com/mig-1g.20gb": 0}, mid)
	c := startController(t, controller.Options{GangTimeout: time.Hour, PendingGrace: ptr.To(time.Duration(0))})
	job, pods := schedJob(t, ns, "reconf", nil, 0, "nvidia.com/mig-2g.20gb", 1)
	waitUnschedulable(t, pods[0])
	var wf string
	require.Eventually(t, func() bool { wf = jobAnnotations(t, job)[contract.AnnotationWaitingFor]; return wf != "" }, 15*time.Second, 100*time.Millisecond, c.logs.String())
	require.True(t, strings.HasPrefix(wf, verdict.RuleMIGReconfigPending+": "), wf)
	require.Contains(t, wf, node)
	require.Contains(t, wf, "mig.config.state=pending")
	ev := jobEvents(t, job)
	require.Len(t, ev["PendingWaiting"], 1, "%v", ev)
	require.Contains(t, ev["PendingWaiting"][0], verdict.RuleMIGReconfigPending)
	require.False(t, isSuspended(t, job))

	// mig-manager finishes: state success, GFD relabels, the device plugin
	// comes back with the new instances.
	relabel(t, node, a100Labels("all-2g.20gb", "success", "2g.20gb", 3, "19968", "28"))
	setAllocatable(t, node, map[string]int64{"nvidia.com/mig-2g.20gb": 24})
	require.Equal(t, node, boundTo(t, pods[0], 30*time.Second))
	require.Eventually(t, func() bool { _, ok := jobAnnotations(t, job)[contract.AnnotationWaitingFor]; return !ok }, 15*time.Second, 100*time.Millisecond,
		"rankgate.io/waiting-for left on a placed job")
	bound := &corev1.Pod{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(pods[0]), bound))
	passOneRank(t, c, job, bound)
}
