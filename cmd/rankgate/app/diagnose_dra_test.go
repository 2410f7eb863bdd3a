//go:build !rankgate_node

package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/verdict"
)

// The dumps of testdata/dra-allocated: one DGX H100 node whose GPUs run
// static MIG, published as NVIDIA's DRA driver v0.4.1 does, and
// PyTorchJobs whose pods the scheduler bound with their claims allocated.
func draAllocated(names ...string) []string {
	out := []string{"-f", filepath.Join("testdata", "dra-allocated", "cluster.yaml")}
	for _, n := range names {
		out = append(out, "-f", filepath.Join("testdata", "dra-allocated", n))
	}
	return out
}

func diagnoseOfflineDRA(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return run(t, nil, append([]string{"diagnose", "--offline"}, args...)...)
}

// Two ranks on the two 3g.40gb devices of one GPU: the gang passes from
// the allocations, the devices listed with their pools.
func TestDiagnoseDRAAllocatedMIGJobPasses(t *testing.T) {
	args := append(draAllocated("llm-mig.yaml"), "pytorchjob/llm-mig")
	code, out, errOut := diagnoseOfflineDRA(t, append(args, "-o", "json")...)
	require.Equal(t, verdict.ExitPass, code, errOut)
	r := decodeReportList(t, out)
	require.Len(t, r, 1)
	require.Equal(t, verdict.VerdictPass, r[0].Verdict)
	require.Equal(t, "PyTorchJob ml/llm-mig: 2 of 2 ranks known from their DRA allocations", r[0].Subject)
	require.Equal(t, []string{verdict.RuleGangMIGSharedGPU}, r[0].RuleIDs())
	require.Len(t, r[0].Devices, 2)
	for i, want := range []struct{ id, dra string }{
		{"MIG-2a7e4c10-9d3b-5f61-8e02-4b6d1a9c3e70", "gpu.nvidia.com/dgx-h100-1/gpu-0-mig-3g40gb-9-0"},
		{"MIG-2a7e4c14-9d3b-5f61-8e02-4b6d1a9c3e74", "gpu.nvidia.com/dgx-h100-1/gpu-0-mig-3g40gb-9-4"},
	} {
		d := r[0].Devices[i]
		require.Equal(t, want.id, d.ID)
		require.Equal(t, want.dra, d.DRA)
		require.Equal(t, "mig", d.Kind)
		require.Equal(t, "3g.40gb", d.Profile)
		require.Equal(t, 60, d.SMs)
		require.Equal(t, uint64(40448), d.MemoryMiB)
		require.Equal(t, "GPU-8f3c2a1e-5b7d-4e90-a1c3-2d4f6b8e0a17", d.GPUUUID)
	}

	code, out, errOut = diagnoseOfflineDRA(t, args...)
	require.Equal(t, verdict.ExitPass, code, errOut)
	golden(t, "diagnose-dra-allocated-pass.golden", out)
}

// Ranks given MIG devices of different profiles fail the gang as the
// controller would record it.
func TestDiagnoseDRAAllocatedProfileMismatchFails(t *testing.T) {
	args := append(draAllocated("llm-mixed.yaml"), "pytorchjob/llm-mixed")
	code, out, errOut := diagnoseOfflineDRA(t, append(args, "-o", "json")...)
	require.Equal(t, verdict.ExitFail, code, errOut)
	r := decodeReportList(t, out)
	require.Len(t, r, 1)
	require.Equal(t, verdict.VerdictFail, r[0].Verdict)
	require.Equal(t, "PyTorchJob ml/llm-mixed: 2 of 2 ranks known from their DRA allocations", r[0].Subject)
	require.Equal(t, []string{verdict.RuleGangProfileMismatch, verdict.RuleGangMIGSharedGPU}, r[0].RuleIDs())
	require.Equal(t, "ranks run on devices of different shapes; the smallest paces every collective: 1g.10gb (16 SMs): ranks 1; 2g.20gb (32 SMs): ranks 0", r[0].Findings[0].Message)
	require.Equal(t, []int{0, 1}, r[0].Findings[0].Ranks)

	code, out, errOut = diagnoseOfflineDRA(t, args...)
	require.Equal(t, verdict.ExitFail, code, errOut)
	golden(t, "diagnose-dra-allocated-profile-mismatch.golden", out)
}

// A bound rank pod whose claim is not allocated in the dump: the job
// waits, saying for what; the rank whose claim is allocated is listed.
func TestDiagnoseDRAClaimNotAllocated(t *testing.T) {
	code, out, errOut := diagnoseOfflineDRA(t, append(draAllocated("llm-wait.yaml"), "-o", "json")...)
	require.Equal(t, verdict.ExitPass, code, errOut)
	r := decodeReportList(t, out)
	require.Len(t, r, 1)
	require.Equal(t, verdict.VerdictWarn, r[0].Verdict)
	require.Equal(t, "PyTorchJob ml/llm-wait: 1 of 2 ranks known from their DRA allocations", r[0].Subject)
	require.Equal(t, []string{verdict.RuleDRANotJudged}, r[0].RuleIDs())
	f := r[0].Findings[0]
	require.Equal(t, verdict.SeverityWarn, f.Severity)
	require.True(t, strings.HasPrefix(f.Message, "rank 1 (pod llm-wait-worker-0 on dgx-h100-1): ResourceClaim ml/llm-wait-worker-0-gpu-s2f7j is not allocated yet."), f.Message)
	require.Contains(t, f.Message, "(1 of 2 ranks known)")
	require.Equal(t, []int{1}, f.Ranks)
	require.Equal(t, []string{"ml/llm-wait-worker-0"}, f.Pods)
	require.Len(t, r[0].Devices, 1)
	require.Equal(t, "gpu.nvidia.com/dgx-h100-1/gpu-1-mig-2g20gb-14-2", r[0].Devices[0].DRA)

	// The pods without their job: each judged alone from its allocation.
	pods := withoutKind(t, filepath.Join("testdata", "dra-allocated", "llm-wait.yaml"), "PyTorchJob")
	code, out, errOut = diagnoseOfflineDRA(t, "-f", filepath.Join("testdata", "dra-allocated", "cluster.yaml"), "-f", pods, "-o", "json")
	require.Equal(t, verdict.ExitPass, code, errOut)
	r = decodeReportList(t, out)
	require.Len(t, r, 2)
	require.Equal(t, "Pod ml/llm-wait-master-0 on dgx-h100-1: 1 device(s) from its DRA allocation", r[0].Subject)
	require.Equal(t, verdict.VerdictPass, r[0].Verdict)
	require.Empty(t, r[0].RuleIDs())
	require.Equal(t, "2g.20gb", r[0].Devices[0].Profile)
	require.Equal(t, "Pod ml/llm-wait-worker-0", r[1].Subject)
	require.Equal(t, []string{verdict.RuleDRANotJudged}, r[1].RuleIDs())
	require.True(t, strings.HasPrefix(r[1].Findings[0].Message,
		"Pod ml/llm-wait-worker-0 is bound to node dgx-h100-1 (phase Pending) and its devices come through DRA resource claims (gpu): ResourceClaim ml/llm-wait-worker-0-gpu-s2f7j is not allocated yet. "),
		r[1].Findings[0].Message)

	// A device its driver no longer publishes: waiting too, named.
	gone := withoutKind(t, filepath.Join("testdata", "dra-allocated", "cluster.yaml"), "ResourceSlice")
	code, out, errOut = diagnoseOfflineDRA(t, "-f", gone, "-f", filepath.Join("testdata", "dra-allocated", "llm-mig.yaml"), "-o", "json")
	require.Equal(t, verdict.ExitPass, code, errOut)
	r = decodeReportList(t, out)
	require.Equal(t, []string{verdict.RuleDRANotJudged}, r[0].RuleIDs())
	require.Contains(t, r[0].Findings[0].Message, "rank 0 (pod llm-mig-master-0 on dgx-h100-1): device gpu.nvidia.com/dgx-h100-1/gpu-0-mig-3g40gb-9-0 of ResourceClaim ml/llm-mig-master-0-gpu-x7k2q is not published in any ResourceSlice")
	require.Equal(t, []int{0, 1}, r[0].Findings[0].Ranks)
}

// diagnose pod on a bound pod with allocated claims: the rank rules on
// its devices; the job of a pod whose device spans two GPUs fails through
// its rank.
func TestDiagnoseDRAPodLive(t *testing.T) {
	objs := draObjects(t, "cluster.yaml", "llm-mig.yaml", "llm-mixed.yaml")
	l, _ := fakeLive(t, objs...)
	useLive(t, l)

	code, out, errOut := run(t, nil, "diagnose", "pod", "ml/llm-mig-worker-0", "-o", "json")
	require.Equal(t, verdict.ExitPass, code, errOut)
	r := decodeReport(t, out)
	require.Equal(t, verdict.VerdictPass, r.Verdict)
	require.Equal(t, "Pod ml/llm-mig-worker-0 (rank 1 of PyTorchJob ml/llm-mig) on dgx-h100-1: 1 device(s) from its DRA allocation", r.Subject)
	require.Empty(t, r.RuleIDs())
	require.Len(t, r.Devices, 1)
	require.Equal(t, "MIG-2a7e4c14-9d3b-5f61-8e02-4b6d1a9c3e74", r.Devices[0].ID)
	require.Equal(t, "gpu.nvidia.com/dgx-h100-1/gpu-0-mig-3g40gb-9-4", r.Devices[0].DRA)

	code, out, errOut = run(t, nil, "diagnose", "pod", "ml/llm-mig-worker-0")
	require.Equal(t, verdict.ExitPass, code, errOut)
	require.Contains(t, out, "verdict: PASS  Pod ml/llm-mig-worker-0 (rank 1 of PyTorchJob ml/llm-mig) on dgx-h100-1: 1 device(s) from its DRA allocation\n")
	require.Regexp(t, `(?m)^1 +llm-mig-worker-0 +MIG-2a7e4c14-9d3b-5f61-8e02-4b6d1a9c3e74 +mig +3g\.40gb +60 +40448 MiB +dgx-h100-1/gpu-0-mig-3g40gb-9-4$`, out)

	// The job, live: the same gang verdict as offline.
	code, out, errOut = run(t, nil, "diagnose", "job", "ml/llm-mixed", "-o", "json")
	require.Equal(t, verdict.ExitFail, code, errOut)
	r = decodeReport(t, out)
	require.Equal(t, []string{verdict.RuleGangProfileMismatch, verdict.RuleGangMIGSharedGPU}, r.RuleIDs())

	// The Worker's claim also holds a MIG device of the other GPU: the
	// pod fails its rank rules, and the job fails through that rank.
	for _, o := range objs {
		if c, ok := o.(*resourcev1.ResourceClaim); ok && c.Name == "llm-mig-worker-0-gpu-p4m8v" {
			c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourcev1.DeviceRequestAllocationResult{
				Request: "mig", Driver: "gpu.nvidia.com", Pool: "dgx-h100-1", Device: "gpu-1-mig-2g20gb-14-4",
			})
		}
	}
	l, _ = fakeLive(t, objs...)
	useLive(t, l)
	code, out, errOut = run(t, nil, "diagnose", "pod", "ml/llm-mig-worker-0", "-o", "json")
	require.Equal(t, verdict.ExitFail, code, errOut)
	r = decodeReport(t, out)
	require.Equal(t, "Pod ml/llm-mig-worker-0 (rank 1 of PyTorchJob ml/llm-mig) on dgx-h100-1: 2 device(s) from its DRA allocation", r.Subject)
	require.Contains(t, r.RuleIDs(), verdict.RuleMIGSpansGPUs)
	require.Contains(t, r.RuleIDs(), verdict.RuleProfileHeterogeneous)

	code, out, errOut = run(t, nil, "diagnose", "job", "ml/llm-mig", "-o", "json")
	require.Equal(t, verdict.ExitFail, code, errOut)
	r = decodeReport(t, out)
	require.Equal(t, verdict.VerdictFail, r.Verdict)
	require.Subset(t, r.RuleIDs(), []string{verdict.RuleRankFailed, verdict.RuleGangMIGSpansGPUs})
	for _, f := range r.Findings {
		if f.Rule == verdict.RuleRankFailed {
			require.Equal(t, []int{1}, f.Ranks)
			require.Equal(t, "rank 1 (pod llm-mig-worker-0 on dgx-h100-1), judged from the devices its ResourceClaims were allocated, fails the rank rules: MIG_MULTIPLE_PER_PROCESS, MIG_SPANS_GPUS, PROFILE_HETEROGENEOUS", f.Message)
		}
	}
}

// draObjects decodes dumps of testdata/dra-allocated for the fake
// clients: core and DRA objects typed, jobs unstructured.
func draObjects(t *testing.T, names ...string) []runtime.Object {
	t.Helper()
	var out []runtime.Object
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join("testdata", "dra-allocated", n))
		require.NoError(t, err)
		for _, doc := range strings.Split(string(data), "\n---\n") {
			u := &unstructured.Unstructured{}
			require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object))
			var obj runtime.Object
			switch u.GetKind() {
			case "":
				continue // the comment before the first document
			case "Node":
				obj = &corev1.Node{}
			case "Pod":
				obj = &corev1.Pod{}
			case "DeviceClass":
				obj = &resourcev1.DeviceClass{}
			case "ResourceSlice":
				obj = &resourcev1.ResourceSlice{}
			case "ResourceClaim":
				obj = &resourcev1.ResourceClaim{}
			case "ResourceClaimTemplate":
				obj = &resourcev1.ResourceClaimTemplate{}
			default:
				out = append(out, u)
				continue
			}
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj))
			out = append(out, obj)
		}
	}
	return out
}

// withoutKind writes a copy of a multi-document dump without the
// documents of kind.
func withoutKind(t *testing.T, path, kind string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var keep []string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		if !strings.Contains(doc, "\nkind: "+kind+"\n") {
			keep = append(keep, doc)
		}
	}
	out := filepath.Join(t.TempDir(), filepath.Base(path))
	require.NoError(t, os.WriteFile(out, []byte(strings.Join(keep, "\n---\n")), 0o600))
	return out
}

// A pod asking nvidia.com/gpu: 1, served through DRA by the DeviceClass
// that maps it: diagnose pod judges it from the claim the scheduler made
// for it (status.extendedResourceClaimStatus).
func TestDiagnoseDRAExtendedResourcePodLive(t *testing.T) {
	node := "dgx-h100-0"
	slice := clustertest.GPUSlice(node,
		clustertest.DRAGPU{UUID: "GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c", Product: "NVIDIA H100 80GB HBM3", Driver: "580.126.20", MemoryGiB: 80},
		clustertest.DRAGPU{UUID: "GPU-7c9b5a3e-2f1d-4b8e-9a6c-3d2e1f0a9b8c", Product: "NVIDIA H100 80GB HBM3", Driver: "580.126.20", MemoryGiB: 80})
	pod := clustertest.MakePod("trainer", "ml").Request("nvidia.com/gpu", "1").Node(node).Phase(corev1.PodPending).Obj()
	pod.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{
		ResourceClaimName: "trainer-extended-resources-8xk2p",
		RequestMappings:   []corev1.ContainerExtendedResourceRequest{{ContainerName: "main", ResourceName: "nvidia.com/gpu", RequestName: "container-0-request-0"}},
	}
	claim := &resourcev1.ResourceClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "trainer-extended-resources-8xk2p"},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Request: "container-0-request-0", Driver: clustertest.NVIDIADRADriver, Pool: node, Device: "gpu-1"}},
		}}},
	}
	l, _ := fakeLive(t, clustertest.MakeNode(node).Obj(), clustertest.DeviceClass("gpu.nvidia.com", "nvidia.com/gpu"), slice, pod, claim)
	useLive(t, l)

	code, out, errOut := run(t, nil, "diagnose", "pod", "ml/trainer", "-o", "json")
	require.Equal(t, verdict.ExitPass, code, errOut)
	r := decodeReport(t, out)
	require.Equal(t, verdict.VerdictPass, r.Verdict)
	require.Equal(t, "Pod ml/trainer on dgx-h100-0: 1 device(s) from its DRA allocation", r.Subject)
	require.Len(t, r.Devices, 1)
	require.Equal(t, "GPU-7c9b5a3e-2f1d-4b8e-9a6c-3d2e1f0a9b8c", r.Devices[0].ID)
	require.Equal(t, "gpu", r.Devices[0].Kind)
	require.Equal(t, "gpu.nvidia.com/dgx-h100-0/gpu-1", r.Devices[0].DRA)

	// The claim not made yet: what the pod waits for.
	l, _ = fakeLive(t, clustertest.MakeNode(node).Obj(), clustertest.DeviceClass("gpu.nvidia.com", "nvidia.com/gpu"), slice, pod)
	useLive(t, l)
	code, out, errOut = run(t, nil, "diagnose", "pod", "ml/trainer", "-o", "json")
	require.Equal(t, verdict.ExitPass, code, errOut)
	r = decodeReport(t, out)
	require.Equal(t, []string{verdict.RuleDRANotJudged}, r.RuleIDs())
	require.Contains(t, r.Findings[0].Message, "DRA resource claims (trainer-extended-resources-8xk2p (for its extended resources)): ResourceClaim ml/trainer-extended-resources-8xk2p is not seen yet.")
}
