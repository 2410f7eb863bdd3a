package webhook

import (
	"github.com/rankgate/rankgate/integrations/kubeflow/pytorchjob"

	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
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
	var obj map[string]any
	require.NoError(t, json.Unmarshal([]byte(job), &obj))
	changed, err := m.Mutate(obj, pytorchjob.Kind)
	require.NoError(t, err)
	require.True(t, changed)

	master := podSpec(t, obj, "Master")
	require.Len(t, master.InitContainers, 1)
	ic := master.InitContainers[0]
	require.Equal(t, InitName, ic.Name)
	require.Equal(t, "ghcr.io/rankgate/rankgate:v1.2.3", ic.Image)
	require.Equal(t, []string{NodeBinary}, ic.Command)
	require.Equal(t, []string{"init", "--gate-url=https://rankgate-gate.rankgate-system.svc:443", "--ca-file=/var/run/rankgate/ca.crt",
		"--token-file=/var/run/secrets/rankgate/token", "--termination-log=/dev/termination-log", "--timeout=20m0s"}, ic.Args)
	require.Equal(t, "8", ic.Resources.Limits.Name("nvidia.com/gpu", "").String())
	require.NotContains(t, ic.Resources.Limits, corev1.ResourceCPU, "only the GPU resources are copied")
	var env []string
	for _, e := range ic.Env {
		env = append(env, e.Name+"="+e.ValueFrom.FieldRef.FieldPath)
	}
	require.Equal(t, []string{"POD_NAME=metadata.name", "POD_NAMESPACE=metadata.namespace", "NODE_NAME=spec.nodeName"}, env)
	require.Len(t, master.Volumes, 2)
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
	changed, err = m.Mutate(obj, pytorchjob.Kind)
	require.NoError(t, err)
	require.False(t, changed, "second pass")
	after, _ := json.Marshal(obj)
	require.JSONEq(t, string(before), string(after))
}

func TestMutateLeavesHandWrittenInitAndOptedOut(t *testing.T) {
	m := newMutator(t)
	hand := strings.Replace(job, `[{"name":"setup","image":"s"}]`, `[{"name":"gate","image":"s","command":["/usr/local/bin/rankgate-node"],"args":["init","--gate-url=https://x"]}]`, 1)
	var obj map[string]any
	require.NoError(t, json.Unmarshal([]byte(hand), &obj))
	_, err := m.Mutate(obj, pytorchjob.Kind)
	require.NoError(t, err)
	require.Len(t, podSpec(t, obj, "Worker").InitContainers, 1, "a hand-written rankgate init is left as it is")
	require.Len(t, podSpec(t, obj, "Master").InitContainers, 1)

	out := strings.Replace(job, `"annotations":{`, `"labels":{"rankgate.io/gate":"disabled"},"annotations":{`, 1)
	require.NoError(t, json.Unmarshal([]byte(out), &obj))
	changed, err := m.Mutate(obj, pytorchjob.Kind)
	require.NoError(t, err)
	require.False(t, changed)
}

func TestHandlePatchesOnlyWhatItAdds(t *testing.T) {
	m := newMutator(t)
	var ensured []string
	m.o.EnsureCA = func(_ context.Context, ns string) error { ensured = append(ensured, ns); return nil }
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
