package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/review"
)

const job = `{"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob","metadata":{"name":"j","namespace":"ml","annotations":{"rankgate.io/gang-timeout":"15m"},"x-unknown":1},
"spec":{"pytorchReplicaSpecs":{
 "Master":{"replicas":1,"template":{"spec":{"containers":[{"name":"pytorch","image":"t","resources":{"limits":{"nvidia.com/gpu":"8","cpu":"4"}}}]}}},
 "Worker":{"replicas":2,"template":{"spec":{"initContainers":[{"name":"setup","image":"s"}],"containers":[{"name":"pytorch","image":"t","resources":{"limits":{"nvidia.com/mig-3g.40gb":"1"}}}],"volumes":[{"name":"data","emptyDir":{}}]}}},
 "Cpu":{"replicas":1,"template":{"spec":{"containers":[{"name":"c","image":"t"}]}}}}}}`

func newMutator(t *testing.T) *Mutator {
	m, err := NewMutator(Options{Image: "ghcr.io/rankgate/rankgate:v1.2.3", GateURL: "https://rankgate-gate.rankgate-system.svc:443"})
	require.NoError(t, err)
	return m
}

var (
	pytorchKind = metav1.GroupVersionKind{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"}
	mpiKind     = metav1.GroupVersionKind{Group: "kubeflow.org", Version: "v2beta1", Kind: "MPIJob"}
)

// mutate decodes raw as kind, applies the mutator's patch to raw itself
// (as the API server does) and returns the result and whether the patch
// had anything in it.
func mutate(t *testing.T, m *Mutator, kind metav1.GroupVersionKind, raw []byte) (map[string]any, bool) {
	t.Helper()
	j, err := review.DecodeJob(kind, "ml", raw)
	require.NoError(t, err)
	ops, err := m.Patch(j)
	require.NoError(t, err)
	out := raw
	if len(ops) > 0 {
		pj, err := json.Marshal(ops)
		require.NoError(t, err)
		p, err := jsonpatch.DecodePatch(pj)
		require.NoError(t, err)
		out, err = p.Apply(raw)
		require.NoError(t, err, "the patch applies to the object it was built from")
	}
	var obj map[string]any
	require.NoError(t, json.Unmarshal(out, &obj))
	return obj, len(ops) > 0
}

func podSpec(t *testing.T, obj map[string]any, rt string) corev1.PodSpec {
	t.Helper()
	return templateSpec(t, obj, "pytorchReplicaSpecs", rt)
}

// templateSpec is replica type rt's pod spec under spec.<field>.
func templateSpec(t *testing.T, obj map[string]any, field, rt string) corev1.PodSpec {
	t.Helper()
	ps := obj["spec"].(map[string]any)[field].(map[string]any)[rt].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	var out corev1.PodSpec
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(ps, &out))
	return out
}

func TestMutateInjectsIntoGPUTemplatesOnce(t *testing.T) {
	m := newMutator(t)
	obj, changed := mutate(t, m, pytorchKind, []byte(job))
	require.True(t, changed)

	master := podSpec(t, obj, "Master")
	require.Len(t, master.InitContainers, 1)
	ic := master.InitContainers[0]
	require.Equal(t, InitName, ic.Name)
	require.Equal(t, "ghcr.io/rankgate/rankgate:v1.2.3", ic.Image)
	require.Equal(t, []string{NodeBinary}, ic.Command)
	require.Equal(t, []string{"init", "--gate-url=https://rankgate-gate.rankgate-system.svc:443", "--ca-file=/var/run/rankgate/ca.crt",
		"--token-file=/var/run/secrets/rankgate/token", "--termination-log=/dev/termination-log", "--bypass-file=/etc/rankgate/podinfo/annotations", "--timeout=20m0s"}, ic.Args)
	require.Equal(t, "8", ic.Resources.Limits.Name("nvidia.com/gpu", "").String())
	cpu := ic.Resources.Limits[corev1.ResourceCPU]
	require.Equal(t, "100m", cpu.String(), "of the trainer's, only the GPU resources are copied; cpu is the init container's own")
	var env []string
	for _, e := range ic.Env {
		env = append(env, e.Name+"="+e.ValueFrom.FieldRef.FieldPath)
	}
	require.Equal(t, []string{"POD_NAME=metadata.name", "POD_NAMESPACE=metadata.namespace", "NODE_NAME=spec.nodeName"}, env)
	require.Len(t, master.Volumes, 3)
	require.Equal(t, "rankgate", master.Volumes[0].Projected.Sources[0].ServiceAccountToken.Audience)
	require.Equal(t, CAConfigMapName, master.Volumes[1].ConfigMap.Name)

	worker := podSpec(t, obj, "Worker")
	require.Equal(t, []string{InitName, "setup"}, []string{worker.InitContainers[0].Name, worker.InitContainers[1].Name}, "the gate runs first")
	require.Contains(t, worker.InitContainers[0].Args, "--expect-profile=3g.40gb")
	require.Equal(t, "1", worker.InitContainers[0].Resources.Limits.Name("nvidia.com/mig-3g.40gb", "").String())
	require.Equal(t, []string{"data", TokenVolume, CAVolume}, []string{worker.Volumes[0].Name, worker.Volumes[1].Name, worker.Volumes[2].Name})

	require.Empty(t, podSpec(t, obj, "Cpu").InitContainers, "no GPUs, no gate")
	require.EqualValues(t, 1, obj["metadata"].(map[string]any)["x-unknown"], "unknown fields survive")

	before, _ := json.Marshal(obj)
	after, changed := mutate(t, m, pytorchKind, before)
	require.False(t, changed, "second pass")
	require.Equal(t, obj, after)
}

func TestMutateLeavesHandWrittenInitAndOptedOut(t *testing.T) {
	m := newMutator(t)
	hand := strings.Replace(job, `[{"name":"setup","image":"s"}]`, `[{"name":"gate","image":"s","command":["/usr/local/bin/rankgate-node"],"args":["init","--gate-url=https://x"]}]`, 1)
	obj, _ := mutate(t, m, pytorchKind, []byte(hand))
	require.Len(t, podSpec(t, obj, "Worker").InitContainers, 1, "a hand-written rankgate init is left as it is")
	require.Len(t, podSpec(t, obj, "Master").InitContainers, 1)

	out := strings.Replace(job, `"annotations":{`, `"labels":{"rankgate.io/gate":"disabled"},"annotations":{`, 1)
	_, changed := mutate(t, m, pytorchKind, []byte(out))
	require.False(t, changed)
}

func TestHandlePatchesOnlyWhatItAdds(t *testing.T) {
	m := newMutator(t)
	var ensured []string
	m.o.EnsureCA = func(_ context.Context, ns string) error { ensured = append(ensured, ns); return nil }
	m.o.OptedIn = func(_ context.Context, ns string) bool { return ns == "ml" }
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: "ml",
		Kind:   metav1.GroupVersionKind{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"},
		Object: runtime.RawExtension{Raw: []byte(job)}}}
	resp := m.Handle(context.Background(), req)
	require.True(t, resp.Allowed)
	require.NotEmpty(t, resp.Patches)
	for _, p := range resp.Patches {
		require.True(t, strings.HasSuffix(p.Path, "/initContainers") || strings.HasSuffix(p.Path, "/volumes") ||
			strings.Contains(p.Path, "/initContainers/") || strings.Contains(p.Path, "/volumes/"), p.Path)
	}
	require.Equal(t, []string{"ml"}, ensured)

	// The CA ConfigMap is made only where the controller's own view says
	// the namespace is opted in, and never on a dry run: a review names
	// any namespace its sender likes.
	ensured = nil
	sys := req
	sys.Namespace = "kube-system"
	sys.Object.Raw = []byte(strings.Replace(job, `"namespace":"ml"`, `"namespace":"kube-system","labels":{"rankgate.io/gate":"enabled"}`, 1))
	require.NotEmpty(t, m.Handle(context.Background(), sys).Patches, "mutated all the same")
	dry := req
	dry.DryRun = ptr.To(true)
	require.NotEmpty(t, m.Handle(context.Background(), dry).Patches)
	require.Empty(t, ensured, "no ConfigMap for kube-system (not opted in) nor on a dry run")

	req.Kind.Kind = "Deployment"
	resp = m.Handle(context.Background(), req)
	require.True(t, resp.Allowed)
	require.Empty(t, resp.Patches)
}

// An existing job is never mutated: an UPDATE (the controller's suspend,
// a person's label) of a job that has no init container (created before
// its namespace was opted in, or while the webhook was down) is answered
// with no patch, while the same object as a CREATE is mutated.
func TestHandleMutatesCreatesOnly(t *testing.T) {
	m := newMutator(t)
	req := func(op admissionv1.Operation) admission.Request {
		return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			UID: "1", Operation: op, Namespace: "ml", Name: "j",
			Kind:   metav1.GroupVersionKind{Group: "kubeflow.org", Version: "v1", Kind: "PyTorchJob"},
			Object: runtime.RawExtension{Raw: []byte(job)}, OldObject: runtime.RawExtension{Raw: []byte(job)},
		}}
	}
	create := m.Handle(context.Background(), req(admissionv1.Create))
	require.True(t, create.Allowed)
	require.NotEmpty(t, create.Patches, "a create is mutated")
	upd := m.Handle(context.Background(), req(admissionv1.Update))
	require.True(t, upd.Allowed)
	require.Empty(t, upd.Patches, "an update is never mutated")
	require.Nil(t, upd.PatchType)
}

// The patch only adds: fields the typed objects do not know, anywhere in
// the job, survive; empty, null and absent lists are all handled; replica
// type names are escaped in the patch's paths.
func TestPatchKeepsUnknownFields(t *testing.T) {
	m := newMutator(t)
	raw := `{"apiVersion":"kubeflow.org/v1","kind":"PyTorchJob","metadata":{"name":"j","x-meta":{"a":[1,2]}},"x-top":true,
"spec":{"x-spec":"s","pytorchReplicaSpecs":{
 "Master":{"x-rs":1,"template":{"x-tmpl":1,"spec":{"x-pod":{"k":"v"},"initContainers":null,"volumes":[],"containers":[{"name":"t","image":"t","x-c":[null],"resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}},
 "Odd/~Type":{"template":{"spec":{"initContainers":[{"name":"a","image":"a","x-ic":1}],"containers":[{"name":"t","image":"t","resources":{"limits":{"nvidia.com/gpu":"2"}}}]}}}}}}`
	obj, changed := mutate(t, m, pytorchKind, []byte(raw))
	require.True(t, changed)
	var want map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &want))
	// Take out what the webhook added; what is left is the original.
	specs := obj["spec"].(map[string]any)["pytorchReplicaSpecs"].(map[string]any)
	master := specs["Master"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	require.Len(t, master["initContainers"], 1)
	require.Len(t, master["volumes"], 3)
	master["initContainers"], master["volumes"] = nil, []any{}
	odd := specs["Odd/~Type"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	ics := odd["initContainers"].([]any)
	require.Equal(t, InitName, ics[0].(map[string]any)["name"])
	require.Len(t, odd["volumes"], 3)
	odd["initContainers"] = ics[1:]
	delete(odd, "volumes")
	require.Equal(t, want, obj)
}

// The injected init container passes Pod Security "restricted" and a
// ResourceQuota that demands cpu and memory requests and limits, keeps a
// Guaranteed pod Guaranteed (requests equal limits), and carries the
// trainer's GPU limits next to its own cpu and memory.
func TestInitContainerRestrictedAndBounded(t *testing.T) {
	m := newMutator(t)
	gpus := corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/mig-1g.10gb": resource.MustParse("1")}}
	c := m.initContainer(gpus, time.Minute)
	sc := c.SecurityContext
	require.NotNil(t, sc)
	require.Equal(t, ptr.To(false), sc.AllowPrivilegeEscalation)
	require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	require.Equal(t, ptr.To(true), sc.RunAsNonRoot)
	require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type)
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[name], c.Resources.Limits[name]
		require.False(t, req.IsZero(), "%s request", name)
		require.Zero(t, req.Cmp(lim), "%s: request equals limit", name)
	}
	require.Equal(t, "1", ptr.To(c.Resources.Limits["nvidia.com/mig-1g.10gb"]).String())
	require.Empty(t, gpus.Requests, "the trainer's resources are not changed")

	custom := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}
	m2, err := NewMutator(Options{Image: "img", GateURL: "https://gate:443", InitResources: &custom})
	require.NoError(t, err)
	c2 := m2.initContainer(corev1.ResourceRequirements{}, time.Minute)
	require.Equal(t, "256Mi", ptr.To(c2.Resources.Limits[corev1.ResourceMemory]).String())
	_, hasCPU := c2.Resources.Limits[corev1.ResourceCPU]
	require.False(t, hasCPU, "only what was configured")
}

func TestCheckInitResourcesRefuses(t *testing.T) {
	for name, r := range map[string]corev1.ResourceRequirements{
		"gpu":           {Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}},
		"zero":          {Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0")}},
		"request>limit": {Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}, Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Mi")}},
	} {
		require.Error(t, CheckInitResources(r), name)
		_, err := NewMutator(Options{Image: "img", GateURL: "https://gate:443", InitResources: &r})
		require.Error(t, err, name)
	}
	require.NoError(t, CheckInitResources(DefaultInitResources()))
}
