package controller

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	mpiv2beta1 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

func ptJob(master bool, workers int32) *kubeflowv1.PyTorchJob {
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pytorch", Image: "pytorch"}}}}
	specs := map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{kubeflowv1.PyTorchJobReplicaTypeWorker: {Replicas: ptr.To(workers), Template: tmpl}}
	if master {
		specs[kubeflowv1.PyTorchJobReplicaTypeMaster] = &kubeflowv1.ReplicaSpec{Template: tmpl} // replicas default 1
	}
	return &kubeflowv1.PyTorchJob{ObjectMeta: metav1.ObjectMeta{Name: "pt", Namespace: "ml"}, Spec: kubeflowv1.PyTorchJobSpec{PyTorchReplicaSpecs: specs}}
}

func mpJob(workers int32, launcherWorks bool) *mpiv2beta1.MPIJob {
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "mpi", Image: "mpi"}}}}
	return &mpiv2beta1.MPIJob{ObjectMeta: metav1.ObjectMeta{Name: "mpi", Namespace: "ml"}, Spec: mpiv2beta1.MPIJobSpec{
		RunLauncherAsWorker: ptr.To(launcherWorks),
		MPIReplicaSpecs: map[mpiv2beta1.MPIReplicaType]*mpiv2beta1.ReplicaSpec{
			mpiv2beta1.MPIReplicaTypeLauncher: {Replicas: ptr.To(int32(1)), Template: tmpl},
			mpiv2beta1.MPIReplicaTypeWorker:   {Replicas: ptr.To(workers), Template: tmpl},
		}}}
}

// The informer cache strips the jobs' pod templates (jobKind.Strip): ranks
// must still come out right from the labels the operators put on pods
// (training-operator: replica-type; mpi-operator: job-role).
func TestRanksOfCachedJobs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		job      client.Object
		expected int
		pods     map[string]int // "label=value/index" -> rank, -1 refused
	}{
		{"PyTorchJob master+3", ptJob(true, 3), 4, map[string]int{"replica-type=master/0": 0, "replica-type=worker/0": 1, "replica-type=worker/2": 3, "replica-type=worker/3": -1, "replica-type=master/1": -1}},
		{"PyTorchJob workers only", ptJob(false, 2), 2, map[string]int{"replica-type=worker/0": 0, "replica-type=worker/1": 1, "replica-type=master/0": -1}},
		{"MPIJob", mpJob(4, false), 4, map[string]int{"job-role=worker/0": 0, "job-role=worker/3": 3, "job-role=launcher/0": -1, "job-role=worker/4": -1}},
		{"MPIJob launcher as worker", mpJob(2, true), 3, map[string]int{"job-role=launcher/0": 0, "job-role=worker/1": 1, "job-role=worker/2": 2, "job-role=worker/0": -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, ok := kubeflow.ByName(kindOf(tc.job))
			require.True(t, ok)
			k.Strip(tc.job)
			j := kubeflow.MustFromObject(tc.job)
			require.Equal(t, tc.expected, kubeflow.RankPods(j))
			for pod, want := range tc.pods {
				label, idx, _ := strings.Cut(pod, "/")
				key, value, _ := strings.Cut(label, "=")
				p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: "ml", Labels: map[string]string{
					"training.kubeflow.org/" + key: value, LabelReplicaIndex: idx, LabelJobName: tc.job.GetName()}}}
				got, err := kubeflow.RankOf(j, p)
				if want < 0 {
					require.Error(t, err, pod)
					continue
				}
				require.NoError(t, err, pod)
				require.Equal(t, want, got, pod)
			}
		})
	}
}

func kindOf(o client.Object) string {
	switch o.(type) {
	case *kubeflowv1.PyTorchJob:
		return kubeflow.PyTorchJobGVK.Kind
	case *mpiv2beta1.MPIJob:
		return kubeflow.MPIJobGVK.Kind
	}
	return ""
}

func TestOwnerJob(t *testing.T) {
	ctl := func(apiVersion, kind string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "u0"},
			{APIVersion: apiVersion, Kind: kind, Name: "j", UID: "u1", Controller: ptr.To(true)},
		}}}
	}
	r, ok := ownerJob(ctl("kubeflow.org/v2beta1", "MPIJob"))
	require.True(t, ok)
	require.Equal(t, jobRef{kind: "MPIJob", name: "j", uid: "u1"}, r)
	_, ok = ownerJob(ctl("kubeflow.org/v1", "PyTorchJob"))
	require.True(t, ok)
	for _, p := range []*corev1.Pod{ctl("batch/v1", "Job"), ctl("kubeflow.org/v1", "TFJob"), ctl("example.com/v1", "PyTorchJob"), {}} {
		_, ok = ownerJob(p)
		require.False(t, ok)
	}
}

func TestSuspend(t *testing.T) {
	j := kubeflow.MustFromObject(ptJob(true, 1))
	require.False(t, j.Suspended())
	j.SetSuspended(true)
	require.True(t, j.Suspended())
	m := kubeflow.MustFromObject(mpJob(1, false))
	m.SetSuspended(true)
	require.True(t, m.Suspended())
}

func TestDecisionRoundTrip(t *testing.T) {
	rep := preflight.GangRules(preflight.GangInput{Job: "ml/PyTorchJob/j", Expected: 2, Ranks: []preflight.RankReport{{Rank: 0, Report: verdict.NewReport("", nil)}}})
	d := &decision.Decision{Report: rep, DecidedAt: time.Date(2026, 11, 30, 12, 0, 0, 5, time.UTC), Action: ActionSuspend, DecidedBy: "replica-a"}
	ann := decision.Annotations(d)
	require.Equal(t, "fail", ann[contract.AnnotationVerdict])
	require.Equal(t, "GANG_INCOMPLETE", ann[contract.AnnotationRules])
	require.Equal(t, "suspend", ann[contract.AnnotationAction])
	require.Contains(t, ann[contract.AnnotationReason], "missing ranks 1")

	j := ptJob(true, 1)
	j.Annotations = ann
	got, ok := decision.FromJob(j)
	require.True(t, ok)
	require.Equal(t, d.Report, got.Report)
	require.True(t, got.DecidedAt.Equal(d.DecidedAt))
	require.Equal(t, ActionSuspend, got.Action)
	require.Equal(t, "replica-a", got.DecidedBy)

	// Edited by hand: verdict and reason survive.
	j.Annotations[contract.AnnotationReport] = "{"
	got, ok = decision.FromJob(j)
	require.True(t, ok)
	require.Equal(t, verdict.VerdictFail, got.Report.Verdict)
	j.Annotations[contract.AnnotationVerdict] = "maybe"
	_, ok = decision.FromJob(j)
	require.False(t, ok)
}

func TestCompactReportBounded(t *testing.T) {
	var f []verdict.Finding
	for i := 0; i < 2000; i++ {
		f = append(f, verdict.Finding{Rule: "RANK_PREFLIGHT_FAILED", Severity: verdict.SeverityFail, Message: strings.Repeat("x", 100), Remediation: strings.Repeat("y", 100), Ranks: []int{i}})
	}
	s := decision.CompactReport(verdict.NewReport("big", f), decision.MaxReportLen)
	require.LessOrEqual(t, len(s), decision.MaxReportLen)
	var r verdict.Report
	require.NoError(t, json.Unmarshal([]byte(s), &r))
	require.Equal(t, verdict.VerdictFail, r.Verdict)
	require.NotEmpty(t, r.Findings)
}

func TestOptInAndOverrides(t *testing.T) {
	j := ptJob(true, 1)
	require.Equal(t, "", gateSetting(j))
	j.Labels = map[string]string{contract.KeyGate: "Enabled"}
	require.True(t, enabled(gateSetting(j)))
	j.Labels = nil
	j.Annotations = map[string]string{contract.KeyGate: "disabled", contract.AnnotationGangTimeout: "90s", contract.AnnotationOnFail: "delete"}
	require.True(t, contract.GateDisabled(gateSetting(j)))
	d, err := decision.JobTimeout(j, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 90*time.Second, d)
	require.Equal(t, ActionDelete, decision.JobAction(j, ActionSuspend))
	j.Annotations[contract.AnnotationGangTimeout] = "soon"
	j.Annotations[contract.AnnotationOnFail] = "explode"
	d, err = decision.JobTimeout(j, time.Minute)
	require.Error(t, err)
	require.Equal(t, time.Minute, d)
	require.Equal(t, ActionSuspend, decision.JobAction(j, ActionSuspend))
}

func TestTrimPod(t *testing.T) {
	gpu := corev1.ResourceList{"nvidia.com/mig-3g.40gb": resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("8")}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "j-worker-0", Namespace: "ml", UID: "u",
			Labels:        map[string]string{LabelJobName: "j", "app": "x"},
			Annotations:   map[string]string{"big": strings.Repeat("a", 4096)},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{
			{Name: "train", Image: "img", Command: []string{"python"}, Env: []corev1.EnvVar{{Name: "A", Value: "B"}}, Resources: corev1.ResourceRequirements{Limits: gpu}},
			{Name: "sidecar", Image: "img"},
		}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionFalse}}},
	}
	out, err := trimPod(p)
	require.NoError(t, err)
	tp := out.(*corev1.Pod)
	require.Equal(t, map[string]string{LabelJobName: "j"}, tp.Labels)
	require.Nil(t, tp.Annotations)
	require.Nil(t, tp.ManagedFields)
	require.Empty(t, tp.Spec.Containers)
	require.Len(t, tp.Status.Conditions, 1)
	require.Equal(t, "n1", tp.Spec.NodeName)

	// Whether it can ever be placed is judged from the trimmed objects
	// (placement_test.go): never placeable where the most any node has is
	// 8 full GPUs, placeable once a node offers the MIG profile.
	p.Spec.NodeName = ""
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	j, pods := rankJob(t, p)
	why := judgeTrimmed(t, j, pods, gpuNodeObj("n1", "nvidia.com/gpu", 8))
	require.Contains(t, why["ml/j-worker-0"], "no node offers it")
	require.Contains(t, why["ml/j-worker-0"], "nvidia.com/mig-3g.40gb")
	require.Empty(t, judgeTrimmed(t, j, pods, gpuNodeObj("n1", "nvidia.com/gpu", 8), gpuNodeObj("n2", "nvidia.com/mig-3g.40gb", 2)))

	// The effective request: init containers count as their maximum, app
	// containers as their sum.
	p.Spec.InitContainers = []corev1.Container{{Name: "rankgate-init", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}}}
	p.Spec.Containers = []corev1.Container{
		{Name: "a", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}}},
		{Name: "b", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}}},
	}
	out, err = trimPod(p)
	require.NoError(t, err)
	req, err := cluster.PodRequests(&out.(*corev1.Pod).Spec)
	require.NoError(t, err)
	require.EqualValues(t, 8, req["nvidia.com/gpu"])
}
