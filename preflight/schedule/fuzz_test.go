package schedule

import (
	"strings"
	"testing"
)

// FuzzDiagnose builds a node from fuzzed GFD/mig-manager labels and
// resources and a pod from a fuzzed request, and checks that the engine
// always reaches a verdict.
//
//	go test ./preflight/schedule -run '^$' -fuzz FuzzDiagnose -fuzztime 60s
func FuzzDiagnose(f *testing.F) {
	f.Add("nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB\nnvidia.com/mig.strategy=mixed\nnvidia.com/mig.config=all-balanced\nnvidia.com/gpu.count=8",
		"nvidia.com/mig-1g.10gb=16\nnvidia.com/mig-2g.20gb=8", "nvidia.com/mig-2g.20gb", uint8(3))
	f.Add("nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3-MIG-1g.10gb\nnvidia.com/mig.strategy=single\nnvidia.com/mig.config.state=pending\nnvidia.com/mig.config=all-1g.10gb",
		"nvidia.com/gpu=7", "nvidia.com/mig-1g.10gb", uint8(1))
	f.Add("nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB-MIG-INVALID\nnvidia.com/mig.strategy=single\nnvidia.com/cuda.driver-version.full=570.133.20",
		"nvidia.com/gpu=0\nnvidia.com/mig-1g.5gb=0", "nvidia.com/gpu", uint8(2))
	// mig.strategy=single: a MIG-disabled node asked for a profile
	// (fixture 23), and a node being changed to one profile asked for
	// nvidia.com/gpu.
	f.Add("nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3\nnvidia.com/mig.strategy=single\nnvidia.com/mig.config=all-disabled\nnvidia.com/mig.config.state=success\nnvidia.com/gpu.count=1\nnvidia.com/gpu.replicas=1",
		"nvidia.com/gpu=1", "nvidia.com/mig-1g.10gb", uint8(1))
	f.Add("nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3\nnvidia.com/mig.strategy=single\nnvidia.com/mig.config=all-1g.10gb\nnvidia.com/mig.config.state=pending\nnvidia.com/gpu.deploy.device-plugin=paused-for-mig-change\nnvidia.com/gpu.count=1",
		"nvidia.com/gpu=", "nvidia.com/gpu", uint8(7))
	e := New()
	f.Fuzz(func(t *testing.T, labels, alloc, res string, count uint8) {
		n := Node{Name: "n", Labels: map[string]string{}, Allocatable: Resources{}, Capacity: Resources{}, Used: Resources{}}
		for _, l := range strings.Split(labels, "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				n.Labels[k] = v
			}
		}
		for i, l := range strings.Split(alloc, "\n") {
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				continue
			}
			q := int64(len(v) + i%3) // small non-negative amounts
			n.Allocatable[k] = q
			n.Capacity[k] = q
			if i%2 == 1 {
				n.Used[k] = q / 2
			}
		}
		ps := PodSet{Name: "w", Count: int(count%8) + 1, Requests: Resources{res: 1, ResourcePods: 1}}
		w := Workload{Kind: "PyTorchJob", Namespace: "ns", Name: "j", PodSets: []PodSet{ps, {Name: "m", Count: 1, Requests: Resources{res: 2}}}}
		c := e.NewCluster([]Node{n, {Name: "empty"}})
		r := e.Diagnose(c, w)
		if r.Rule == "" || r.Report.Verdict == "" {
			t.Fatalf("no verdict: %+v", r)
		}
	})
}
