package dra

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// objects is an in-memory Objects.
type objects struct {
	claims map[string]*resourcev1.ResourceClaim
	slices []*resourcev1.ResourceSlice
	rules  []*resourcev1.DeviceTaintRule
}

func (o *objects) TaintRules() []*resourcev1.DeviceTaintRule { return o.rules }

func (o *objects) Claim(ns, name string) *resourcev1.ResourceClaim { return o.claims[ns+"/"+name] }

func (o *objects) Pool(driver, pool string) []*resourcev1.ResourceSlice {
	var out []*resourcev1.ResourceSlice
	for _, s := range o.slices {
		if s.Spec.Driver == driver && s.Spec.Pool.Name == pool {
			out = append(out, s)
		}
	}
	return out
}

const (
	h100   = "NVIDIA H100 80GB HBM3"
	gpuA   = "GPU-4b9a1e6c-2d7f-3a58-9c41-7e0d5b2f8a13"
	gpuB   = "GPU-7c9b5a3e-2f1d-4b8e-9a6c-3d2e1f0a9b8c"
	driver = "580.126.20"
)

// twoMIGGPUs: node n1 with two H100s, each split into a 2g.20gb and two
// 1g.10gb devices.
func twoMIGGPUs() *resourcev1.ResourceSlice {
	gpu := func(uuid string, k int) clustertest.DRAMIGGPU {
		return clustertest.DRAMIGGPU{UUID: uuid, Product: h100, Driver: driver, MIG: []clustertest.DRAMIG{
			{UUID: fmt.Sprintf("MIG-%d-0", k), Profile: "2g.20gb", SMs: 32, MemoryMiB: 19968},
			{UUID: fmt.Sprintf("MIG-%d-1", k), Profile: "1g.10gb", SMs: 16, MemoryMiB: 9984},
			{UUID: fmt.Sprintf("MIG-%d-2", k), Profile: "1g.10gb", SMs: 16, MemoryMiB: 9984},
		}}
	}
	return clustertest.MIGSlice("n1", gpu(gpuA, 0), gpu(gpuB, 1))
}

// claimed is a claim ns/name allocated the devices of node n1's pool.
func claimed(name string, devices ...string) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	a := &resourcev1.AllocationResult{}
	for _, d := range devices {
		a.Devices.Results = append(a.Devices.Results, resourcev1.DeviceRequestAllocationResult{Request: "gpu", Driver: clustertest.NVIDIADRADriver, Pool: "n1", Device: d})
	}
	c.Status.Allocation = a
	return c
}

// podWith is a pod whose claim "gpu", made from a template, is claim.
func podWith(name, claim string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.PodSpec{NodeName: "n1",
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("mig")}}}}
	if claim != "" {
		p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To(claim)}}
	}
	return p
}

func source(claims ...*resourcev1.ResourceClaim) *Source {
	o := &objects{claims: map[string]*resourcev1.ResourceClaim{}, slices: []*resourcev1.ResourceSlice{twoMIGGPUs()}}
	for _, c := range claims {
		o.claims[c.Namespace+"/"+c.Name] = c
	}
	return &Source{Objects: o, Drivers: preflight.DefaultDriverTable()}
}

func rankOf(t *testing.T, s *Source, p *corev1.Pod, rank int) devicesource.Rank {
	t.Helper()
	r, err := s.Rank(context.Background(), p, rank)
	require.NoError(t, err)
	return r
}

func rules(r verdict.Report) []string { return r.RuleIDs() }

// Two ranks on 1g.10gb devices of one GPU: each rank's report lists its
// MIG device with the facts the driver publishes, no rank rule fails,
// and the gang passes (all on one GPU: GANG_MIG_SHARED_GPU, info).
func TestRanksOnOneGPUPass(t *testing.T) {
	s := source(claimed("a", "gpu-0-mig-1g10gb-1"), claimed("b", "gpu-0-mig-1g10gb-2"))
	r0, r1 := rankOf(t, s, podWith("p0", "a"), 0), rankOf(t, s, podWith("p1", "b"), 1)
	require.True(t, r0.Known)
	require.True(t, r1.Known)
	d := r0.Report.Report.Devices
	require.Len(t, d, 1)
	require.Equal(t, verdict.DeviceSummary{ID: "MIG-0-1", Kind: "mig", GPU: 0, GPUUUID: gpuA, Profile: "1g.10gb", SMs: 16, MemoryMiB: 9984,
		DRA: "gpu.nvidia.com/n1/gpu-0-mig-1g10gb-1"}, d[0])
	require.Equal(t, devicesource.DRA, r0.Report.Source)
	require.Equal(t, "n1", r0.Report.Node)
	require.Equal(t, "p0", r0.Report.Pod)
	require.Equal(t, driver, r0.Report.DriverVersion)
	require.Equal(t, verdict.VerdictPass, r0.Report.Report.Verdict, "%+v", r0.Report.Report.Findings)
	g := preflight.GangRules(preflight.GangInput{Job: "ns/j", Expected: 2, Ranks: []preflight.RankReport{r0.Report, r1.Report}})
	require.Equal(t, verdict.VerdictPass, g.Verdict, "%+v", g.Findings)
	require.Contains(t, rules(g), verdict.RuleGangMIGSharedGPU)
}

// One rank's claim holds MIG devices of two GPUs: MIG_SPANS_GPUS and
// MIG_MULTIPLE_PER_PROCESS fail the rank, and the gang.
func TestRankSpanningGPUsFails(t *testing.T) {
	s := source(claimed("a", "gpu-0-mig-1g10gb-1", "gpu-1-mig-1g10gb-1"))
	r := rankOf(t, s, podWith("p0", "a"), 0)
	require.True(t, r.Known)
	require.Equal(t, verdict.VerdictFail, r.Report.Report.Verdict)
	require.ElementsMatch(t, []string{verdict.RuleMIGSpansGPUs, verdict.RuleMIGMultiplePerProcess}, rules(r.Report.Report))
	g := preflight.GangRules(preflight.GangInput{Job: "ns/j", Expected: 1, Ranks: []preflight.RankReport{r.Report}})
	require.Equal(t, verdict.VerdictFail, g.Verdict)
	require.Contains(t, rules(g), verdict.RuleRankFailed)
}

// Ranks on different profiles of one GPU: GANG_PROFILE_MISMATCH.
func TestRanksOnDifferentProfilesFail(t *testing.T) {
	s := source(claimed("a", "gpu-0-mig-2g20gb-0"), claimed("b", "gpu-0-mig-1g10gb-1"))
	r0, r1 := rankOf(t, s, podWith("p0", "a"), 0), rankOf(t, s, podWith("p1", "b"), 1)
	g := preflight.GangRules(preflight.GangInput{Job: "ns/j", Expected: 2, Ranks: []preflight.RankReport{r0.Report, r1.Report}})
	require.Equal(t, verdict.VerdictFail, g.Verdict)
	require.Contains(t, rules(g), verdict.RuleGangProfileMismatch)
}

// What the source waits for, and what it does not know.
func TestWaitsAndUnknown(t *testing.T) {
	s := source(&resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pending"}}, claimed("gone", "gpu-9-mig-1g10gb-0"))
	for _, tc := range []struct {
		name, waiting string
		pod           *corev1.Pod
	}{
		{"claim not named yet", `the claim "gpu" of pod ns/p is not created yet`, podWith("p", "")},
		{"claim not in the cache", "ResourceClaim ns/missing is not seen yet", podWith("p", "missing")},
		{"claim not allocated", "ResourceClaim ns/pending is not allocated yet", podWith("p", "pending")},
		{"device not published", "device gpu.nvidia.com/n1/gpu-9-mig-1g10gb-0 of ResourceClaim ns/gone is not published in any ResourceSlice", podWith("p", "gone")},
		{"no claims", "", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rankOf(t, s, tc.pod, 0)
			require.False(t, r.Known)
			require.Equal(t, tc.waiting, r.Waiting)
		})
	}
	// A template's claim the pod does not need (status names no claim),
	// and the scheduler's claim for a DRA-served extended resource.
	p := podWith("p", "")
	p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu"}}
	p.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "ext"}
	s = source(claimed("ext", "gpu-1-mig-2g20gb-0"))
	r := rankOf(t, s, p, 3)
	require.True(t, r.Known)
	require.Equal(t, "MIG-1-0", r.Report.Report.Devices[0].ID)
	require.Equal(t, 3, r.Report.Rank)
}

// A device its driver tainted fails the rank with DEVICE_TAINTED naming
// the taint; full GPUs get their SMs from the catalog.
func TestTaintedDeviceAndFullGPU(t *testing.T) {
	sl := clustertest.GPUSlice("n1",
		clustertest.DRAGPU{UUID: gpuA, Product: h100, Driver: driver, MemoryGiB: 80},
		clustertest.DRAGPU{UUID: gpuB, Product: h100, Driver: driver, MemoryGiB: 80})
	sl.Spec.Devices[1].Taints = []resourcev1.DeviceTaint{{Key: "gpu.nvidia.com/xid", Value: "79", Effect: resourcev1.DeviceTaintEffectNoSchedule}}
	o := &objects{claims: map[string]*resourcev1.ResourceClaim{"ns/a": claimed("a", "gpu-0"), "ns/b": claimed("b", "gpu-1")}, slices: []*resourcev1.ResourceSlice{sl}}
	s := &Source{Objects: o}
	ok := rankOf(t, s, podWith("p0", "a"), 0)
	require.Equal(t, verdict.VerdictPass, ok.Report.Report.Verdict, "%+v", ok.Report.Report.Findings)
	require.Equal(t, "full", ok.Report.Report.Devices[0].Profile)
	require.Equal(t, 132, ok.Report.Report.Devices[0].SMs)
	require.Equal(t, uint64(81920), ok.Report.Report.Devices[0].MemoryMiB)
	bad := rankOf(t, s, podWith("p1", "b"), 1)
	require.Equal(t, []string{verdict.RuleDeviceTainted}, rules(bad.Report.Report))
	require.Contains(t, bad.Report.Report.Findings[0].Message, "device gpu.nvidia.com/n1/gpu-1 ("+gpuB+") of ResourceClaim ns/b carries the taint(s) gpu.nvidia.com/xid=79:NoSchedule")

	// Effect None is informational (the scheduler allocates the device):
	// no finding, the driver's as a rule's.
	sl.Spec.Devices[1].Taints[0].Effect = resourcev1.DeviceTaintEffectNone
	note := rankOf(t, &Source{Objects: o}, podWith("p1", "b"), 1)
	require.Equal(t, verdict.VerdictPass, note.Report.Report.Verdict, "%+v", note.Report.Report.Findings)
}

// Dynamic MIG: every placement is published, consuming the GPU's
// counters. A rank given the whole GPU is not judged as given a MIG
// parent: the placements are not instances until allocated.
func TestDynamicMIGPlacementsAreNotInstances(t *testing.T) {
	sl := clustertest.GPUSlice("n1", clustertest.DRAGPU{UUID: gpuA, Product: h100, Driver: driver, MemoryGiB: 80})
	mig := twoMIGGPUs().Spec.Devices[0]
	mig.ConsumesCounters = []resourcev1.DeviceCounterConsumption{{CounterSet: "gpu-0-counters"}}
	mig.Attributes["parentUUID"] = resourcev1.DeviceAttribute{StringValue: ptr.To(gpuA)}
	sl.Spec.Devices = append(sl.Spec.Devices, mig)
	o := &objects{claims: map[string]*resourcev1.ResourceClaim{"ns/a": claimed("a", "gpu-0")}, slices: []*resourcev1.ResourceSlice{sl}}
	r := rankOf(t, &Source{Objects: o}, podWith("p0", "a"), 0)
	require.Equal(t, verdict.VerdictPass, r.Report.Report.Verdict, "%+v", r.Report.Report.Findings)
	// A static MIG device published next to its whole GPU (driver issue
	// 719): the whole GPU is a MIG parent with an instance.
	mig.ConsumesCounters = nil
	sl.Spec.Devices[1] = mig
	r = rankOf(t, &Source{Objects: o}, podWith("p0", "a"), 0)
	require.Equal(t, []string{verdict.RuleMIGParentAllocated}, rules(r.Report.Report))
}

// Dynamic MIG as the driver publishes it (clustertest.DynamicMIGSlices):
// two ranks given two 1g.10gb placements of one GPU hold two devices,
// though neither placement has a uuid nor an index of its own: numbered
// in each rank's inventory by its place there, both read as MIG device 0
// of that GPU, and the gang as one device given twice.
func TestDynamicMIGPlacementsOfOneGPUAreDistinct(t *testing.T) {
	o := &objects{claims: map[string]*resourcev1.ResourceClaim{
		"ns/a": claimed("a", "gpu-0-mig-1g10gb-19-0"), "ns/b": claimed("b", "gpu-0-mig-1g10gb-19-1"),
	}, slices: clustertest.DynamicMIGSlices("n1", clustertest.DRADynamicGPU{UUID: gpuA, Product: h100, Driver: driver})}
	for _, pools := range []*Pools{nil, {}} {
		s := &Source{Objects: o, Drivers: preflight.DefaultDriverTable(), Pools: pools}
		var ids []string
		for r, c := range []string{"a", "b"} {
			got := rankOf(t, s, podWith(fmt.Sprintf("p%d", r), c), r)
			require.True(t, got.Known)
			require.Equal(t, verdict.VerdictPass, got.Report.Report.Verdict, "%+v", got.Report.Report.Findings)
			require.Len(t, got.Report.Report.Devices, 1)
			d := got.Report.Report.Devices[0]
			require.Equal(t, "1g.10gb", d.Profile)
			require.Equal(t, fmt.Sprintf("gpu.nvidia.com/n1/gpu-0-mig-1g10gb-19-%d", r), d.DRA)
			ids = append(ids, d.ID)
		}
		require.NotEqual(t, ids[0], ids[1], "pools %v", pools != nil)
	}
}

// Disagreement: the rank's own report names other devices than its
// allocation.
func TestDisagreement(t *testing.T) {
	s := source(claimed("a", "gpu-0-mig-1g10gb-1"))
	alloc := rankOf(t, s, podWith("p0", "a"), 0).Report
	own := alloc
	own.Source = devicesource.Reported
	require.Nil(t, devicesource.Disagreement(own, alloc))
	own.Report.Devices = []verdict.DeviceSummary{{ID: "MIG-1-1", Kind: "mig"}}
	f := devicesource.Disagreement(own, alloc)
	require.NotNil(t, f)
	require.Equal(t, verdict.RuleDRADevicesDisagree, f.Rule)
	require.Equal(t, verdict.SeverityFail, f.Severity)
	require.Contains(t, f.Message, "allocated but not seen by the rank: MIG-0-1; seen by the rank but not allocated: MIG-1-1")
	own.Report.Devices = nil
	require.Nil(t, devicesource.Disagreement(own, alloc), "a report without devices fails on its own")
}
