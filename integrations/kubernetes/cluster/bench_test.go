package cluster

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

// End-to-end cost of one diagnosis from Kubernetes objects: add every node
// and every pod to a Builder (as the live loader does page by page), build
// the engine's cluster, and judge one 1,000-rank job.
//
//	go test ./integrations/kubernetes/cluster -run '^$' -bench EndToEnd -benchmem -benchtime 5x

// benchNodes: mixed GPU models and MIG layouts (see preflight/schedule's
// benchFleet for the shares), with GFD-style labels.
func benchNodes(n int) []*corev1.Node {
	type kind struct {
		share                   int
		product, config, memory string
		alloc                   map[string]string
	}
	kinds := []kind{
		{30, "NVIDIA-A100-SXM4-80GB", "all-disabled", "81920", map[string]string{"nvidia.com/gpu": "8"}},
		{20, "NVIDIA-A100-SXM4-80GB", "all-1g.10gb", "81920", map[string]string{"nvidia.com/mig-1g.10gb": "56"}},
		{15, "NVIDIA-H100-80GB-HBM3", "all-balanced", "81559", map[string]string{"nvidia.com/mig-1g.10gb": "16", "nvidia.com/mig-2g.20gb": "8", "nvidia.com/mig-3g.40gb": "8"}},
		{20, "NVIDIA-H100-80GB-HBM3", "all-disabled", "81559", map[string]string{"nvidia.com/gpu": "8"}},
		{10, "NVIDIA-H200", "all-1g.35gb", "143771", map[string]string{"nvidia.com/mig-1g.35gb": "32"}},
		{5, "", "", "", nil},
	}
	rng := rand.New(rand.NewPCG(2, uint64(n)))
	out := make([]*corev1.Node, n)
	for i := range out {
		pick := rng.IntN(100)
		var k kind
		for _, c := range kinds {
			if pick < c.share {
				k = c
				break
			}
			pick -= c.share
		}
		name := fmt.Sprintf("node-%06d", i)
		w := clustertest.MakeNode(name).Allocatable("cpu", "192").Allocatable("memory", "2Ti").
			Labels(map[string]string{
				"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": "zone-" + strconv.Itoa(i%4),
				"node.kubernetes.io/instance-type": "gpu-8x", "feature.node.kubernetes.io/cpu-cpuid.AVX2": "true",
				"feature.node.kubernetes.io/pci-10de.present": "true", "feature.node.kubernetes.io/kernel-version.full": "5.15.0-102-generic",
			})
		if k.product != "" {
			w.Labels(gfd(k.product, "8", k.memory, "mixed", k.config, "success", "570.172.08"))
			for r, v := range k.alloc {
				w.Allocatable(r, v)
			}
		}
		out[i] = w.Obj()
	}
	return out
}

// podPool is a few pod shapes; benchmarks reuse them with a new name and
// node for every pod added (the Builder keeps no pod).
func podPool() []*corev1.Pod {
	var out []*corev1.Pod
	for _, r := range []string{"nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-1g.35gb", ""} {
		p := clustertest.MakePod("p", "team").Request("cpu", "2").Request("memory", "8Gi")
		if r != "" {
			p.Request(r, "1")
		}
		p.EditSpec(func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}
			s.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}
		})
		out = append(out, p.Obj())
		// A third of the pods belong to other Kubeflow jobs.
		j := p.Obj().DeepCopy()
		j.Labels = map[string]string{kubeflow.LabelJobName: "other", kubeflow.LabelReplicaType: "worker"}
		out = append(out, j)
		out = append(out, p.Obj().DeepCopy())
	}
	return out
}

type e2eInput struct {
	nodes    []*corev1.Node
	pool     []*corev1.Pod
	podNames []string
	job      kubeflow.Job
	jobPods  []*corev1.Pod
	perNode  int
}

func newE2EInput(nodes, podsPerNode int) *e2eInput {
	in := &e2eInput{nodes: benchNodes(nodes), pool: podPool(), perNode: podsPerNode}
	in.podNames = make([]string, nodes*podsPerNode)
	for i := range in.podNames {
		in.podNames[i] = "pod-" + strconv.Itoa(i)
	}
	obj := kubeflowtest.MakePyTorchJob("llm", "ml").Master().Workers(999).
		Request("nvidia.com/mig-1g.10gb", "1").Request("cpu", "8").Request("memory", "64Gi").Obj()
	in.job, _ = kubeflow.FromObject(obj)
	for _, rs := range in.job.ReplicaSpecs() {
		for i := 0; i < int(rs.Replicas); i++ {
			p := clustertest.MakePod(fmt.Sprintf("llm-%s-%d", rs.Type, i), "ml").OwnedBy("kubeflow.org/v1", "PyTorchJob", "llm", rs.Type)
			p.Spec = *rs.Template.Spec.DeepCopy()
			in.jobPods = append(in.jobPods, p.Unschedulable("0/5000 nodes are available: Insufficient nvidia.com/mig-1g.10gb.").Obj())
		}
	}
	return in
}

// run is one diagnosis from objects to verdict.
func (in *e2eInput) run(e *schedule.Engine) (schedule.Result, error) {
	b := NewBuilder()
	for _, n := range in.nodes {
		if err := b.AddNode(n); err != nil {
			return schedule.Result{}, err
		}
	}
	for i, name := range in.podNames {
		p := in.pool[i%len(in.pool)]
		p.Name = name
		p.Spec.NodeName = in.nodes[i/in.perNode].Name
		if err := b.AddPod(p); err != nil {
			return schedule.Result{}, err
		}
	}
	for _, p := range in.jobPods {
		if err := b.AddPod(p); err != nil {
			return schedule.Result{}, err
		}
	}
	if err := b.AddJob(in.job); err != nil {
		return schedule.Result{}, err
	}
	c := e.NewCluster(b.Nodes())
	w, err := b.WorkloadFor(in.job)
	if err != nil {
		return schedule.Result{}, err
	}
	return e.Diagnose(c, w), nil
}

func BenchmarkEndToEnd(b *testing.B) {
	e := schedule.New()
	for _, n := range []int{500, 5000, 50000} {
		in := newE2EInput(n, 30)
		b.Run(fmt.Sprintf("nodes=%d/pods=%d/ranks=1000", n, n*30), func(b *testing.B) {
			b.ReportAllocs()
			var peak uint64
			var res schedule.Result
			cpu0 := cpuTime()
			for b.Loop() {
				var err error
				peak = max(peak, peakHeap(func() { res, err = in.run(e) }))
				if err != nil {
					b.Fatal(err)
				}
			}
			// On a shared machine wall time varies with the neighbours;
			// process CPU time (all threads, GC included) less so.
			b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
			if res.Rule == "" {
				b.Fatal("no verdict")
			}
		})
	}
}

func TestEndToEndVerdict(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 5,000-node cluster")
	}
	// RANKGATE_E2E_NODES sizes the cluster, e.g. for a peak-RSS run:
	//   go test -c -o /tmp/c.test ./integrations/kubernetes/cluster
	//   RANKGATE_E2E_NODES=50000 /usr/bin/time -v /tmp/c.test -test.run TestEndToEndVerdict -test.v
	nodes := 5000
	if v, err := strconv.Atoi(os.Getenv("RANKGATE_E2E_NODES")); err == nil && v > 0 {
		nodes = v
	}
	in := newE2EInput(nodes, 30)
	start := time.Now()
	var res schedule.Result
	var err error
	peak := peakHeap(func() { res, err = in.run(schedule.New()) })
	require := func(ok bool, f string, a ...any) {
		if !ok {
			t.Fatalf(f, a...)
		}
	}
	require(err == nil, "%v", err)
	t.Logf("%d nodes, %d pods: %s in %v, peak heap %.0f MB", nodes, nodes*30+1000, res.Rule, time.Since(start), float64(peak)/(1<<20))
	require(res.Rule == verdict.RuleSchedulable, "got %s: %s", res.Rule, res.Report.Reason(0))
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakHeap samples the live heap while f runs and returns its peak above
// the live heap before f.
func peakHeap(f func()) uint64 {
	runtime.GC()
	const name = "/memory/classes/heap/objects:bytes"
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	base := s[0].Value.Uint64()
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []metrics.Sample{{Name: name}}
		tick := time.NewTicker(200 * time.Microsecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(done)
	wg.Wait()
	if peak < base {
		return 0
	}
	return peak - base
}
