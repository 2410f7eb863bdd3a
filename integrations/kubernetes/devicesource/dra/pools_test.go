package dra

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// claimedIn is a claim ns/name allocated devices given as pool/device.
func claimedIn(name string, devices ...[2]string) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	c.Status.Allocation = &resourcev1.AllocationResult{}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourcev1.DeviceRequestAllocationResult{Request: "gpu", Driver: clustertest.NVIDIADRADriver, Pool: d[0], Device: d[1]})
	}
	return c
}

// mixedNodes: node n1 of eightByEight, one of its MIG devices tainted and
// its whole GPUs published next to them in a second slice of the pool;
// node n2 with a whole GPU and two dynamic MIG placements on it. Ranks
// 0-7 are eightByEight's; 8 spans GPUs 6 and 7, 9 holds the tainted
// device, 10 a whole GPU of n1 (a MIG parent), 11 a dynamic placement,
// 12 n2's whole GPU, 13 devices of both pools.
func mixedNodes() (*objects, []*corev1.Pod) {
	o, pods := eightByEight()
	o.slices[0].ResourceVersion = "1"
	o.slices[0].Spec.Devices[3*7+2].Taints = []resourcev1.DeviceTaint{{Key: "gpu.nvidia.com/xid", Value: "79", Effect: resourcev1.DeviceTaintEffectNoExecute}}
	whole := make([]clustertest.DRAGPU, 8)
	for g := range whole {
		whole[g] = clustertest.DRAGPU{UUID: fmt.Sprintf("GPU-%d", g), Product: h100, Driver: driver, MemoryGiB: 80}
	}
	full := clustertest.GPUSlice("n1", whole...)
	full.ResourceVersion = "2"
	n2 := clustertest.GPUSlice("n2", clustertest.DRAGPU{UUID: gpuA, Product: h100, Driver: driver, MemoryGiB: 80})
	for k := 0; k < 2; k++ {
		m := twoMIGGPUs().Spec.Devices[1+k]
		m.ConsumesCounters = []resourcev1.DeviceCounterConsumption{{CounterSet: "gpu-0-counters"}}
		m.Attributes["parentUUID"] = resourcev1.DeviceAttribute{StringValue: ptr.To(gpuA)}
		n2.Spec.Devices = append(n2.Spec.Devices, m)
	}
	n2.ResourceVersion = "3"
	o.slices = append(o.slices, full, n2)
	for _, c := range []*resourcev1.ResourceClaim{
		claimedIn("c8", [2]string{"n1", "gpu-6-mig-1g10gb-0"}, [2]string{"n1", "gpu-7-mig-1g10gb-0"}),
		claimedIn("c9", [2]string{"n1", "gpu-3-mig-1g10gb-2"}),
		claimedIn("c10", [2]string{"n1", "gpu-0"}),
		claimedIn("c11", [2]string{"n2", "gpu-0-mig-1g10gb-1"}),
		claimedIn("c12", [2]string{"n2", "gpu-0"}),
		claimedIn("c13", [2]string{"n1", "gpu-5-mig-1g10gb-1"}, [2]string{"n2", "gpu-0"}),
	} {
		o.claims["ns/"+c.Name] = c
		p := podWith("p"+c.Name[1:], c.Name)
		if c.Status.Allocation.Devices.Results[0].Pool == "n2" {
			p.Spec.NodeName = "n2"
		}
		pods = append(pods, p)
	}
	return o, pods
}

// reports are the JSON of the reports s makes of pods, ranks in order.
func reports(t *testing.T, s *Source, pods []*corev1.Pod) []string {
	t.Helper()
	out, err := reportsOf(s, pods)
	require.NoError(t, err)
	return out
}

func reportsOf(s *Source, pods []*corev1.Pod) ([]string, error) {
	out := make([]string, len(pods))
	for r, p := range pods {
		got, err := s.Rank(context.Background(), p, r)
		if err != nil {
			return nil, err
		}
		if !got.Known {
			return nil, fmt.Errorf("rank %d: %+v", r, got)
		}
		b, err := json.Marshal(got)
		if err != nil {
			return nil, err
		}
		out[r] = string(b)
	}
	return out, nil
}

// The memo changes no report: every rank of a node, on one GPU, spanning
// GPUs, on a tainted device, on a whole GPU, on a dynamic placement and
// on two pools, is reported byte for byte as without it, each pool's
// inventory built once for all its ranks, whatever order the cache lists
// a pool's slices in.
func TestPoolsReportAsWithout(t *testing.T) {
	o, pods := mixedNodes()
	drivers := preflight.DefaultDriverTable()
	want := reports(t, &Source{Objects: o, Drivers: drivers}, pods)
	rules := func(r int) []string {
		var got struct{ Report preflight.RankReport }
		require.NoError(t, json.Unmarshal([]byte(want[r]), &got))
		return got.Report.Report.RuleIDs()
	}
	require.Empty(t, rules(0))
	require.ElementsMatch(t, []string{verdict.RuleMIGSpansGPUs, verdict.RuleMIGMultiplePerProcess}, rules(8))
	require.Equal(t, []string{verdict.RuleDeviceTainted}, rules(9))
	require.Equal(t, []string{verdict.RuleMIGParentAllocated}, rules(10))
	require.Empty(t, rules(11))
	require.Empty(t, rules(12))

	pools := &Pools{}
	s := &Source{Objects: o, Drivers: drivers, Pools: pools}
	require.Equal(t, want, reports(t, s, pods))
	require.Equal(t, 2, pools.size())
	n1 := pools.entries[poolKey{catalog: defaultCatalog, driver: clustertest.NVIDIADRADriver, pool: "n1"}]
	require.NotNil(t, n1.inv, "n1's ranks share its inventory")
	// The cache lists the pool's slices in another order: the same entry.
	slices.Reverse(o.slices)
	require.Equal(t, want, reports(t, s, pods))
	require.Same(t, n1, pools.entries[n1.key])
	require.Equal(t, want, reports(t, &Source{Objects: o, Drivers: drivers}, pods))

	// Ranks of several jobs at once (go test -race).
	var wg sync.WaitGroup
	got := make([][]string, 4)
	errs := make([]error, 4)
	for i := range got {
		wg.Go(func() { got[i], errs[i] = reportsOf(s, pods) })
	}
	wg.Wait()
	for i := range got {
		require.NoError(t, errs[i])
		require.Equal(t, want, got[i])
	}
	require.Same(t, n1, pools.entries[n1.key])
}

// A pool's slices change (the informer replaces the object, at a new
// resourceVersion): its entry is built again and the reports follow; a
// pool gone is dropped.
func TestPoolsFollowSlices(t *testing.T) {
	o, pods := mixedNodes()
	pools := &Pools{}
	s := &Source{Objects: o, Pools: pools}
	before := reports(t, s, pods)
	n1 := pools.entries[poolKey{catalog: defaultCatalog, driver: clustertest.NVIDIADRADriver, pool: "n1"}]

	i := slices.IndexFunc(o.slices, func(sl *resourcev1.ResourceSlice) bool { return sl.Name == "n1-gpu.nvidia.com-mig" })
	tainted := o.slices[i].DeepCopy()
	tainted.ResourceVersion = "4"
	tainted.Spec.Devices[0].Taints = []resourcev1.DeviceTaint{{Key: "gpu.nvidia.com/xid", Value: "48", Effect: resourcev1.DeviceTaintEffectNoExecute}}
	o.slices[i] = tainted
	after := reports(t, s, pods)
	require.Equal(t, reports(t, &Source{Objects: o}, pods), after)
	require.NotEqual(t, before[0], after[0])
	require.Contains(t, after[0], "xid=48")
	require.Equal(t, before[1:], after[1:])
	require.NotSame(t, n1, pools.entries[n1.key])

	require.Equal(t, 2, pools.size())
	// n2 is gone: its ranks wait, and its entry goes.
	o.slices = slices.DeleteFunc(o.slices, func(sl *resourcev1.ResourceSlice) bool { return sl.Spec.Pool.Name == "n2" })
	r, err := s.Rank(context.Background(), pods[12], 12)
	require.NoError(t, err)
	require.Contains(t, r.Waiting, "is not published in any ResourceSlice")
	require.Equal(t, 1, pools.size())
}

// Pools no rank asks for again are dropped once gone: the memo holds at
// most about twice the pools that exist.
func TestPoolsSweepGonePools(t *testing.T) {
	o := &objects{claims: map[string]*resourcev1.ResourceClaim{}}
	pools := &Pools{}
	s := &Source{Objects: o, Pools: pools}
	for n := 0; n < 200; n++ {
		node := fmt.Sprint("node-", n)
		o.slices = []*resourcev1.ResourceSlice{clustertest.GPUSlice(node, clustertest.DRAGPU{UUID: "GPU-" + node, Product: h100, Driver: driver, MemoryGiB: 80})}
		c := claimedIn("c"+node, [2]string{node, "gpu-0"})
		o.claims["ns/"+c.Name] = c
		r, err := s.Rank(context.Background(), podWith("p", c.Name), 0)
		require.NoError(t, err)
		require.True(t, r.Known)
		require.LessOrEqual(t, pools.size(), minSweep, "one pool exists at a time")
	}
}

// An entry stands only for what it was read from: a slice written in
// place at a new resourceVersion, or a device published twice with the
// slices listed in another order, is read again.
func TestPoolEntryCurrent(t *testing.T) {
	a, b := twoMIGGPUs(), twoMIGGPUs()
	a.ResourceVersion, b.ResourceVersion = "1", "2"
	k := poolKey{catalog: defaultCatalog, driver: clustertest.NVIDIADRADriver, pool: "n1"}
	e := newPoolEntry(nil, k, []*resourcev1.ResourceSlice{a, b})
	require.True(t, e.ordered, "b publishes a's devices again")
	require.True(t, e.current([]*resourcev1.ResourceSlice{a, b}))
	require.False(t, e.current([]*resourcev1.ResourceSlice{b, a}))

	b = clustertest.GPUSlice("n1", clustertest.DRAGPU{UUID: gpuA, Product: h100, Driver: driver, MemoryGiB: 80})
	e = newPoolEntry(nil, k, []*resourcev1.ResourceSlice{a, b})
	require.False(t, e.ordered)
	require.True(t, e.current([]*resourcev1.ResourceSlice{b, a}))
	require.False(t, e.current([]*resourcev1.ResourceSlice{a, a}))
	require.False(t, e.current([]*resourcev1.ResourceSlice{a}))
	a.ResourceVersion = "5"
	require.False(t, e.current([]*resourcev1.ResourceSlice{a, b}))
	require.False(t, newPoolEntry(nil, poolKey{pool: "other"}, []*resourcev1.ResourceSlice{a}).current([]*resourcev1.ResourceSlice{}))
	require.True(t, newPoolEntry(nil, poolKey{pool: "other"}, []*resourcev1.ResourceSlice{a}).ordered, "a slice of another pool")
}
