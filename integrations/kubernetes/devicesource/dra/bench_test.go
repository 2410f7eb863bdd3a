package dra

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/preflight"
)

// eightByEight is node n1 publishing 8 H100s split into 7 1g.10gb devices
// each (56 devices), and 8 ranks, rank i holding the first MIG device of
// GPU i through its claim c<i>.
func eightByEight() (*objects, []*corev1.Pod) {
	gpus := make([]clustertest.DRAMIGGPU, 8)
	for g := range gpus {
		gpus[g] = clustertest.DRAMIGGPU{UUID: fmt.Sprintf("GPU-%d", g), Product: h100, Driver: driver}
		for m := 0; m < 7; m++ {
			gpus[g].MIG = append(gpus[g].MIG, clustertest.DRAMIG{UUID: fmt.Sprintf("MIG-%d-%d", g, m), Profile: "1g.10gb", SMs: 16, MemoryMiB: 9984})
		}
	}
	o := &objects{claims: map[string]*resourcev1.ResourceClaim{}, slices: []*resourcev1.ResourceSlice{clustertest.MIGSlice("n1", gpus...)}}
	pods := make([]*corev1.Pod, 8)
	for r := range pods {
		c := claimed(fmt.Sprint("c", r), fmt.Sprintf("gpu-%d-mig-1g10gb-0", r))
		o.claims[c.Namespace+"/"+c.Name] = c
		pods[r] = podWith(fmt.Sprint("p", r), c.Name)
	}
	return o, pods
}

// BenchmarkRankEightRanksOneNode: the reports of the 8 ranks of one node
// with 8 GPUs x 7 MIG devices, as one reconcile of the allocations
// reconciler makes them. shared: the Source's memo lives across
// reconciles (the controller's), the pool's inventory is built once;
// fresh: a new memo each reconcile (the pool changed in between).
func BenchmarkRankEightRanksOneNode(b *testing.B) {
	o, pods := eightByEight()
	drivers := preflight.DefaultDriverTable()
	ranks := func(b *testing.B, s *Source) {
		for r, p := range pods {
			if got, err := s.Rank(context.Background(), p, r); err != nil || !got.Known {
				b.Fatalf("rank %d: %+v %v", r, got, err)
			}
		}
	}
	b.Run("shared", func(b *testing.B) {
		s := &Source{Objects: o, Drivers: drivers, Pools: &Pools{}}
		b.ReportAllocs()
		for b.Loop() {
			ranks(b, s)
		}
	})
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ranks(b, &Source{Objects: o, Drivers: drivers, Pools: &Pools{}})
		}
	})
}
