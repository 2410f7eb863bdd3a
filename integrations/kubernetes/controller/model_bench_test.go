package controller

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/clusterstate"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/watchdog"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

// benchPending is the load: 5,000 nodes, 500 Pending gated jobs
// past their grace (five job shapes, 4 workers each, one bound), all
// waiting, and 20,000 pods in all (the other 18,000 are bound pods of
// running jobs: neither way of judging reads them on a node event).
type benchPending struct {
	nodes []*corev1.Node
	jobs  []job
	pods  [][]*corev1.Pod
}

func newBenchPending() *benchPending {
	b := &benchPending{}
	for i := 0; i < 5000; i++ {
		b.nodes = append(b.nodes, fleetNode(i, i, 1))
	}
	shapes := []string{"nvidia.com/gpu", "nvidia.com/mig-1g.20gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-1g.10gb"}
	for i := 0; i < 500; i++ {
		j, pods := modelJob(fmt.Sprintf("job-%03d", i), shapes[i%len(shapes)], 4, []string{b.nodes[i*5].Name})
		b.jobs, b.pods = append(b.jobs, j), append(b.pods, pods)
	}
	return b
}

// benchWatchHost answers the watchdog from the benchmark's jobs: their
// pods, their kept judgements; the model's judge is the controller's.
type benchWatchHost struct {
	watchdogHost
	b    *testing.B
	pods map[string][]*corev1.Pod
	kept map[string]*watchdog.Judgement
}

func (h *benchWatchHost) JobPods(_ context.Context, o client.Object) ([]*corev1.Pod, error) {
	return h.pods[o.GetName()], nil
}

func (h *benchWatchHost) FullJob(_ context.Context, _ kubeflow.Kind, o client.Object) (client.Object, error) {
	return o, nil
}

func (h *benchWatchHost) JudgeLive(_ context.Context, j job, _ []*corev1.Pod, _ *watchdog.Judgement) (*watchdog.Judgement, error) {
	return h.kept[j.Name()], nil
}

func (h *benchWatchHost) WantWaitingFor(client.Object, string, *verdict.Finding) {}

func (h *benchWatchHost) Fail(j job, _ verdict.Report) { h.b.Fatalf("%s failed", j.Name()) }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkNodeEvent: one node event (a node cordoned or uncordoned) and
// the re-judgement of the 500 waiting jobs, in CPU time per event:
//
//	incremental: the model takes the node; the jobs are judged on the new
//	  snapshot by the node-event shortcut (affectedPending);
//	full-rebuild: every job judged by judgeJob over all cached nodes (the
//	  way before the model; the cache's list copy not counted).
//
//	go test ./integrations/kubernetes/controller -run '^$' -bench NodeEvent -benchtime 20x
func BenchmarkNodeEvent(b *testing.B) {
	bp := newBenchPending()
	e := schedule.New()
	b.Run("incremental", func(b *testing.B) {
		c := &Controller{engine: e, state: clusterstate.New(e, clock.RealClock{})}
		c.state.Nodes.SetSynced(func() bool { return true })
		for _, n := range bp.nodes {
			c.state.Nodes.Apply(n)
		}
		cl, _, _ := c.state.Nodes.Cluster()
		h := &benchWatchHost{watchdogHost: watchdogHost{c}, b: b, pods: map[string][]*corev1.Pod{}, kept: map[string]*watchdog.Judgement{}}
		for i, j := range bp.jobs {
			res, w, _, ok, err := judgeOn(e, cl, nil, j, bp.pods[i], false)
			if err != nil || !ok {
				b.Fatal(err)
			}
			h.pods[j.Name()], h.kept[j.Name()] = bp.pods[i], &watchdog.Judgement{Result: res, Workload: w, Sig: signature(w)}
		}
		// Every job watched past its grace, with its judgement kept.
		c.wd = watchdog.New(h, clock.RealClock{}, logr.Discard(), watchdog.Settings{Kinds: []string{"PyTorchJob"}})
		k, _ := kubeflow.ByName("PyTorchJob")
		for _, j := range bp.jobs {
			if _, failed := c.wd.Step(context.Background(), k, j.Object()); failed {
				b.Fatalf("%s is hopeless", j.Name())
			}
		}
		n := bp.nodes[17].DeepCopy()
		b.ResetTimer()
		start := cpuTime()
		for i := 0; i < b.N; i++ {
			n = n.DeepCopy()
			n.Spec.Unschedulable = !n.Spec.Unschedulable
			n.ResourceVersion = fmt.Sprint(i + 2)
			c.state.Nodes.Apply(n)
			if got := c.wd.AffectedByNode("PyTorchJob"); len(got) != 0 {
				b.Fatalf("%d jobs failed", len(got))
			}
		}
		b.ReportMetric(float64((cpuTime()-start).Microseconds())/1000/float64(b.N), "cpu-ms/event")
	})
	b.Run("full-rebuild", func(b *testing.B) {
		list := make([]corev1.Node, len(bp.nodes))
		for i, n := range bp.nodes {
			list[i] = *n
		}
		b.ResetTimer()
		start := cpuTime()
		for i := 0; i < b.N; i++ {
			list[17].Spec.Unschedulable = !list[17].Spec.Unschedulable
			for k, j := range bp.jobs {
				res, _, _, err := judgeJob(e, list, nil, j, bp.pods[k], false)
				if err != nil {
					b.Fatal(err)
				}
				if h, _ := watchdog.Cause(res, false); h {
					b.Fatal("hopeless")
				}
			}
		}
		b.ReportMetric(float64((cpuTime()-start).Microseconds())/1000/float64(b.N), "cpu-ms/event")
	})
}

// BenchmarkModelMemory: the live heap the model adds for 5,000 nodes and
// 500 kept workloads (the nodes' cached objects themselves are the
// informer's and not counted).
func BenchmarkModelMemory(b *testing.B) {
	bp := newBenchPending()
	e := schedule.New()
	for i := 0; i < b.N; i++ {
		heap := func() uint64 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return ms.HeapAlloc
		}
		before := heap()
		nm := clusterstate.NewNodes(e)
		nm.SetSynced(func() bool { return true })
		for _, n := range bp.nodes {
			nm.Apply(n)
		}
		cl, _, _ := nm.Cluster()
		kept := make([]*watchdog.Judgement, len(bp.jobs))
		for k, j := range bp.jobs {
			res, w, _, _, _ := judgeOn(e, cl, nil, j, bp.pods[k], false)
			kept[k] = &watchdog.Judgement{Result: res, Workload: w, Sig: signature(w)}
		}
		after := heap()
		runtime.KeepAlive(nm)
		runtime.KeepAlive(kept)
		b.ReportMetric(float64(after-before)/(1<<20), "MiB")
	}
}
