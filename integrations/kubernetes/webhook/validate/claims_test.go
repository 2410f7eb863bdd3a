package validate_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/validate"
	"github.com/rankgate/rankgate/verdict"
)

// claimTemplate is a ResourceClaimTemplate in namespace ml with one
// request "gpu" of count devices of class, where the CEL selector (if
// any) holds; parent adds a matchAttribute constraint on the NVIDIA
// driver's parentUUID.
func claimTemplate(name, class, expr string, count int64, parent bool) *resourcev1.ResourceClaimTemplate {
	t := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"}}
	t.Spec.Spec = claimSpec(class, expr, count, parent)
	return t
}

func claimSpec(class, expr string, count int64, parent bool) resourcev1.ResourceClaimSpec {
	e := &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count}
	if expr != "" {
		e.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: expr}}}
	}
	s := resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: e}}}}
	if parent {
		s.Devices.Constraints = []resourcev1.DeviceConstraint{{MatchAttribute: ptr.To(resourcev1.FullyQualifiedName("gpu.nvidia.com/parentUUID"))}}
	}
	return s
}

// firstAvailable is a template whose request "gpu" takes one device of
// the first class that has a matching one (the B200 selector on
// gpu.nvidia.com).
func firstAvailable(name string, classes ...string) *resourcev1.ResourceClaimTemplate {
	t := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"}}
	r := resourcev1.DeviceRequest{Name: "gpu"}
	for i, c := range classes {
		sub := resourcev1.DeviceSubRequest{Name: fmt.Sprintf("alt%d", i), DeviceClassName: c, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}
		if c == "gpu.nvidia.com" {
			sub.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"}}}
		}
		r.FirstAvailable = append(r.FirstAvailable, sub)
	}
	t.Spec.Spec.Devices.Requests = []resourcev1.DeviceRequest{r}
	return t
}

// fromTemplate gives every pod its own claim "gpu" from template name;
// fromClaim has the pods share ResourceClaim name.
func fromTemplate(name string) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) {
		s.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(name)}}
		s.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	}
}

func fromClaim(name string) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) {
		s.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name)}}
		s.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	}
}

const (
	profile1g  = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
	gpuA       = "GPU-4b9a1e6c-2d7f-3a58-9c41-7e0d5b2f8a13"
	gpuB       = "GPU-8d116ece-1738-47d9-bd9c-172411e20b8f"
	pinnedToA  = "device.attributes['gpu.nvidia.com'].parentUUID == '" + gpuA + "'"
	wrongDomai = "device.attributes['nvidia.com'].profile == '1g.10gb'"
)

// claimCluster: node dgx-0 has two H100s split into three 1g.10gb MIG
// devices each (GPUs A and B), node dgx-1 two full H100s; the NVIDIA
// driver's DeviceClasses; claim templates and a shared claim in ml.
func claimCluster() (validate.NodeSource, validate.DeviceClassSource, *validate.DRAObjects) {
	migs := func(uuid, prefix string) clustertest.DRAMIGGPU {
		g := clustertest.DRAMIGGPU{UUID: uuid, Product: "NVIDIA H100 80GB HBM3", Driver: "580.126.20"}
		for _, s := range []string{"1", "2", "3"} {
			g.MIG = append(g.MIG, clustertest.DRAMIG{UUID: "MIG-" + prefix + s, Profile: "1g.10gb", SMs: 16, MemoryMiB: 9984})
		}
		return g
	}
	full := clustertest.DRAGPU{Product: "NVIDIA H100 80GB HBM3", Driver: "580.126.20", MemoryGiB: 80}
	full1, full2 := full, full
	full1.UUID, full2.UUID = "GPU-full-1", "GPU-full-2"
	o := &validate.DRAObjects{
		Slices: []*resourcev1.ResourceSlice{clustertest.MIGSlice("dgx-0", migs(gpuA, "a"), migs(gpuB, "b")), clustertest.GPUSlice("dgx-1", full1, full2)},
		Templates: []*resourcev1.ResourceClaimTemplate{
			claimTemplate("mig-1g", "mig.nvidia.com", profile1g, 1, false),
			claimTemplate("mig-1g-x2", "mig.nvidia.com", profile1g, 2, false),
			claimTemplate("mig-1g-x2-one-gpu", "mig.nvidia.com", profile1g, 2, true),
			claimTemplate("mig-on-a", "mig.nvidia.com", pinnedToA, 1, false),
			claimTemplate("full", "gpu.nvidia.com", "", 1, false),
			claimTemplate("b200", "gpu.nvidia.com", "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'", 1, false),
			claimTemplate("typo-class", "mig.nvidia.co", profile1g, 1, false),
			claimTemplate("wrong-domain", "mig.nvidia.com", wrongDomai, 1, false),
			claimTemplate("mig-7g", "mig.nvidia.com", "device.attributes['gpu.nvidia.com'].profile == '7g.80gb'", 1, false),
			firstAvailable("typo-then-mig", "mig.nvidia.co", "mig.nvidia.com"),
			firstAvailable("typo-then-b200", "mig.nvidia.co", "gpu.nvidia.com"),
			func() *resourcev1.ResourceClaimTemplate {
				t := claimTemplate("all-mig", "mig.nvidia.com", profile1g, 0, false)
				t.Spec.Spec.Devices.Requests[0].Exactly.AllocationMode = resourcev1.DeviceAllocationModeAll
				return t
			}(),
			// Another namespace's template of the same name is not the job's.
			func() *resourcev1.ResourceClaimTemplate {
				t := claimTemplate("elsewhere", "mig.nvidia.com", profile1g, 1, false)
				t.Namespace = "other"
				return t
			}(),
		},
		Claims: []*resourcev1.ResourceClaim{
			{ObjectMeta: metav1.ObjectMeta{Name: "shared-3", Namespace: "ml"}, Spec: claimSpec("mig.nvidia.com", profile1g, 3, true)},
			{ObjectMeta: metav1.ObjectMeta{Name: "shared-3-loose", Namespace: "ml"}, Spec: claimSpec("mig.nvidia.com", profile1g, 3, false)},
		},
	}
	ns := nodes(gpuNode("dgx-0", nil, nil), gpuNode("dgx-1", nil, nil))
	return ns, classes(clustertest.DeviceClass("gpu.nvidia.com", ""), clustertest.MIGClass()), o
}

// The claim checks on the real CEL of the scheduler: which claims can
// keep a multi-rank MIG job on one physical GPU, which requests match no
// published device or name no DeviceClass, and what cannot be known at
// admission (a template created after the job).
func TestHandleLintsClaims(t *testing.T) {
	ns, dcs, objs := claimCluster()
	known := func(context.Context) (*validate.DRAObjects, error) { return objs, nil }
	pytorch := func(workers int32, master bool, f func(*corev1.PodSpec)) runtime.Object {
		w := kubeflowtest.MakePyTorchJob("llm", "ml").Workers(workers)
		if master {
			w = w.Master()
		}
		return w.PodSpec(f).PodSpec(nccl231).Obj()
	}
	mpi := func() runtime.Object {
		j := kubeflowtest.MakeMPIJob("llm", "ml").Workers(2).Obj()
		for rt, rs := range j.Spec.MPIReplicaSpecs {
			if rt == "Worker" {
				fromTemplate("mig-1g")(&rs.Template.Spec)
				nccl231(&rs.Template.Spec)
			}
		}
		return j
	}
	// A JobSet judged as the webhook judges its pod templates: 2 Jobs of
	// 2 indexed pods, each pod with its own claim.
	jobSet := func() runtime.Object {
		r := jobsetapi.ReplicatedJob{Name: "node", Replicas: 2}
		r.Template.Spec.Completions, r.Template.Spec.Parallelism = ptr.To(int32(2)), ptr.To(int32(2))
		r.Template.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
		r.Template.Spec.Template.Spec.Containers = []corev1.Container{{Name: "node", Image: "pytorch"}}
		fromTemplate("mig-1g")(&r.Template.Spec.Template.Spec)
		return &jobsetapi.JobSet{TypeMeta: metav1.TypeMeta{APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet"},
			ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ml"}, Spec: jobsetapi.JobSetSpec{ReplicatedJobs: []jobsetapi.ReplicatedJob{r}}}
	}
	deny := func(ids ...string) map[string]validate.Policy {
		m := map[string]validate.Policy{}
		for _, id := range ids {
			m[id] = validate.Deny
		}
		return m
	}
	tests := []struct {
		name     string
		obj      runtime.Object
		objects  validate.DRAObjectSource
		policies map[string]validate.Policy
		allowed  bool
		// warn, deny: substrings of the warnings and of the denial;
		// quiet: no warning starts with these rule IDs.
		warn, deny, quiet []string
	}{
		{name: "a claim per pod from a template: MIG ranks may span GPUs", obj: pytorch(3, true, fromTemplate("mig-1g")), allowed: true,
			warn: []string{"DRA_MIG_MAY_SPAN_GPUS: 4 MIG devices in 4 claims (claim gpu from ResourceClaimTemplate ml/mig-1g per pod of Master (1 pod), Worker (3 pods)): nothing keeps", "Fix: one claim with matchAttribute gpu.nvidia.com/parentUUID for all MIG ranks, or full GPUs"}},
		{name: "the same, denied where the policy says deny", obj: pytorch(3, true, fromTemplate("mig-1g")), policies: deny(verdict.RuleDRAMIGMaySpanGPUs),
			deny: []string{"rankgate refused PyTorchJob ml/llm: DRA_MIG_MAY_SPAN_GPUS: 4 MIG devices in 4 claims", "nothing keeps the ranks on one physical GPU. A matchAttribute binds only its own claim's devices", "the gate fails the gang (GANG_MIG_SPANS_GPUS)", "Fix: "}},
		{name: "MPIJob workers, a claim each", obj: mpi(), allowed: true,
			warn: []string{"DRA_MIG_MAY_SPAN_GPUS: 2 MIG devices in 2 claims (claim gpu from ResourceClaimTemplate ml/mig-1g per pod of Worker (2 pods)): nothing keeps"}},
		{name: "JobSet pods, a claim each", obj: jobSet(), allowed: true,
			warn: []string{"DRA_MIG_MAY_SPAN_GPUS: 4 MIG devices in 4 claims (claim gpu from ResourceClaimTemplate ml/mig-1g per pod of node (4 pods)): nothing keeps"}},
		{name: "one pod, one claim of two MIG devices without matchAttribute", obj: pytorch(1, false, fromTemplate("mig-1g-x2")), allowed: true,
			warn: []string{"DRA_MIG_MAY_SPAN_GPUS: claim gpu from ResourceClaimTemplate ml/mig-1g-x2 asks 2 MIG devices without a matchAttribute on parentUUID: nothing keeps"}},
		{name: "one pod, one claim with matchAttribute on parentUUID: kept", obj: pytorch(1, false, fromTemplate("mig-1g-x2-one-gpu")), allowed: true,
			quiet: []string{"DRA_"}},
		{name: "ranks sharing one claim with matchAttribute on parentUUID: kept", obj: pytorch(2, true, fromClaim("shared-3")), allowed: true,
			quiet: []string{"DRA_"}},
		{name: "ranks sharing one claim of three MIG devices without matchAttribute", obj: pytorch(2, true, fromClaim("shared-3-loose")), allowed: true,
			warn: []string{"DRA_MIG_MAY_SPAN_GPUS: shared ResourceClaim ml/shared-3-loose asks 3 MIG devices without a matchAttribute on parentUUID: nothing keeps"}},
		{name: "a claim per pod whose selector pins one GPU: every match is on it", obj: pytorch(2, false, fromTemplate("mig-on-a")), allowed: true,
			quiet: []string{"DRA_"}},
		{name: "one pod with one MIG device: not multi-rank", obj: pytorch(1, false, fromTemplate("mig-1g")), allowed: true,
			quiet: []string{"DRA_"}},
		{name: "full GPUs, a claim per pod: not MIG", obj: pytorch(3, true, fromTemplate("full")), allowed: true,
			quiet: []string{"DRA_"}},
		{name: "a DeviceClass the cluster does not have", obj: pytorch(1, false, fromTemplate("typo-class")), allowed: true,
			warn: []string{"DRA_CLAIM_UNMATCHED: ResourceClaimTemplate ml/typo-class request gpu names DeviceClass mig.nvidia.co, which does not exist", "Fix: correct the DeviceClass or selectors"}},
		{name: "a DeviceClass the cluster does not have, denied where the policy says deny", obj: pytorch(1, false, fromTemplate("typo-class")),
			policies: deny(verdict.RuleDRAClaimUnmatched), deny: []string{"DRA_CLAIM_UNMATCHED: ResourceClaimTemplate ml/typo-class request gpu names DeviceClass mig.nvidia.co, which does not exist; the scheduler cannot allocate it (Worker pods' claim gpu). Fix: correct the DeviceClass or selectors (kubectl get deviceclasses; kubectl get resourceslices -o yaml)"}},
		{name: "a full GPU no published device is: warned, left to the autoscaler by the placement check", obj: pytorch(1, false, fromTemplate("b200")), allowed: true,
			warn: []string{"DRA_CLAIM_UNMATCHED: ResourceClaimTemplate ml/b200 request gpu matches none of the 2 published devices of DeviceClass gpu.nvidia.com: selectors"}},
		{name: "a selector on an attribute domain no device has: the CEL error is named", obj: pytorch(1, false, fromTemplate("wrong-domain")), allowed: true,
			warn: []string{"DRA_CLAIM_UNMATCHED: ResourceClaimTemplate ml/wrong-domain request gpu matches none of the 6 published devices of DeviceClass mig.nvidia.com"}},
		{name: "the same, denied: the whole message", obj: pytorch(1, false, fromTemplate("wrong-domain")), policies: deny(verdict.RuleDRAClaimUnmatched),
			deny: []string{"request gpu matches none of the 6 published devices of DeviceClass mig.nvidia.com: selectors " + wrongDomai + " (", "no such key"}},
		{name: "a MIG profile no device is: SHAPE_MISMATCH refuses it, the claim check does not repeat it", obj: pytorch(1, false, fromTemplate("mig-7g")),
			deny: []string{"SHAPE_MISMATCH: "}, quiet: []string{"DRA_CLAIM_UNMATCHED"}},
		{name: "the same with SHAPE_MISMATCH off: the claim check says it", obj: pytorch(1, false, fromTemplate("mig-7g")), policies: map[string]validate.Policy{verdict.RuleShapeMismatch: validate.Off},
			allowed: true, warn: []string{"DRA_CLAIM_UNMATCHED: ResourceClaimTemplate ml/mig-7g request gpu matches none of the 6 published devices of DeviceClass mig.nvidia.com"}},
		{name: "firstAvailable: a missing class first, then a MIG class: matched, and MIG per pod", obj: pytorch(2, false, fromTemplate("typo-then-mig")), allowed: true,
			warn: []string{"DRA_MIG_MAY_SPAN_GPUS: 2 MIG devices in 2 claims"}, quiet: []string{"DRA_CLAIM_UNMATCHED"}},
		{name: "firstAvailable: no alternative matches: each one says why", obj: pytorch(1, false, fromTemplate("typo-then-b200")), policies: deny(verdict.RuleDRAClaimUnmatched),
			deny: []string{"ResourceClaimTemplate ml/typo-then-b200 request gpu names DeviceClass mig.nvidia.co, which does not exist; and matches none of the 2 published devices of DeviceClass gpu.nvidia.com: selectors"}},
		{name: "one claim for all matching MIG devices, no matchAttribute", obj: pytorch(1, false, fromTemplate("all-mig")), allowed: true,
			warn: []string{"DRA_MIG_MAY_SPAN_GPUS: claim gpu from ResourceClaimTemplate ml/all-mig asks several MIG devices without a matchAttribute on parentUUID"}},
		{name: "a template that does not exist (yet): a warning, never a denial", obj: pytorch(3, true, fromTemplate("later")),
			policies: deny(verdict.RuleDRAClaimUnmatched, verdict.RuleDRAMIGMaySpanGPUs), allowed: true,
			warn: []string{"DRA_NOT_JUDGED: ResourceClaimTemplate ml/later (claim gpu of Master pods, claim gpu of Worker pods) does not exist yet: its requests are not checked", "Fix: create it in the job's namespace"}},
		{name: "another namespace's template is not the job's", obj: pytorch(1, false, fromTemplate("elsewhere")), allowed: true,
			warn: []string{"DRA_NOT_JUDGED: ResourceClaimTemplate ml/elsewhere (claim gpu of Worker pods) does not exist yet"}},
		{name: "both checks off: nothing said", obj: pytorch(3, true, fromTemplate("later")), allowed: true,
			policies: map[string]validate.Policy{verdict.RuleDRAClaimUnmatched: validate.Off, verdict.RuleDRAMIGMaySpanGPUs: validate.Off}, quiet: []string{"DRA_"}},
		{name: "DRA objects not known: nothing said", obj: pytorch(3, true, fromTemplate("mig-1g")), allowed: true,
			objects: func(context.Context) (*validate.DRAObjects, error) { return nil, nil }, quiet: []string{"DRA_"}},
		{name: "DRA objects cannot be read: skipped with a note", obj: pytorch(3, true, fromTemplate("mig-1g")), allowed: true,
			objects: func(context.Context) (*validate.DRAObjects, error) { return nil, errors.New("cache not synced") },
			warn:    []string{"rankgate: claim checks (DRA_CLAIM_UNMATCHED, DRA_MIG_MAY_SPAN_GPUS) skipped: cache not synced"}, quiet: []string{"DRA_"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.objects
			if src == nil {
				src = known
			}
			h := validate.NewHandler(validate.Options{Nodes: ns, DeviceClasses: dcs, DRAObjects: src, Policies: tc.policies})
			resp := h.Handle(context.Background(), request(t, tc.obj, admissionv1.Create))
			msg := ""
			if resp.Result != nil {
				msg = resp.Result.Message
			}
			t.Logf("message %q, warnings %q", msg, resp.Warnings)
			require.Equal(t, tc.allowed, resp.Allowed, "message %q, warnings %q", msg, resp.Warnings)
			for _, s := range tc.deny {
				require.Contains(t, msg, s)
			}
			warnings := strings.Join(resp.Warnings, "\n")
			for _, s := range tc.warn {
				require.Contains(t, warnings, s)
			}
			for _, w := range resp.Warnings {
				require.LessOrEqual(t, len(w), 256, w)
				for _, q := range tc.quiet {
					require.False(t, strings.HasPrefix(w, q), "unexpected warning %q", w)
				}
			}
		})
	}
}
