package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
)

var (
	jobSetKind   = metav1.GroupVersionKind{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"}
	trainJobKind = metav1.GroupVersionKind{Group: "trainer.kubeflow.org", Version: "v1alpha1", Kind: "TrainJob"}
)

// A JobSet as the Trainer makes it from the torch-distributed runtime: a
// model initializer (no rank) and the node step. The node template has
// no metadata at all, the initializer's has labels.
const trainerJobSet = `{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"fine-tune","namespace":"ml"},
"spec":{"replicatedJobs":[
 {"name":"model-initializer","replicas":1,"template":{"metadata":{"labels":{"trainer.kubeflow.org/trainjob-ancestor-step":"model-initializer"}},
  "spec":{"template":{"metadata":{"labels":{"app":"init"}},"spec":{"containers":[{"name":"model-initializer","image":"i","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}}}},
 {"name":"node","replicas":1,"template":{"metadata":{"labels":{"trainer.kubeflow.org/trainjob-ancestor-step":"trainer"}},
  "spec":{"parallelism":2,"completions":2,"completionMode":"Indexed","template":{"spec":{"containers":[{"name":"node","image":"t","resources":{"limits":{"nvidia.com/mig-1g.10gb":"1"}}}]}}}}}]}}`

// jobSetPod is the pod template of ReplicatedJob i.
func jobSetPod(t *testing.T, obj map[string]any, i int) corev1.PodTemplateSpec {
	t.Helper()
	rj := obj["spec"].(map[string]any)["replicatedJobs"].([]any)[i].(map[string]any)
	pt := rj["template"].(map[string]any)["spec"].(map[string]any)["template"].(map[string]any)
	var out corev1.PodTemplateSpec
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(pt, &out))
	return out
}

// The rank template of a JobSet gets the label that sends its pods to the
// Pod webhook and the job-name label the controller's pod cache selects,
// but no init container (the pods get it when they are made); the
// initializer, no rank, gets nothing even with a GPU. A second pass adds
// nothing.
func TestMutateJobSetGatesRankTemplatesOnly(t *testing.T) {
	m := newMutator(t)
	obj, changed := mutate(t, m, jobSetKind, []byte(trainerJobSet))
	require.True(t, changed)
	node := jobSetPod(t, obj, 1)
	require.Empty(t, node.Spec.InitContainers)
	require.Empty(t, node.Spec.Volumes)
	require.Equal(t, map[string]string{"training.kubeflow.org/job-name": "fine-tune", "rankgate.io/inject": "rank-init"}, node.Labels)
	require.Empty(t, node.Annotations, "no gang timeout of its own")
	init := jobSetPod(t, obj, 0)
	require.Empty(t, init.Spec.InitContainers)
	require.Equal(t, map[string]string{"app": "init"}, init.Labels)

	before, _ := json.Marshal(obj)
	after, changed := mutate(t, m, jobSetKind, before)
	require.False(t, changed, "second pass")
	require.Equal(t, obj, after)
}

// Labels are added beside those a template has, and beside its other
// metadata.
func TestMutateJobSetLabelsKeepTemplateMetadata(t *testing.T) {
	for name, meta := range map[string]string{
		"labels":      `{"labels":{"app":"x"}}`,
		"annotations": `{"annotations":{"a":"b"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			raw := `{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"js","namespace":"ml"},"spec":{"replicatedJobs":[
 {"name":"workers","replicas":2,"template":{"spec":{"template":{"metadata":` + meta + `,"spec":{"containers":[{"name":"c","image":"t","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}}}}]}}`
			obj, changed := mutate(t, newMutator(t), jobSetKind, []byte(raw))
			require.True(t, changed)
			pt := jobSetPod(t, obj, 0)
			require.Equal(t, "js", pt.Labels["training.kubeflow.org/job-name"])
			require.Equal(t, "rank-init", pt.Labels["rankgate.io/inject"])
			if name == "labels" {
				require.Equal(t, "x", pt.Labels["app"])
			} else {
				require.Equal(t, "b", pt.Annotations["a"])
			}
		})
	}
}

// A TrainJob holds no templates: it gets the runtime patch that carries
// the opt-in to its JobSet, beside the patches others wrote, once.
func TestMutateTrainJobPropagatesOptIn(t *testing.T) {
	raw := `{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"fine-tune","namespace":"ml","labels":{"rankgate.io/gate":"enabled"}},
"spec":{"runtimeRef":{"name":"torch-distributed"},"trainer":{"numNodes":2},
 "runtimePatches":[{"manager":"kueue.x-k8s.io/manager","trainingRuntimeSpec":{"template":{"metadata":{"labels":{"kueue.x-k8s.io/podset":"node"}}}}}]}}`
	m := newMutator(t)
	obj, changed := mutate(t, m, trainJobKind, []byte(raw))
	require.True(t, changed)
	patches := obj["spec"].(map[string]any)["runtimePatches"].([]any)
	require.Len(t, patches, 2)
	require.Equal(t, "kueue.x-k8s.io/manager", patches[0].(map[string]any)["manager"])
	require.Equal(t, map[string]any{"manager": "rankgate.io/webhook", "trainingRuntimeSpec": map[string]any{"template": map[string]any{"metadata": map[string]any{
		"labels": map[string]any{"rankgate.io/gate": "enabled"}}}}}, patches[1])
	before, _ := json.Marshal(obj)
	_, changed = mutate(t, m, trainJobKind, before)
	require.False(t, changed, "second pass")

	noPatches := `{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"t","namespace":"ml"},"spec":{"runtimeRef":{"name":"torch-distributed"}}}`
	obj, changed = mutate(t, m, trainJobKind, []byte(noPatches))
	require.True(t, changed)
	require.Len(t, obj["spec"].(map[string]any)["runtimePatches"].([]any), 1)

	optedOut := `{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"t","namespace":"ml","labels":{"rankgate.io/gate":"disabled"}},"spec":{"runtimeRef":{"name":"torch-distributed"}}}`
	_, changed = mutate(t, m, trainJobKind, []byte(optedOut))
	require.False(t, changed)
}

// A rank template whose init container was written by hand (a
// TrainingRuntime that carries it) keeps it, and still gets the job-name
// label; a second pass adds nothing.
func TestMutateJobSetHandWrittenInitGetsTheLabel(t *testing.T) {
	raw := `{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"js","namespace":"ml"},"spec":{"replicatedJobs":[
 {"name":"node","replicas":1,"template":{"spec":{"template":{"spec":{"initContainers":[{"name":"rankgate-init","image":"r"}],
 "containers":[{"name":"node","image":"t","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}}}}]}}`
	m := newMutator(t)
	obj, changed := mutate(t, m, jobSetKind, []byte(raw))
	require.True(t, changed)
	pt := jobSetPod(t, obj, 0)
	require.Equal(t, "js", pt.Labels["training.kubeflow.org/job-name"])
	require.Len(t, pt.Spec.InitContainers, 1)
	require.Equal(t, "r", pt.Spec.InitContainers[0].Image, "the hand-written init container is kept")
	require.NotContains(t, pt.Labels, "rankgate.io/inject", "its pods need no other")
	before, _ := json.Marshal(obj)
	_, changed = mutate(t, m, jobSetKind, before)
	require.False(t, changed)
}

// A TrainJob gated without spec.trainer.numNodes is admitted and patched,
// with a warning that its ranks cannot be numbered; one with numNodes gets
// no warning.
func TestHandleWarnsOfTrainJobWithoutNumNodes(t *testing.T) {
	m := newMutator(t)
	handle := func(raw string) admission.Response {
		return m.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: admissionv1.Create, Namespace: "ml", Kind: trainJobKind, Object: runtime.RawExtension{Raw: []byte(raw)}}})
	}
	resp := handle(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"t","namespace":"ml"},"spec":{"runtimeRef":{"name":"torch-distributed"}}}`)
	require.True(t, resp.Allowed)
	require.NotEmpty(t, resp.Patches)
	require.Len(t, resp.Warnings, 1)
	require.Contains(t, resp.Warnings[0], "rankgate: the gate cannot number this TrainJob's ranks: spec.trainer.numNodes is not set")
	resp = handle(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"t","namespace":"ml"},"spec":{"runtimeRef":{"name":"torch-distributed"},"trainer":{"numNodes":2}}}`)
	require.True(t, resp.Allowed)
	require.Empty(t, resp.Warnings)
}

// A TrainJob whose runtime runs its MPI launcher as a node carries that
// in the webhook's runtime patch (read once, at its creation); a runtime
// that cannot be read is a warning, and the TrainJob is still gated; a
// TrainJob opted out is not looked at.
func TestHandleRecordsLauncherAsNode(t *testing.T) {
	var asked []trainjob.RuntimeKey
	runtimes := map[string]*trainjob.Runtime{
		"deepspeed-distributed": {Spec: trainjob.RuntimeSpec{MLPolicy: &trainjob.MLPolicy{MPI: &trainjob.MPIPolicy{RunLauncherAsNode: ptr.To(true)}}}},
		"torch-distributed":     {Spec: trainjob.RuntimeSpec{MLPolicy: &trainjob.MLPolicy{}}},
	}
	m, err := NewMutator(Options{Image: "i", GateURL: "https://g:443", RuntimeOf: func(_ context.Context, k trainjob.RuntimeKey) (*trainjob.Runtime, error) {
		asked = append(asked, k)
		if rt, ok := runtimes[k.Name]; ok {
			return rt, nil
		}
		return nil, errors.New(k.String() + ": not found")
	}})
	require.NoError(t, err)
	handle := func(rtName, labels string) (admission.Response, map[string]any) {
		raw := `{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"t","namespace":"ml"` + labels + `},"spec":{"runtimeRef":{"name":"` + rtName + `"},"trainer":{"numNodes":3}}}`
		resp := m.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Operation: admissionv1.Create, Namespace: "ml", Kind: trainJobKind, Object: runtime.RawExtension{Raw: []byte(raw)}}})
		for _, op := range resp.Patches {
			if op.Path == "/spec/runtimePatches" {
				b, _ := json.Marshal(op.Value)
				var patches []map[string]any
				require.NoError(t, json.Unmarshal(b, &patches))
				return resp, patches[0]["trainingRuntimeSpec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["labels"].(map[string]any)
			}
		}
		return resp, nil
	}
	resp, labels := handle("deepspeed-distributed", "")
	require.Empty(t, resp.Warnings)
	require.Equal(t, map[string]any{"rankgate.io/gate": "enabled", "rankgate.io/mpi-launcher-is-node": "true"}, labels)
	require.Equal(t, []trainjob.RuntimeKey{{Kind: "ClusterTrainingRuntime", Name: "deepspeed-distributed"}}, asked)

	_, labels = handle("torch-distributed", "")
	require.Equal(t, map[string]any{"rankgate.io/gate": "enabled"}, labels)

	resp, labels = handle("gone", "")
	require.Equal(t, map[string]any{"rankgate.io/gate": "enabled"}, labels, "still gated")
	require.Len(t, resp.Warnings, 1)
	require.Contains(t, resp.Warnings[0], "cannot read the TrainJob's runtime: ClusterTrainingRuntime gone: not found")

	asked = nil
	resp, labels = handle("deepspeed-distributed", `,"labels":{"rankgate.io/gate":"disabled"}`)
	require.Nil(t, labels)
	require.Empty(t, resp.Patches)
	require.Empty(t, asked, "an opted-out TrainJob's runtime is not read")

	// One that carries the webhook's runtime patch already (applied again
	// from a dump) gets nothing, and its runtime is not read.
	resp = m.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: "ml", Kind: trainJobKind, Object: runtime.RawExtension{Raw: []byte(
			`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"t","namespace":"ml"},"spec":{"runtimeRef":{"name":"deepspeed-distributed"},"trainer":{"numNodes":3},` +
				`"runtimePatches":[{"manager":"rankgate.io/webhook","trainingRuntimeSpec":{"template":{"metadata":{"labels":{"rankgate.io/gate":"enabled","rankgate.io/mpi-launcher-is-node":"true"}}}}}]}}`)}}})
	require.True(t, resp.Allowed)
	require.Empty(t, resp.Patches)
	require.Empty(t, asked, "the runtime of a TrainJob that carries the webhook's patch is not read")
}
