package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
)

// benchPyTorchJob is a realistic 8-pod PyTorchJob as a user writes it:
// torchrun with 8 processes per pod on 8 full GPUs, CPU and memory
// requests, NCCL settings, a shared-memory volume.
func benchPyTorchJob(ns, name string) *kubeflowv1.PyTorchJob {
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "llm-pretrain", "team": "research"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "pytorch", Image: "nvcr.io/nvidia/pytorch:25.10-py3",
				Command: []string{"torchrun"},
				Args:    []string{"--nnodes=8", "--nproc-per-node=8", "--rdzv-backend=c10d", "train.py", "--config=configs/7b.yaml"},
				Env: []corev1.EnvVar{
					{Name: "NCCL_DEBUG", Value: "WARN"}, {Name: "NCCL_SOCKET_IFNAME", Value: "eth0"},
					{Name: "NCCL_IB_HCA", Value: "mlx5"}, {Name: "OMP_NUM_THREADS", Value: "8"},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("900Gi")},
					Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("1000Gi")},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "dshm", MountPath: "/dev/shm"}},
			}},
			Volumes: []corev1.Volume{{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}},
		},
	}
	return &kubeflowv1.PyTorchJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kubeflowv1.PyTorchJobSpec{
			RunPolicy: kubeflowv1.RunPolicy{BackoffLimit: ptr.To(int32(3))},
			PyTorchReplicaSpecs: map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{
				kubeflowv1.PyTorchJobReplicaTypeMaster: {Replicas: ptr.To(int32(1)), Template: *tmpl.DeepCopy()},
				kubeflowv1.PyTorchJobReplicaTypeWorker: {Replicas: ptr.To(int32(7)), Template: *tmpl.DeepCopy()},
			},
		},
	}
}

// createJobs creates n jobs in ns on w workers and returns each create
// call's latency; mutated reports whether each job came back with the
// rank init container.
func createJobs(t *testing.T, c client.Client, ns, prefix string, n, w int) (lat []time.Duration, mutated int) {
	t.Helper()
	var mu sync.Mutex
	lat = make([]time.Duration, 0, n)
	err := parallel(n, w, func(i int) error {
		j := benchPyTorchJob(ns, fmt.Sprintf("%s-%d", prefix, i))
		start := time.Now()
		if err := c.Create(context.Background(), j); err != nil {
			return err
		}
		d := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		lat = append(lat, d)
		if countInit(j.Spec.PyTorchReplicaSpecs[kubeflowv1.PyTorchJobReplicaTypeWorker].Template.Spec) == 1 {
			mutated++
		}
		return nil
	})
	require.NoError(t, err)
	return lat, mutated
}

// TestBenchAdmissionEndToEnd: the time the admission webhooks (mutating
// and validating, served by the controller) add to creating a job. N
// realistic PyTorchJobs (RANKGATE_BENCH_JOBS, default 200) are created,
// RANKGATE_BENCH_CONCURRENCY (default 50) at a time, in an opted-in
// namespace with the shipped webhook configurations; then the
// configurations are deleted and the same N jobs are created against the
// same API server (controller still running). Each phase starts with a
// warm-up of 50 jobs that is not counted. Reported: p50/p99/max of the
// create call, both ways, and the difference.
func TestBenchAdmissionEndToEnd(t *testing.T) {
	benchOnly(t)
	n, w := envInt("RANKGATE_BENCH_JOBS", 200), envInt("RANKGATE_BENCH_CONCURRENCY", 50)
	ctx := context.Background()
	webhookController(t, "rankgate-tls-bench-adm", controller.Options{})
	// A fleet the jobs fit: 8 nodes of 8 GPUs.
	for i := range 8 {
		name := fmt.Sprintf("bench-adm-node-%d", i)
		gpuNode(t, name, "nvidia.com/gpu", 8)
		t.Cleanup(func() { _ = k8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}) })
	}
	// An unthrottled client: the measured time is the API server's.
	cfg := rest.CopyConfig(restCfg)
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	require.NoError(t, err)

	type phase struct {
		lat     []time.Duration
		mutated int
	}
	run := func(name string) phase {
		ns := newNamespace(t, "bench-adm-"+name, true)
		createJobs(t, c, ns, "warm", 50, w)
		lat, mutated := createJobs(t, c, ns, "job", n, w)
		// Leave the API server as it was: the next phase stores as many.
		require.NoError(t, c.DeleteAllOf(ctx, &kubeflowv1.PyTorchJob{}, client.InNamespace(ns)))
		return phase{lat, mutated}
	}
	with := run("with")
	require.Equal(t, n, with.mutated, "jobs not mutated with the webhooks installed")

	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("admissionregistration.k8s.io/v1")
		u.SetKind(kind)
		u.SetName("rankgate")
		require.NoError(t, k8s.Delete(ctx, u))
	}
	// The API server drops the webhooks once its informer sees the deletion.
	probeNS := newNamespace(t, "bench-adm-probe", true)
	require.Eventually(t, func() bool {
		lat, mutated := createJobs(t, c, probeNS, fmt.Sprintf("p%d", time.Now().UnixNano()), 1, 1)
		return len(lat) == 1 && mutated == 0
	}, 30*time.Second, 200*time.Millisecond, "the webhooks still answer after their configurations were deleted")
	without := run("without")
	require.Equal(t, 0, without.mutated, "jobs mutated without the webhooks")

	ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }
	summary := map[string]any{"jobs": n, "concurrency": w, "cpus": runtime.NumCPU()}
	for name, p := range map[string]phase{"withWebhooks": with, "withoutWebhooks": without} {
		summary[name] = map[string]string{"p50": ms(percentile(p.lat, .5)), "p99": ms(percentile(p.lat, .99)), "max": ms(percentile(p.lat, 1))}
	}
	summary["addedP50"] = ms(percentile(with.lat, .5) - percentile(without.lat, .5))
	summary["addedP99"] = ms(percentile(with.lat, .99) - percentile(without.lat, .99))
	b, _ := json.Marshal(summary)
	t.Logf("create latency, %d PyTorchJobs of 8 pods, %d concurrent: %s", n, w, b)
	writeBenchResult(t, "admission-end-to-end", b)
}
