package controller

import (
	"runtime"
	"testing"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// The replicas of one job share one cached owner list (also across a
// collection while they hold it); another owner gets its own.
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
	require.NotSame(t, &a.OwnerReferences[0], &e.OwnerReferences[0])
	require.Nil(t, e.OwnerReferences[0].Controller)
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
		stripPyTorchJob(j)
	}
	m, w := kubeflowv1.PyTorchJobReplicaTypeMaster, kubeflowv1.PyTorchJobReplicaTypeWorker
	require.Same(t, a.Spec.PyTorchReplicaSpecs[m], b.Spec.PyTorchReplicaSpecs[m])
	require.Same(t, a.Spec.PyTorchReplicaSpecs[m], c.Spec.PyTorchReplicaSpecs[m])
	require.Same(t, a.Spec.PyTorchReplicaSpecs[w], b.Spec.PyTorchReplicaSpecs[w])
	require.NotSame(t, a.Spec.PyTorchReplicaSpecs[w], c.Spec.PyTorchReplicaSpecs[w])
	require.Equal(t, kubeflowv1.ReplicaSpec{Replicas: ptr.To(int32(3)), RestartPolicy: kubeflowv1.RestartPolicyOnFailure}, *c.Spec.PyTorchReplicaSpecs[w])
	require.Equal(t, int32(7), *a.Spec.PyTorchReplicaSpecs[w].Replicas)
}
