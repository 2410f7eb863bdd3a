package webhook

import (
	"context"
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/review"
)

var podGVK = metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}

// admitPod sends raw as a Pod create to the Pod handler and applies its
// patch to raw, as the API server does.
func admitPod(t *testing.T, m *Mutator, raw string) (admission.Response, *corev1.Pod) {
	t.Helper()
	resp, out := admitPodRaw(t, m, []byte(raw))
	pod := &corev1.Pod{}
	require.NoError(t, json.Unmarshal(out, pod))
	return resp, pod
}

// admitPodRaw: admitPod's answer and the patched bytes.
func admitPodRaw(t *testing.T, m *Mutator, raw []byte) (admission.Response, []byte) {
	t.Helper()
	resp := m.Pods().Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: "ml", Kind: podGVK, Object: runtime.RawExtension{Raw: raw}}})
	out := raw
	if len(resp.Patches) > 0 {
		pj, err := json.Marshal(resp.Patches)
		require.NoError(t, err)
		p, err := jsonpatch.DecodePatch(pj)
		require.NoError(t, err)
		out, err = p.Apply(out)
		require.NoError(t, err, "the patch applies to the pod it was built from")
	}
	return resp, out
}

// rankPod is a node pod of a Trainer JobSet as the Job controller makes
// it from a template the job webhook labelled.
func rankPod(labels, annotations, extra string) string {
	return `{"apiVersion":"v1","kind":"Pod","metadata":{"generateName":"fine-tune-node-0-0-","namespace":"ml",
"labels":{"jobset.sigs.k8s.io/jobset-name":"fine-tune","jobset.sigs.k8s.io/replicatedjob-name":"node","batch.kubernetes.io/job-completion-index":"1",
 "training.kubeflow.org/job-name":"fine-tune"` + labels + `},"annotations":{"batch.kubernetes.io/job-completion-index":"1"` + annotations + `}},
"spec":{` + extra + `"containers":[{"name":"node","image":"t","env":[{"name":"JOB_COMPLETION_INDEX","value":"1"}],"resources":{"limits":{"nvidia.com/mig-1g.10gb":"1"}}}]}}`
}

const injectLabel = `,"rankgate.io/inject":"rank-init"`

// A labelled JobSet pod gets the same init container a PyTorchJob's
// template gets (first, with its GPU requests and volumes), waiting as
// long as its gang-timeout annotation says; its own init containers and
// volumes stay after it. A pod that already has it gets nothing.
func TestPodWebhookInjectsRankPods(t *testing.T) {
	m := newMutator(t)
	resp, pod := admitPod(t, m, rankPod(injectLabel, `,"rankgate.io/gang-timeout":"20m"`,
		`"initContainers":[{"name":"warmup","image":"w"}],"volumes":[{"name":"data","emptyDir":{}}],`))
	require.True(t, resp.Allowed)
	require.Len(t, pod.Spec.InitContainers, 2)
	ic := pod.Spec.InitContainers[0]
	require.Equal(t, InitName, ic.Name)
	require.Equal(t, "warmup", pod.Spec.InitContainers[1].Name)
	require.Equal(t, "1", ic.Resources.Limits.Name("nvidia.com/mig-1g.10gb", "").String())
	require.Contains(t, ic.Args, "--expect-profile=1g.10gb")
	require.Contains(t, ic.Args, "--timeout=25m0s", "the pod's gang timeout and the margin")
	var vols []string
	for _, v := range pod.Spec.Volumes {
		vols = append(vols, v.Name)
	}
	require.Equal(t, []string{"data", TokenVolume, CAVolume, PodInfoVolume}, vols)

	// The same as the job webhook would have written into a template.
	want, err := m.podSpecOps("/spec", "ml", &corev1.PodSpec{Containers: pod.Spec.Containers}, 20*60e9)
	require.NoError(t, err)
	require.Equal(t, want[0].Value, []corev1.Container{ic})

	again, _ := json.Marshal(pod)
	resp, _ = admitPod(t, m, string(again))
	require.True(t, resp.Allowed)
	require.Empty(t, resp.Patches, "second pass")

	_, pod = admitPod(t, m, rankPod(injectLabel, `,"rankgate.io/gang-timeout":"soon"`, ""))
	require.Contains(t, pod.Spec.InitContainers[0].Args, "--timeout=15m0s", "an unreadable timeout: the default")
}

// Pods the webhook must leave as they are, whatever the API server sends:
// no label, a pod not of a JobSet, opted out, no GPU, an update.
func TestPodWebhookLeavesOtherPods(t *testing.T) {
	m := newMutator(t)
	for name, raw := range map[string]string{
		"no label":  rankPod("", "", ""),
		"other":     `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"rankgate.io/inject":"rank-init"}},"spec":{"containers":[{"name":"c","image":"i","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`,
		"opted out": rankPod(injectLabel+`,"rankgate.io/gate":"disabled"`, "", ""),
		"no GPU":    `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"rankgate.io/inject":"rank-init","jobset.sigs.k8s.io/jobset-name":"j"}},"spec":{"containers":[{"name":"c","image":"i"}]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			resp, pod := admitPod(t, m, raw)
			require.True(t, resp.Allowed)
			require.Empty(t, resp.Patches)
			require.Empty(t, pod.Spec.InitContainers)
			if name == "other" {
				require.Len(t, resp.Warnings, 1)
				require.Contains(t, resp.Warnings[0], "a JobSet's pods only")
			}
		})
	}
	resp := m.Pods().Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Update, Namespace: "ml", Kind: podGVK, Object: runtime.RawExtension{Raw: []byte(rankPod(injectLabel, "", ""))}}})
	require.True(t, resp.Allowed)
	require.Empty(t, resp.Patches)
	resp = m.Pods().Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: "ml", Kind: jobSetKind, Object: runtime.RawExtension{Raw: []byte(trainerJobSet)}}})
	require.True(t, resp.Allowed, "not a pod")
	require.Empty(t, resp.Patches)
}

// A pod that cannot take the init container (a volume already has one of
// its names) is refused with the reason; a pod that is not JSON too.
func TestPodWebhookRefusesWhatItCannotGate(t *testing.T) {
	m := newMutator(t)
	resp, _ := admitPod(t, m, rankPod(injectLabel, "", `"volumes":[{"name":"rankgate-ca","emptyDir":{}}],`))
	require.False(t, resp.Allowed)
	require.Contains(t, resp.Result.Message, "a volume is already named rankgate-ca")
	require.Contains(t, resp.Result.Message, "ml/fine-tune-node-0-0-*")
	resp = m.Pods().Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: "ml", Kind: podGVK, Object: runtime.RawExtension{Raw: []byte(`{"metadata":`)}}})
	require.False(t, resp.Allowed)
}

// The job webhook refuses such a JobSet at once, not each of its pods
// later; and copies the job's gang timeout onto the rank template, where
// its pods carry it to the Pod webhook.
func TestMutateJobSetCarriesTimeoutAndChecksVolumes(t *testing.T) {
	m := newMutator(t)
	withTimeout := `{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"js","namespace":"ml","annotations":{"rankgate.io/gang-timeout":"20m"}},"spec":{"replicatedJobs":[
 {"name":"node","replicas":1,"template":{"spec":{"template":{"spec":{"containers":[{"name":"node","image":"t","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}}}}]}}`
	obj, changed := mutate(t, m, jobSetKind, []byte(withTimeout))
	require.True(t, changed)
	pt := jobSetPod(t, obj, 0)
	require.Equal(t, map[string]string{"rankgate.io/gang-timeout": "20m"}, pt.Annotations)
	require.Equal(t, "rank-init", pt.Labels["rankgate.io/inject"])

	clash := `{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"js","namespace":"ml"},"spec":{"replicatedJobs":[
 {"name":"node","replicas":1,"template":{"spec":{"template":{"spec":{"volumes":[{"name":"rankgate-token","emptyDir":{}}],"containers":[{"name":"node","image":"t","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}}}}]}}`
	j, err := review.DecodeJob(jobSetKind, "ml", []byte(clash))
	require.NoError(t, err)
	_, err = m.Patch(j)
	require.ErrorContains(t, err, "a volume is already named rankgate-token")
}
