package controller

import (
	"github.com/rankgate/rankgate/integrations/kubeflow/pytorchjob"

	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The replicas of one job share one cached owner list (also across a
// collection while they hold it); another owner gets its own. Only the
// controller owner is kept (the only one read).
func TestTrimPodSharesOwners(t *testing.T) {
	pod := func(name, job, uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: job, UID: k8stypes.UID("u-" + uid), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: "n1"}}
	}
	trim := func(p *corev1.Pod) *corev1.Pod {
		o, err := trimPod(p)
		require.NoError(t, err)
		return o.(*corev1.Pod)
	}
	a := trim(pod("train-worker-0", "train", "1"))
	runtime.GC()
	b := trim(pod("train-worker-1", "train", "1"))
	c := trim(pod("other-worker-0", "other", "2"))
	e := trim(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x", OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: "train", UID: "u-1"}}}})
	require.Equal(t, pod("", "train", "1").OwnerReferences, a.OwnerReferences)
	require.Same(t, &a.OwnerReferences[0], &b.OwnerReferences[0])
	require.NotSame(t, &a.OwnerReferences[0], &c.OwnerReferences[0])
	require.Equal(t, "other", c.OwnerReferences[0].Name)
	require.Empty(t, e.OwnerReferences)
	runtime.KeepAlive(a)
}

// Cached jobs lose their pod templates; replica specs left equal are
// shared.
func TestStripSharesReplicaSpecs(t *testing.T) {
	mk := func(workers int32) *kubeflowv1.PyTorchJob {
		tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pytorch", Image: "x"}}}}
		return &kubeflowv1.PyTorchJob{Spec: kubeflowv1.PyTorchJobSpec{PyTorchReplicaSpecs: map[kubeflowv1.ReplicaType]*kubeflowv1.ReplicaSpec{
			kubeflowv1.PyTorchJobReplicaTypeMaster: {Replicas: ptr.To(int32(1)), Template: tmpl},
			kubeflowv1.PyTorchJobReplicaTypeWorker: {Replicas: ptr.To(workers), Template: tmpl, RestartPolicy: kubeflowv1.RestartPolicyOnFailure},
		}}}
	}
	a, b, c := mk(7), mk(7), mk(3)
	for _, j := range []*kubeflowv1.PyTorchJob{a, b, c} {
		pytorchjob.Kind.Strip(j)
	}
	m, w := kubeflowv1.PyTorchJobReplicaTypeMaster, kubeflowv1.PyTorchJobReplicaTypeWorker
	require.Same(t, a.Spec.PyTorchReplicaSpecs[m], b.Spec.PyTorchReplicaSpecs[m])
	require.Same(t, a.Spec.PyTorchReplicaSpecs[m], c.Spec.PyTorchReplicaSpecs[m])
	require.Same(t, a.Spec.PyTorchReplicaSpecs[w], b.Spec.PyTorchReplicaSpecs[w])
	require.NotSame(t, a.Spec.PyTorchReplicaSpecs[w], c.Spec.PyTorchReplicaSpecs[w])
	// The template keeps only its rank container's name and image here
	// (and launch settings and GPU resources, which this one has none of).
	kept := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pytorch", Image: "x"}}}}
	require.Equal(t, kubeflowv1.ReplicaSpec{Replicas: ptr.To(int32(3)), RestartPolicy: kubeflowv1.RestartPolicyOnFailure, Template: kept}, *c.Spec.PyTorchReplicaSpecs[w])
	require.Equal(t, int32(7), *a.Spec.PyTorchReplicaSpecs[w].Replicas)
}

// A pod with 20,000 containers, many labels, owners, gates and
// tolerations keeps a record of bounded size.
func TestTrimPodBounded(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "j-worker-0", Namespace: "ml", Labels: map[string]string{LabelJobName: "j"}}}
	for i := 0; i < 20000; i++ {
		name := fmt.Sprintf("c%d", i)
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name, Image: "x",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceName("example.com/r" + name): resource.MustParse("1")}}})
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: name, Operator: corev1.TolerationOpExists})
		p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: "example.com/" + name})
		p.Labels["rankgate.io/"+name] = "x"
		p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: name, UID: k8stypes.UID(name)})
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{Name: name})
	}
	p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = resource.MustParse("8")
	o, err := trimPod(p)
	require.NoError(t, err)
	tp := o.(*corev1.Pod)
	require.Empty(t, tp.Spec.Containers)
	require.Empty(t, tp.Spec.Tolerations)
	require.Len(t, tp.Spec.SchedulingGates, maxSchedGates)
	require.Len(t, tp.Labels, maxPodLabels)
	require.Equal(t, "j", tp.Labels[LabelJobName])
	require.Empty(t, tp.OwnerReferences)
	require.Len(t, tp.Status.InitContainerStatuses, maxInitStatuses)
	require.Len(t, tp.Spec.Resources.Requests, maxRequestNames-1) // and pods, implied
	q := tp.Spec.Resources.Requests["nvidia.com/gpu"]
	require.EqualValues(t, 8, q.Value())
	b, err := json.Marshal(tp)
	require.NoError(t, err)
	require.Less(t, len(b), 8<<10, "cached record of a pod with 20,000 containers")
}
