package cluster

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

// newFakeLive returns a Live over client-go fakes holding objs: core
// objects in the fake clientset, Kubeflow jobs in the dynamic fake.
// (Unit tests only; the envtest harness runs a real API server.)
func newFakeLive(t *testing.T, objs ...runtime.Object) *Live {
	t.Helper()
	cs, dyn := clustertest.FakeClients(t, objs...)
	return &Live{Core: cs, Dynamic: dyn, PageSize: 2}
}

func TestLiveJob(t *testing.T) {
	job := kubeflowtest.MakePyTorchJob("llm", "ml").Master().Workers(3).Request("nvidia.com/mig-1g.10gb", "1").Obj()
	j, _ := kubeflow.FromObject(job)
	objs := []runtime.Object{job, kubeflowtest.MakeMPIJob("allreduce", "hpc").Obj()}
	for i, name := range []string{"a100-1", "a100-2", "a100-3"} {
		n := clustertest.MakeNode(name).
			Labels(migLabels(gfd("NVIDIA-A100-SXM4-80GB", "1", "81920", "mixed", "all-1g.10gb", "success", "550.54.15"), "1g.10gb", "7", "9856", "14")).
			Allocatable("nvidia.com/mig-1g.10gb", "7")
		objs = append(objs, n.Obj())
		// Other work fills a100-1 and a100-2.
		for k := 0; k < 7 && i < 2; k++ {
			objs = append(objs, clustertest.MakePod(name+"-busy-"+string(rune('a'+k)), "other").Request("nvidia.com/mig-1g.10gb", "1").Node(name).Obj())
		}
	}
	objs = append(objs, clustertest.MakePod("done", "other").Request("nvidia.com/mig-1g.10gb", "7").Node("a100-3").Phase("Succeeded").Obj())
	objs = append(objs, jobPods(j, "0/3 nodes are available: 2 Insufficient nvidia.com/mig-1g.10gb.")...)
	live := newFakeLive(t, objs...)
	ctx := context.Background()

	b := NewBuilder()
	require.NoError(t, live.LoadCluster(ctx, b))
	got, err := live.Job(ctx, "ml", "llm", "")
	require.NoError(t, err)
	require.NoError(t, b.AddJob(got))
	w, err := b.WorkloadFor(got)
	require.NoError(t, err)
	require.Len(t, w.PodSets, 2)
	require.Equal(t, "0/3 nodes are available: 2 Insufficient nvidia.com/mig-1g.10gb.", w.PodSets[1].SchedulerMessage)
	require.Equal(t, []string{"ml/llm-worker-0", "ml/llm-worker-1", "ml/llm-worker-2"}, w.PodSets[1].Pods)

	e := schedule.New()
	res := e.Diagnose(e.NewCluster(b.Nodes()), w)
	require.Equal(t, verdict.RuleSchedulable, res.Rule, res.Report.Reason(0))
	require.Equal(t, []schedule.Assignment{{PodSet: "Master (1 pod) + Worker (3 pods)", Node: "a100-3", Pods: 4}}, res.Placement)

	_, err = live.Job(ctx, "ml", "missing", "")
	var nf *NotFoundError
	require.True(t, errors.As(err, &nf), "%v", err)
	mj, err := live.Job(ctx, "hpc", "allreduce", "mpijob")
	require.NoError(t, err)
	require.Equal(t, "MPIJob", mj.Kind())
	_, err = live.Job(ctx, "hpc", "allreduce", "tfjob")
	require.ErrorContains(t, err, "want PyTorchJob, MPIJob, TrainJob or JobSet")

	p, err := live.Pod(ctx, "ml", "llm-worker-1")
	require.NoError(t, err)
	pj, ok, err := live.JobOfPod(ctx, p)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "llm", pj.Name())
	_, err = live.Pod(ctx, "ml", "nope")
	require.True(t, errors.As(err, &nf))
}
