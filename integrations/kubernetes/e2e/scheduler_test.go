package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A real kube-scheduler (bin/k8s/kube-scheduler, built from the pinned
// k8s.io/kubernetes by hack/build-test-binaries.sh) against the envtest API
// server, for the tests that need the scheduler's own decisions: it binds
// the pods it can place and marks the others PodScheduled=False, reason
// Unschedulable, with its own message.
//
// It runs one profile named testScheduler: only pods that ask for it
// (spec.schedulerName) are its to place, so the unbound pods that other
// tests leave behind (envtest runs no garbage collector) stay where they
// are. It sees every node and every bound pod, as a real scheduler does.

const testScheduler = "rankgate-e2e-scheduler"

// startScheduler runs kube-scheduler until the test ends and returns once
// it places pods (a probe pod was judged).
func startScheduler(t testing.TB) {
	t.Helper()
	bin := chainBinary(t, "kube-scheduler")
	tmp := t.TempDir()
	kubeconfig := kubeconfigFile(t)
	config := filepath.Join(tmp, "scheduler.yaml")
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: 200
  burst: 400
leaderElection:
  leaderElect: false
profiles:
- schedulerName: %s
`, kubeconfig, testScheduler)), 0o600))
	p := runTool(t, bin, nil, "--config", config, "--secure-port", "0", "-v", "2")

	// A probe pod no node can take: the scheduler runs and has synced once
	// it marks the probe unschedulable.
	ensureNamespace(t, "scheduler-probe")
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("probe-%d", time.Now().UnixNano()), Namespace: "scheduler-probe"},
		Spec: corev1.PodSpec{SchedulerName: testScheduler, NodeSelector: map[string]string{"rankgate-e2e/no-such-node": "true"},
			Containers: []corev1.Container{{Name: "probe", Image: "busybox"}}}}
	require.NoError(t, k8s.Create(context.Background(), probe))
	defer func() { _ = k8s.Delete(context.Background(), probe) }()
	p.until(t, 90*time.Second, "judging a pod", func() bool {
		got := &corev1.Pod{}
		require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(probe), got))
		return unschedulable(got)
	})
}

func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// scheduled makes a pod the test scheduler's to place.
func scheduled(p *corev1.Pod) { p.Spec.SchedulerName = testScheduler }

// realNode makes a node made by gpuNode look like a kubelet's to the
// scheduler: the well-known labels, no not-ready taint, and an allocatable
// list of cpu, memory, pods and the given device-plugin resources
// (replacing the GPU resources it had). It is deleted when the test ends.
func realNode(t testing.TB, name string, gpus map[string]int64, labels map[string]string) {
	t.Helper()
	all := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
	for k, v := range labels {
		all[k] = v
	}
	labelNode(t, name, all)
	setAllocatable(t, name, gpus)
}

// setAllocatable sets a node's GPU resources (capacity and allocatable),
// as a device plugin registering (or a MIG layout change) does; cpu,
// memory and pods stay.
func setAllocatable(t testing.TB, name string, gpus map[string]int64) {
	t.Helper()
	ctx := context.Background()
	for try := 0; ; try++ {
		n := &corev1.Node{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: name}, n))
		rl := corev1.ResourceList{}
		for k, v := range n.Status.Allocatable {
			if k == corev1.ResourceCPU || k == corev1.ResourceMemory || k == corev1.ResourcePods || k == corev1.ResourceEphemeralStorage {
				rl[k] = v
			}
		}
		for k, v := range gpus {
			rl[corev1.ResourceName(k)] = *resource.NewQuantity(v, resource.DecimalSI)
		}
		n.Status.Capacity, n.Status.Allocatable = rl, rl.DeepCopy()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		err := k8s.Status().Update(ctx, n)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || try > 5 {
			require.NoError(t, err)
		}
	}
}

// boundTo waits until the scheduler bound pod and returns its node.
func boundTo(t testing.TB, p *corev1.Pod, within time.Duration) string {
	t.Helper()
	var node string
	err := waitFor(within, func() bool {
		f := &corev1.Pod{}
		require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(p), f))
		node = f.Spec.NodeName
		return node != ""
	})
	require.NoError(t, err, "pod %s/%s not bound", p.Namespace, p.Name)
	return node
}

func waitFor(d time.Duration, ok func() bool) error {
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			return errors.New("timed out after " + d.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}
