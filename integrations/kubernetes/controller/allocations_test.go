package controller

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/leader"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource/dra"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// draTestCaches are DRA caches holding one node's full GPUs, the second
// one allocated to claim ns/c1.
func draTestCaches(t *testing.T) *draCaches {
	t.Helper()
	slices := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{poolIndex: slicePool})
	claims := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
	require.NoError(t, slices.Add(clustertest.GPUSlice("n1",
		clustertest.DRAGPU{UUID: "GPU-a", Product: "NVIDIA H100 80GB HBM3", Driver: "580.95.05", MemoryGiB: 80},
		clustertest.DRAGPU{UUID: "GPU-b", Product: "NVIDIA H100 80GB HBM3", Driver: "580.95.05", MemoryGiB: 80})))
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	c.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: clustertest.NVIDIADRADriver, Pool: "n1", Device: "gpu-1"}}}}
	require.NoError(t, claims.Add(c))
	return &draCaches{served: true, slices: slices, claims: claims, synced: []func() bool{func() bool { return true }}}
}

func claimPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: corev1.PodSpec{NodeName: "n1",
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("c1")}}}}
}

// A rank's own report is compared with its allocation (the caches' pool
// index finds the device): a report naming another GPU gets
// DRA_DEVICES_DISAGREE and fails; one naming the allocated GPU is left
// as it is.
func TestOwnReportAgainstAllocation(t *testing.T) {
	c := &Controller{dra: *draTestCaches(t), log: logr.Discard(), w: leader.New(leader.Config{}, nil)}
	src := c.draSource()
	require.NotNil(t, src)
	alloc, err := src.Rank(context.Background(), claimPod(), 0)
	require.NoError(t, err)
	require.True(t, alloc.Known)
	require.Equal(t, "GPU-b", alloc.Report.Report.Devices[0].ID)
	require.Equal(t, "gpu.nvidia.com/n1/gpu-1", alloc.Report.Report.Devices[0].DRA)
	// The reconcilers and the gate's comparison read one memo of the
	// pools and one driver table.
	again, ok := c.draSource().(*dra.Source)
	require.True(t, ok)
	require.Same(t, src.(*dra.Source).Pools, again.Pools)
	require.Same(t, src.(*dra.Source).Drivers, again.Drivers)
	require.NotNil(t, again.Pools)

	own := preflight.RankReport{Rank: 0, Pod: "p", Node: "n1", Report: verdict.Report{Verdict: verdict.VerdictPass,
		Devices: []verdict.DeviceSummary{{ID: "GPU-b", Kind: "gpu"}}}}
	c.gateBackend().againstAllocation(context.Background(), claimPod(), &own)
	require.Equal(t, verdict.VerdictPass, own.Report.Verdict)
	require.Empty(t, own.Report.Findings)

	own.Report.Devices[0].ID = "GPU-a"
	c.gateBackend().againstAllocation(context.Background(), claimPod(), &own)
	require.Equal(t, verdict.VerdictFail, own.Report.Verdict)
	require.Equal(t, []string{verdict.RuleDRADevicesDisagree}, own.Report.RuleIDs())
	require.Len(t, own.Report.Devices, 1, "the report keeps its devices")

	// A pod without claims is not compared.
	plain := preflight.RankReport{Report: verdict.Report{Verdict: verdict.VerdictPass, Devices: []verdict.DeviceSummary{{ID: "GPU-z"}}}}
	c.gateBackend().againstAllocation(context.Background(), &corev1.Pod{}, &plain)
	require.Empty(t, plain.Report.Findings)
}

// A rank that reports itself after a passing verdict and fails its own
// rules is answered fail with its findings named; a passing report, or a
// failed verdict, is answered with the verdict.
func TestOwnReportFailsAfterVerdict(t *testing.T) {
	c := &Controller{log: logr.Discard(), w: leader.New(leader.Config{}, nil)}
	r := rankOf{job: kubeflow.MustFromObject(ptJob(true, 1)), rank: 1}
	pass := &decision.Decision{Report: verdict.NewReport("ns/j: 2 of 2 ranks reported (2 known from their DRA allocations)", nil)}
	good := preflight.RankReport{Rank: 1, Pod: "p1", Node: "n1", Report: verdict.NewReport("", nil)}
	require.Nil(t, c.gateBackend().ownReportFails(r, good, pass))
	bad := good
	bad.Report = verdict.NewReport("", []verdict.Finding{{Rule: verdict.RuleGPULost, Severity: verdict.SeverityFail, Message: "GPU 1 has fallen off the bus"}})
	d := c.gateBackend().ownReportFails(r, bad, pass)
	require.NotNil(t, d)
	require.Equal(t, verdict.VerdictFail, d.Report.Verdict)
	require.Equal(t, []string{verdict.RuleRankFailed}, d.Report.RuleIDs())
	require.Contains(t, d.Report.Findings[0].Message, "rank 1 (pod p1 on n1) reported itself after the gang's verdict (pass) and fails its own rules: GPU_LOST: GPU 1 has fallen off the bus")
	require.Equal(t, verdict.VerdictPass, pass.Report.Verdict, "the recorded verdict is not changed")
	fail := &decision.Decision{Report: verdict.NewReport("", []verdict.Finding{{Rule: verdict.RuleGangProfileMismatch, Severity: verdict.SeverityFail}})}
	require.Nil(t, c.gateBackend().ownReportFails(r, bad, fail))
}

// The cache keeps a pod's claim names, bounded.
func TestKeepClaims(t *testing.T) {
	p := claimPod()
	p.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "ext",
		RequestMappings: []corev1.ContainerExtendedResourceRequest{{ContainerName: "c", ResourceName: "nvidia.com/gpu", RequestName: "r"}}}
	out := &corev1.Pod{}
	keepClaims(out, p)
	require.Equal(t, p.Spec.ResourceClaims, out.Spec.ResourceClaims)
	require.Equal(t, "ext", out.Status.ExtendedResourceClaimStatus.ResourceClaimName)
	require.Empty(t, out.Status.ExtendedResourceClaimStatus.RequestMappings)
	for i := 0; i <= maxPodClaims; i++ {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: fmt.Sprint("c", i), ResourceClaimTemplateName: ptr.To("t")})
	}
	out = &corev1.Pod{}
	keepClaims(out, p)
	require.Empty(t, out.Spec.ResourceClaims)
	require.Equal(t, "true", out.Annotations[annoClaimsCut])
}
