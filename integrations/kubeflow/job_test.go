package kubeflow_test

import (
	"testing"

	mpiv2 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	kftraining "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
)

const mig = corev1.ResourceName("nvidia.com/mig-1g.10gb")

func TestPyTorchJobAdapter(t *testing.T) {
	obj := kubeflowtest.MakePyTorchJob("train", "ml").Master().Workers(3).Request(mig, "1").Obj()
	j, err := kubeflow.FromObject(obj)
	require.NoError(t, err)
	require.NoError(t, j.Validate())
	require.Equal(t, "PyTorchJob", j.Kind())
	require.Equal(t, kubeflow.PyTorchJobGVK, j.GVK())
	require.Equal(t, "ml", j.Namespace())
	require.Equal(t, "train", j.Name())
	specs := j.ReplicaSpecs()
	require.Len(t, specs, 2)
	require.Equal(t, "Master", specs[0].Type)
	require.Equal(t, int32(1), specs[0].Replicas)
	require.Equal(t, "Worker", specs[1].Type)
	require.Equal(t, int32(3), specs[1].Replicas)
	require.Equal(t, 4, kubeflow.RankPods(j))

	require.False(t, j.Suspended())
	j.SetSuspended(true)
	require.True(t, *obj.Spec.RunPolicy.Suspend, "SetSuspended writes through to the wrapped object")
	require.Same(t, obj, j.Object())

	// A nil replica count defaults to 1.
	obj.Spec.PyTorchReplicaSpecs[kftraining.PyTorchJobReplicaTypeWorker].Replicas = nil
	require.Equal(t, int32(1), j.ReplicaSpecs()[1].Replicas)
}

func TestMPIJobAdapter(t *testing.T) {
	obj := kubeflowtest.MakeMPIJob("allreduce", "hpc").Workers(4).SlotsPerWorker(8).WorkerRequest("nvidia.com/gpu", "8").Obj()
	j, err := kubeflow.FromObject(obj)
	require.NoError(t, err)
	require.NoError(t, j.Validate())
	specs := j.ReplicaSpecs()
	require.Equal(t, []string{"Launcher", "Worker"}, []string{specs[0].Type, specs[1].Type})
	require.False(t, specs[0].RunsRanks)
	require.True(t, specs[1].RunsRanks)
	require.Equal(t, 4, kubeflow.RankPods(j))

	obj.Spec.RunLauncherAsWorker = ptr(true)
	require.Equal(t, 5, kubeflow.RankPods(j))
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		obj  runtime.Object
		err  string
	}{
		{"no replica specs", &kftraining.PyTorchJob{}, "spec.pytorchReplicaSpecs is empty"},
		{"unknown type", func() runtime.Object {
			o := kubeflowtest.MakePyTorchJob("a", "b").Obj()
			o.Spec.PyTorchReplicaSpecs["Chief"] = o.Spec.PyTorchReplicaSpecs["Worker"]
			return o
		}(), `unknown replica type "Chief"`},
		{"negative replicas", kubeflowtest.MakePyTorchJob("a", "b").Workers(-1).Obj(), "Worker.replicas is -1"},
		{"absurd replicas", kubeflowtest.MakePyTorchJob("a", "b").Workers(1 << 30).Obj(), "want 0..100000"},
		{"two masters", func() runtime.Object {
			o := kubeflowtest.MakePyTorchJob("a", "b").Master().Obj()
			o.Spec.PyTorchReplicaSpecs["Master"].Replicas = ptr(int32(2))
			return o
		}(), "at most one Master"},
		{"no containers", func() runtime.Object {
			o := kubeflowtest.MakePyTorchJob("a", "b").Obj()
			o.Spec.PyTorchReplicaSpecs["Worker"].Template.Spec.Containers = nil
			return o
		}(), "Worker.template.spec.containers is empty"},
		{"null spec", func() runtime.Object {
			o := kubeflowtest.MakePyTorchJob("a", "b").Obj()
			o.Spec.PyTorchReplicaSpecs["Master"] = nil
			return o
		}(), "Master is null"},
		{"mpi without launcher", func() runtime.Object {
			o := kubeflowtest.MakeMPIJob("a", "b").Obj()
			delete(o.Spec.MPIReplicaSpecs, mpiv2.MPIReplicaTypeLauncher)
			return o
		}(), "exactly one launcher"},
		{"mpi slots", kubeflowtest.MakeMPIJob("a", "b").SlotsPerWorker(-2).Obj(), "slotsPerWorker is -2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j, err := kubeflow.FromObject(tc.obj)
			require.NoError(t, err)
			require.ErrorContains(t, j.Validate(), tc.err)
		})
	}
}

func TestOwnsPod(t *testing.T) {
	j, _ := kubeflow.FromObject(kubeflowtest.MakeMPIJob("allreduce", "hpc").Obj())
	owned := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "allreduce-worker-0", Namespace: "hpc",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubeflow.org/v2beta1", Kind: "MPIJob", Name: "allreduce", UID: "uid-allreduce", Controller: ptr(true)}}}}
	require.True(t, j.OwnsPod(owned))
	// The launcher pod is owned by a batch Job; the label ties it to the MPIJob.
	launcher := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "allreduce-launcher-x", Namespace: "hpc",
		Labels:          map[string]string{kubeflow.LabelJobName: "allreduce", kubeflow.LabelReplicaType: "launcher"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "allreduce-launcher", Controller: ptr(true)}}}}
	require.True(t, j.OwnsPod(launcher))
	require.Equal(t, "Launcher", kubeflow.ReplicaTypeOf(j, launcher))
	other := owned.DeepCopy()
	other.Namespace = "elsewhere"
	require.False(t, j.OwnsPod(other))
	stale := owned.DeepCopy()
	stale.OwnerReferences[0].UID = "uid-old"
	require.False(t, j.OwnsPod(stale), "a pod of an earlier job with the same name")
}

func TestFromUnstructured(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
		"metadata": map[string]any{"name": "train", "namespace": "ml"},
		"spec": map[string]any{"pytorchReplicaSpecs": map[string]any{
			"Worker": map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "pytorch", "image": "x"}}}}},
		}},
	}}
	j, err := kubeflow.FromUnstructured(u)
	require.NoError(t, err)
	require.Equal(t, int32(2), j.ReplicaSpecs()[0].Replicas)

	u.SetAPIVersion("kubeflow.org/v1")
	u.SetKind("TFJob")
	_, err = kubeflow.FromUnstructured(u)
	require.ErrorIs(t, err, kubeflow.ErrUnsupported)
	_, err = kubeflow.FromObject(&corev1.Pod{})
	require.ErrorIs(t, err, kubeflow.ErrUnsupported)
}

func ptr[T any](v T) *T { return &v }
