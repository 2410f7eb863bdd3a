package cluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

const h100Msg = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."

// h100Nodes are n nodes with 8 full H100s each, MIG off.
func h100Nodes(n int) []*clustertest.NodeWrapper {
	var out []*clustertest.NodeWrapper
	for i := 0; i < n; i++ {
		out = append(out, clustertest.MakeNode("h100-"+strconv.Itoa(i)).Labels(map[string]string{
			"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8", "nvidia.com/mig.strategy": "none",
		}).Allocatable("nvidia.com/gpu", "8"))
	}
	return out
}

// podNames are the namespace/name of pods.
func podNames(ps []*clustertest.PodWrapper) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

// build adds nodes, then pods, then jobs (a dump lists pods before the
// jobs that own them as often as after).
func build(t *testing.T, nodes []*clustertest.NodeWrapper, pods []*clustertest.PodWrapper, jobs ...kubeflow.Job) *Builder {
	t.Helper()
	b := NewBuilder()
	for _, n := range nodes {
		require.NoError(t, b.AddNode(n.Obj()))
	}
	for _, p := range pods {
		require.NoError(t, b.AddPod(p.Obj()))
	}
	for _, j := range jobs {
		require.NoError(t, b.AddJob(j))
	}
	return b
}

// TestMPIOperatorPods: an MPIJob's pods exactly as mpi-operator v0.8.0
// creates them (job-role labels, no replica-type; worker indexes shifted
// by one with runLauncherAsWorker; the launcher owned by a batch Job) are
// counted and bound to their replica types.
func TestMPIOperatorPods(t *testing.T) {
	for _, asWorker := range []bool{false, true} {
		t.Run("runLauncherAsWorker="+strconv.FormatBool(asWorker), func(t *testing.T) {
			mw := kubeflowtest.MakeMPIJob("allreduce", "hpc").Workers(4).SlotsPerWorker(8).
				WorkerRequest("nvidia.com/gpu", "8").LauncherRequest("cpu", "1")
			if asWorker {
				mw.RunLauncherAsWorker().LauncherRequest("nvidia.com/gpu", "8")
			}
			j := asJob(t, mw.Obj())
			pods := clustertest.OperatorPods(j)
			require.Len(t, pods, 5)
			launcher, workers := pods[0], pods[1:]

			// The pods are mpi-operator's: the launcher is owned by the
			// batch Job, no pod has replica-type, and the index labels
			// are the ranks kubeflow.RankOf reads.
			require.Equal(t, "allreduce-launcher-x7k2p", launcher.Name)
			require.Equal(t, "batch/v1", launcher.OwnerReferences[0].APIVersion)
			require.Equal(t, "Job", launcher.OwnerReferences[0].Kind)
			require.Equal(t, "allreduce-launcher", launcher.OwnerReferences[0].Name)
			require.Equal(t, "launcher", launcher.Labels[kubeflow.LabelJobRole])
			for i, p := range pods {
				require.NotContains(t, p.Labels, kubeflow.LabelReplicaType, p.Name)
				require.Equal(t, "allreduce", p.Labels[kubeflow.LabelJobName])
				require.True(t, j.OwnsPod(p.Obj()), p.Name)
				r, err := kubeflow.RankOf(j, p.Obj())
				switch {
				case i == 0 && !asWorker:
					require.NotContains(t, p.Labels, kubeflow.LabelReplicaIdx)
					require.ErrorIs(t, err, kubeflow.ErrNoRank)
				case asWorker:
					require.NoError(t, err)
					require.Equal(t, i, r, p.Name)
					require.Equal(t, strconv.Itoa(i), p.Labels[kubeflow.LabelReplicaIdx])
				default:
					require.NoError(t, err)
					require.Equal(t, i-1, r, p.Name)
				}
			}
			require.Equal(t, "allreduce-worker-1", workers[1].Name)

			// One node per GPU pod. Worker 0 runs on h100-0 and, without
			// runLauncherAsWorker, the launcher too; the other pods are
			// pending. Counting the bound worker, the rest fits exactly.
			gpuPods := 4
			if asWorker {
				gpuPods = 5
			}
			nodes := h100Nodes(gpuPods)
			workers[0].Node("h100-0")
			pending := workers[1:]
			if asWorker {
				pending = append([]*clustertest.PodWrapper{launcher}, pending...)
			} else {
				launcher.Node("h100-0")
			}
			for _, p := range pending {
				p.Unschedulable(h100Msg)
			}

			b := build(t, nodes, pods, j)
			w, err := b.WorkloadFor(j)
			require.NoError(t, err)
			require.Len(t, w.PodSets, 2)
			l, wk := w.PodSets[0], w.PodSets[1]
			require.Equal(t, "Launcher", l.Name)
			require.Equal(t, 1, l.Count)
			require.Equal(t, "Worker", wk.Name)
			require.Equal(t, 4, wk.Count)
			require.Equal(t, 1, wk.Bound, "worker 0 is bound")
			require.Equal(t, podNames(workers[1:]), wk.Pods)
			require.Equal(t, h100Msg, wk.SchedulerMessage)
			require.Equal(t, int64(8), wk.Requests["nvidia.com/gpu"])
			if asWorker {
				require.Equal(t, 0, l.Bound)
				require.Equal(t, []string{"hpc/allreduce-launcher-x7k2p"}, l.Pods)
				require.Equal(t, int64(8), l.Requests["nvidia.com/gpu"])
			} else {
				require.Equal(t, 1, l.Bound, "the launcher, owned by a batch Job, is bound")
				require.Empty(t, l.Pods)
			}
			e := schedule.New()
			c := e.NewCluster(b.Nodes())
			res := e.Diagnose(c, w)
			require.Equal(t, verdict.RuleSchedulable, res.Rule, res.Report.Reason(0))

			// Offline, the same pods with the job object missing: one
			// workload, the launcher (known by its labels) with the
			// workers (known by their owner).
			b = build(t, nodes, pods)
			ws, err := b.Workloads()
			require.NoError(t, err)
			require.Len(t, ws, 1)
			require.Equal(t, "MPIJob", ws[0].Kind)
			require.Equal(t, "allreduce (job object not in the input: judged from its pods)", ws[0].Name)
			sets := map[string]schedule.PodSet{}
			for _, ps := range ws[0].PodSets {
				sets[ps.Name] = ps
			}
			require.Equal(t, 4, sets["Worker"].Count)
			require.Equal(t, 1, sets["Worker"].Bound)
			require.Equal(t, podNames(workers[1:]), sets["Worker"].Pods)
			if asWorker {
				require.Len(t, ws[0].PodSets, 2)
				require.Equal(t, []string{"hpc/allreduce-launcher-x7k2p"}, sets["Launcher"].Pods)
			} else {
				require.Len(t, ws[0].PodSets, 1, "the bound launcher has no pending pod to judge")
			}
		})
	}
}

// TestTrainingOperatorPods: a PyTorchJob's pods exactly as the
// training-operator v1.9.4 creates them (replica-type in lower case,
// replica-index, job-role=master on the Master, or on Worker 0 when the
// spec has no Master).
func TestTrainingOperatorPods(t *testing.T) {
	for _, master := range []bool{true, false} {
		t.Run("master="+strconv.FormatBool(master), func(t *testing.T) {
			jw := kubeflowtest.MakePyTorchJob("llm", "ml").Workers(3).Request("nvidia.com/gpu", "8")
			if master {
				jw.Master()
			} else {
				jw.Workers(4)
			}
			j := asJob(t, jw.Obj())
			pods := clustertest.OperatorPods(j)
			require.Len(t, pods, 4)
			for i, p := range pods {
				r, err := kubeflow.RankOf(j, p.Obj())
				require.NoError(t, err)
				require.Equal(t, i, r, p.Name)
				require.Equal(t, i == 0, p.Labels[kubeflow.LabelJobRole] == "master", p.Name)
			}
			if master {
				require.Equal(t, "llm-master-0", pods[0].Name)
				require.Equal(t, "master", pods[0].Labels[kubeflow.LabelReplicaType])
			} else {
				require.Equal(t, "llm-worker-0", pods[0].Name)
				require.Equal(t, "worker", pods[0].Labels[kubeflow.LabelReplicaType])
			}

			// Rank 0 runs on h100-0; the other three are pending.
			pods[0].Node("h100-0")
			for _, p := range pods[1:] {
				p.Unschedulable(h100Msg)
			}
			nodes := h100Nodes(4)
			b := build(t, nodes, pods, j)
			w, err := b.WorkloadFor(j)
			require.NoError(t, err)
			if master {
				require.Len(t, w.PodSets, 2)
				require.Equal(t, schedule.PodSet{Name: "Master", Count: 1, Bound: 1, Requests: w.PodSets[0].Requests, Constraints: w.PodSets[0].Constraints}, w.PodSets[0])
				require.Equal(t, "Worker", w.PodSets[1].Name)
				require.Equal(t, 3, w.PodSets[1].Count)
				require.Equal(t, 0, w.PodSets[1].Bound)
				require.Equal(t, podNames(pods[1:]), w.PodSets[1].Pods)
			} else {
				// Worker 0's job-role=master does not make it a Master.
				require.Len(t, w.PodSets, 1)
				require.Equal(t, "Worker", w.PodSets[0].Name)
				require.Equal(t, 4, w.PodSets[0].Count)
				require.Equal(t, 1, w.PodSets[0].Bound)
				require.Equal(t, podNames(pods[1:]), w.PodSets[0].Pods)
			}
			e := schedule.New()
			res := e.Diagnose(e.NewCluster(b.Nodes()), w)
			require.Equal(t, verdict.RuleSchedulable, res.Rule, res.Report.Reason(0))

			// Without the job object.
			ws, err := build(t, nodes, pods).Workloads()
			require.NoError(t, err)
			require.Len(t, ws, 1)
			require.Equal(t, "PyTorchJob", ws[0].Kind)
			require.Len(t, ws[0].PodSets, 1, "only Workers are pending")
			require.Equal(t, "Worker", ws[0].PodSets[0].Name)
			require.Equal(t, podNames(pods[1:]), ws[0].PodSets[0].Pods)
			if master {
				require.Equal(t, 3, ws[0].PodSets[0].Count)
			} else {
				require.Equal(t, 4, ws[0].PodSets[0].Count)
				require.Equal(t, 1, ws[0].PodSets[0].Bound)
			}
		})
	}
}

// TestLegacyReplicaTypeLabels: MPIJob pods labelled replica-type and no
// job-role, as older dumps and hand-written files label them, still count
// (kubeflow.ReplicaTypeOf falls back to replica-type).
func TestLegacyReplicaTypeLabels(t *testing.T) {
	b := NewBuilder()
	require.NoError(t, LoadFile(context.Background(), b, filepath.Join(legacyDir, "mpijob-replica-type-labels.yaml"), nil, nil))
	require.Len(t, b.Jobs(), 1)
	w, err := b.WorkloadFor(b.Jobs()[0])
	require.NoError(t, err)
	require.Len(t, w.PodSets, 2)
	require.Equal(t, []string{"hpc/allreduce-launcher-0"}, w.PodSets[0].Pods)
	require.Equal(t, []string{"hpc/allreduce-worker-0", "hpc/allreduce-worker-1"}, w.PodSets[1].Pods)

	// Bound pods, and a launcher known only by its job-name label.
	j := asJob(t, kubeflowtest.MakeMPIJob("ring", "hpc").Workers(3).WorkerRequest("nvidia.com/gpu", "8").Obj())
	var pods []*clustertest.PodWrapper
	for i := 0; i < 3; i++ {
		p := clustertest.MakePod(fmt.Sprintf("ring-worker-%d", i), "hpc").OwnedBy("kubeflow.org/v2beta1", "MPIJob", "ring", "Worker").Request("nvidia.com/gpu", "8")
		if i < 2 {
			p.Node("h100-" + strconv.Itoa(i))
		} else {
			p.Unschedulable(h100Msg)
		}
		pods = append(pods, p)
	}
	launcher := clustertest.MakePod("ring-launcher-abcde", "hpc").Request("cpu", "1")
	launcher.Labels[kubeflow.LabelJobName] = "ring"
	launcher.Labels[kubeflow.LabelReplicaType] = "launcher"
	pods = append(pods, launcher)
	nodes := h100Nodes(3)
	w, err = build(t, nodes, pods, j).WorkloadFor(j)
	require.NoError(t, err)
	require.Equal(t, []string{"hpc/ring-launcher-abcde"}, w.PodSets[0].Pods)
	require.Equal(t, 2, w.PodSets[1].Bound)
	require.Equal(t, []string{"hpc/ring-worker-2"}, w.PodSets[1].Pods)

	ws, err := build(t, nodes, pods).Workloads()
	require.NoError(t, err)
	require.Len(t, ws, 1, "the launcher joins its workers")
	require.Equal(t, "MPIJob", ws[0].Kind)
	require.Len(t, ws[0].PodSets, 2)
	require.Equal(t, schedule.PodSet{Name: "Worker", Count: 3, Bound: 2, Pods: []string{"hpc/ring-worker-2"}, SchedulerMessage: h100Msg,
		Requests: ws[0].PodSets[0].Requests, Constraints: ws[0].PodSets[0].Constraints}, ws[0].PodSets[0])
	require.Equal(t, "Launcher", ws[0].PodSets[1].Name)
}

// TestPodsOfUnknownOperator: pods with only a job-name label and labels no
// known operator sets are judged from their pods under the label values.
func TestPodsOfUnknownOperator(t *testing.T) {
	p := clustertest.MakePod("x-ps-0", "ml").Request("nvidia.com/gpu", "1")
	p.Labels[kubeflow.LabelJobName] = "x"
	p.Labels[kubeflow.LabelReplicaType] = "ps"
	q := clustertest.MakePod("x-0", "ml").Request("nvidia.com/gpu", "1")
	q.Labels[kubeflow.LabelJobName] = "x"
	ws, err := build(t, nil, []*clustertest.PodWrapper{p, q}).Workloads()
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.Equal(t, "Job", ws[0].Kind)
	require.Equal(t, "ps", ws[0].PodSets[0].Name)
	require.Equal(t, "pods", ws[0].PodSets[1].Name)
}

// TestLiveMPIJobLauncherPod: `diagnose pod` on the launcher finds its
// MPIJob through the labels, as the launcher's owner is a batch Job.
func TestLiveMPIJobLauncherPod(t *testing.T) {
	job := kubeflowtest.MakeMPIJob("allreduce", "hpc").RunLauncherAsWorker().Workers(2).
		WorkerRequest("nvidia.com/gpu", "8").LauncherRequest("nvidia.com/gpu", "8").Obj()
	j := asJob(t, job)
	objs := []runtime.Object{job, kubeflowtest.MakePyTorchJob("allreduce", "hpc").Obj()}
	for _, n := range h100Nodes(3) {
		objs = append(objs, n.Obj())
	}
	pods := clustertest.OperatorPods(j)
	pods[1].Node("h100-0")
	for _, p := range pods {
		objs = append(objs, p.Obj())
	}
	// A PyTorchJob of the same name: the launcher's operator-name label
	// says which kind its job is.
	live := newFakeLive(t, objs...)
	ctx := context.Background()
	p, err := live.Pod(ctx, "hpc", pods[0].Name)
	require.NoError(t, err)
	got, ok, err := live.JobOfPod(ctx, p)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, kubeflow.MPIJobGVK, got.GVK())
	require.Equal(t, "allreduce", got.Name())

	b := NewBuilder()
	require.NoError(t, live.LoadCluster(ctx, b))
	require.NoError(t, b.AddJob(got))
	w, err := b.WorkloadFor(got)
	require.NoError(t, err)
	require.Equal(t, []string{"hpc/allreduce-launcher-x7k2p"}, w.PodSets[0].Pods)
	require.Equal(t, 1, w.PodSets[1].Bound)
	require.Equal(t, []string{"hpc/allreduce-worker-1"}, w.PodSets[1].Pods)

	_, err = live.Pod(ctx, "hpc", "allreduce-launcher")
	var nf *NotFoundError
	require.True(t, errors.As(err, &nf))
}
