package schedule

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/rankgate/rankgate/verdict"
)

// Fleet generator for benchmarks: mixed GPU models and MIG layouts, about
// 30 pods per node already holding most devices (a busy cluster).
//
//	share  model       layout (8 GPUs per node)       resources
//	 30%   A100-80GB   MIG off                        nvidia.com/gpu 8
//	 20%   A100-80GB   all-1g.10gb                    mig-1g.10gb 56
//	 15%   H100-80GB   all-balanced                   mig-1g.10gb 16, mig-2g.20gb 8, mig-3g.40gb 8
//	 20%   H100-80GB   MIG off                        nvidia.com/gpu 8
//	 10%   H200        all-1g.35gb                    mig-1g.35gb 32
//	  5%   none        (CPU nodes)
type fleetKind struct {
	share   int
	product string
	model   string
	config  string
	alloc   map[string]int64
}

var fleetKinds = []fleetKind{
	{30, "NVIDIA-A100-SXM4-80GB", "A100-80GB", "all-disabled", map[string]int64{ResourceGPU: 8}},
	{20, "NVIDIA-A100-SXM4-80GB", "A100-80GB", "all-1g.10gb", map[string]int64{MIGPrefix + "1g.10gb": 56}},
	{15, "NVIDIA-H100-80GB-HBM3", "H100-80GB", "all-balanced", map[string]int64{MIGPrefix + "1g.10gb": 16, MIGPrefix + "2g.20gb": 8, MIGPrefix + "3g.40gb": 8}},
	{20, "NVIDIA-H100-80GB-HBM3", "H100-80GB", "all-disabled", map[string]int64{ResourceGPU: 8}},
	{10, "NVIDIA-H200", "H200-141GB", "all-1g.35gb", map[string]int64{MIGPrefix + "1g.35gb": 32}},
	{5, "", "", "", nil},
}

// benchFleet builds n nodes with podsPerNode bound pods each (summed into
// Used, as the Builder does).
func benchFleet(n, podsPerNode int) []Node {
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	out := make([]Node, n)
	for i := range out {
		pick := rng.IntN(100)
		var k fleetKind
		for _, fk := range fleetKinds {
			if pick < fk.share {
				k = fk
				break
			}
			pick -= fk.share
		}
		name := fmt.Sprintf("node-%06d", i)
		labels := map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"topology.kubernetes.io/zone": "zone-" + strconv.Itoa(i%4), "node.kubernetes.io/instance-type": "gpu-8x",
			"feature.node.kubernetes.io/cpu-cpuid.AVX2": "true", "feature.node.kubernetes.io/kernel-version.full": "5.15.0-102-generic",
			"feature.node.kubernetes.io/pci-10de.present": "true", "pool": "train",
		}
		alloc := Resources{ResourceCPU: 192000, ResourceMem: 2 << 40, ResourcePods: 110, "ephemeral-storage": 2 << 40}
		used := Resources{}
		if k.product != "" {
			labels[LabelProduct] = k.product
			labels[LabelCount] = "8"
			labels[LabelMIGCapable] = "true"
			labels[LabelMIGStrategy] = StrategyMixed
			labels[LabelMIGConfig] = k.config
			labels[LabelMIGConfigState] = MIGStateSuccess
			labels[LabelDriverFull] = "570.172.08"
			for r, v := range k.alloc {
				alloc[r] = v
				if p, ok := MIGProfileOf(r); ok {
					labels[MIGPrefix+p+".count"] = strconv.FormatInt(v, 10)
				}
				// Busy: 70% to 100% of the devices held.
				used[r] = v * int64(70+rng.IntN(31)) / 100
			}
		}
		used[ResourcePods] = int64(podsPerNode)
		used[ResourceCPU] = int64(podsPerNode) * 2000
		used[ResourceMem] = int64(podsPerNode) * (8 << 30)
		out[i] = Node{Name: name, Labels: labels, Allocatable: alloc, Capacity: alloc, Used: used}
	}
	return out
}

// benchJobs are 1,000-rank jobs in three shapes, each taking a different
// verdict path.
func benchJobs() map[string]Workload {
	req := func(r string, n int64) Resources {
		return Resources{r: n, ResourceCPU: 8000, ResourceMem: 64 << 30, ResourcePods: 1}
	}
	return map[string]Workload{
		// 1,000 pods x 1 MIG instance: the most pods to place.
		"mig-1000x1": {Kind: "PyTorchJob", Namespace: "ml", Name: "mig", PodSets: []PodSet{
			{Name: "Master", Count: 1, Requests: req(MIGPrefix+"1g.10gb", 1)},
			{Name: "Worker", Count: 999, Requests: req(MIGPrefix+"1g.10gb", 1)},
		}},
		// 125 pods x 8 full GPUs on a busy fleet: waits, listing busy nodes.
		"gpu-125x8": {Kind: "MPIJob", Namespace: "hpc", Name: "gpu", PodSets: []PodSet{
			{Name: "Launcher", Count: 1, Requests: Resources{ResourceCPU: 1000, ResourcePods: 1}},
			{Name: "Worker", Count: 125, Requests: req(ResourceGPU, 8)},
		}},
		// A profile no node has: the shape analysis scans every node.
		"shape-2g.35gb": {Kind: "PyTorchJob", Namespace: "ml", Name: "shape", PodSets: []PodSet{
			{Name: "Worker", Count: 1000, Requests: req(MIGPrefix+"2g.35gb", 1)},
		}},
	}
}

// BenchmarkDiagnose judges one 1,000-rank job against a prepared cluster.
//
//	go test ./preflight/schedule -run '^$' -bench Diagnose -benchmem
func BenchmarkDiagnose(b *testing.B) {
	e := New()
	for _, n := range []int{500, 5000, 50000} {
		c := e.NewCluster(benchFleet(n, 30))
		for _, name := range []string{"mig-1000x1", "gpu-125x8", "shape-2g.35gb"} {
			w := benchJobs()[name]
			b.Run(fmt.Sprintf("nodes=%d/%s", n, name), func(b *testing.B) {
				b.ReportAllocs()
				var res Result
				for b.Loop() {
					res = e.Diagnose(c, w)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/node")
				_ = res
			})
		}
	}
}

// BenchmarkNewCluster prepares a snapshot (once per snapshot, shared by all
// the workloads judged against it).
func BenchmarkNewCluster(b *testing.B) {
	e := New()
	for _, n := range []int{500, 5000, 50000} {
		nodes := benchFleet(n, 30)
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e.NewCluster(nodes)
			}
		})
	}
}

func TestBenchJobsVerdicts(t *testing.T) {
	e := New()
	c := e.NewCluster(benchFleet(5000, 30))
	want := map[string]string{"mig-1000x1": verdict.RuleSchedulable, "gpu-125x8": verdict.RuleWaitCapacity, "shape-2g.35gb": verdict.RuleShapeMismatch}
	for name, w := range benchJobs() {
		start := time.Now()
		res := e.Diagnose(c, w)
		t.Logf("%s: %s in %v", name, res.Rule, time.Since(start))
		if res.Rule != want[name] {
			t.Errorf("%s: got %s, want %s\n%s", name, res.Rule, want[name], reportText(res.Report))
		}
	}
}

// BenchmarkDiagnoseRanks: how cost grows with the job's size at 5,000
// nodes (pods of one MIG instance each).
func BenchmarkDiagnoseRanks(b *testing.B) {
	e := New()
	c := e.NewCluster(benchFleet(5000, 30))
	for _, ranks := range []int{100, 1000, 10000} {
		w := Workload{Kind: "PyTorchJob", Namespace: "ml", Name: "scale", PodSets: []PodSet{
			{Name: "Master", Count: 1, Requests: Resources{MIGPrefix + "1g.10gb": 1, ResourceCPU: 8000, ResourcePods: 1}},
			{Name: "Worker", Count: ranks - 1, Requests: Resources{MIGPrefix + "1g.10gb": 1, ResourceCPU: 8000, ResourcePods: 1}},
		}}
		b.Run(fmt.Sprintf("ranks=%d", ranks), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e.Diagnose(c, w)
			}
		})
	}
}
