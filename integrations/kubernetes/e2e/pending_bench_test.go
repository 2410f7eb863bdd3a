package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
)

// TestBenchPendingLatency: hopeless jobs' pods appear -> each job is
// suspended. 20 PyTorchJobs (Master + 1 Worker, each pod asking
// nvidia.com/mig-2g.20gb) on two A100-80GB nodes laid out all-1g.20gb; the
// pods are created as training-operator creates them, one job after the
// other, and the real kube-scheduler (startScheduler) marks them
// unschedulable. A job's time runs from the creation of its last pod to
// the first poll (every 20 ms) that sees runPolicy.suspend=true. Once with
// the default 10s grace, once with grace 0. Jobs: RANKGATE_BENCH_PENDING_JOBS
// (default 20).
//
//	RANKGATE_BENCH=1 go test -run TestBenchPendingLatency -v -count=1 ./integrations/kubernetes/e2e/
func TestBenchPendingLatency(t *testing.T) {
	benchOnly(t)
	n := envInt("RANKGATE_BENCH_PENDING_JOBS", 20)
	startScheduler(t)
	a100All1g20(t, "bench-a100-1g-a")
	a100All1g20(t, "bench-a100-1g-b")
	for _, tc := range []struct {
		name        string
		grace       *time.Duration // controller option (nil: the default)
		median, p99 time.Duration  // targets
	}{
		{"grace-default-10s", nil, 12 * time.Second, 13 * time.Second},
		{"grace-0", ptr.To(time.Duration(0)), time.Second, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t, "bench-pending-"+tc.name, true)
			c := startController(t, controller.Options{GangTimeout: time.Hour, PendingGrace: tc.grace})
			created := map[string]time.Time{}
			var jobs []*kubeflowv1.PyTorchJob
			for i := range n {
				job, _ := schedJob(t, ns, fmt.Sprintf("hopeless-%02d", i), nil, 1, "nvidia.com/mig-2g.20gb", 1)
				created[job.Name] = time.Now()
				jobs = append(jobs, job)
			}
			took := map[string]time.Duration{}
			deadline := time.Now().Add(time.Minute)
			for len(took) < n && time.Now().Before(deadline) {
				list := &kubeflowv1.PyTorchJobList{}
				require.NoError(t, k8s.List(context.Background(), list, client.InNamespace(ns)))
				now := time.Now()
				for _, j := range list.Items {
					if _, done := took[j.Name]; !done && j.Spec.RunPolicy.Suspend != nil && *j.Spec.RunPolicy.Suspend {
						took[j.Name] = now.Sub(created[j.Name])
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
			require.Len(t, took, n, "not every job was suspended within a minute:\n%s", c.logs.String())
			var d []time.Duration
			for _, j := range jobs {
				d = append(d, took[j.Name])
				require.Contains(t, jobAnnotations(t, j)[contract.AnnotationRules], "SHAPE_MISMATCH")
			}
			slices.Sort(d)
			median := (d[(n-1)/2] + d[n/2]) / 2
			p99 := d[min(n-1, (99*n+99)/100-1)] // nearest rank
			msg := fmt.Sprintf("%s: %d jobs: min %s, median %s, p99 %s, max %s", tc.name, n,
				d[0].Round(time.Millisecond), median.Round(time.Millisecond), p99.Round(time.Millisecond), d[n-1].Round(time.Millisecond))
			t.Log(msg)
			fmt.Fprintln(os.Stderr, msg)
			require.LessOrEqual(t, median, tc.median, msg)
			require.LessOrEqual(t, p99, tc.p99, msg)
		})
	}
}
