package kubeflow_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubeflow/mpijob"
	"github.com/rankgate/rankgate/integrations/kubeflow/pytorchjob"
)

// Every registered kind answers for itself: found by GVK, name and
// resource, its New wraps to a Job of that kind, and its scheme decodes it.
func TestRegistry(t *testing.T) {
	require.Equal(t, []string{"PyTorchJob", "MPIJob", "TrainJob", "JobSet"}, kubeflow.KindNames())
	require.Equal(t, "PyTorchJob, MPIJob, TrainJob or JobSet", kubeflow.KindList("or"))
	require.EqualError(t, kubeflow.ErrUnsupported, "not a supported job kind (PyTorchJob kubeflow.org/v1, MPIJob kubeflow.org/v2beta1, TrainJob trainer.kubeflow.org/v1alpha1, JobSet jobset.x-k8s.io/v1alpha2)")
	s := kubeflow.NewScheme()
	for _, k := range kubeflow.All() {
		t.Run(k.GVK().Kind, func(t *testing.T) {
			got, ok := kubeflow.ByGVK(k.GVK())
			require.True(t, ok)
			require.Equal(t, k, got)
			got, ok = kubeflow.ByName(k.GVK().Kind)
			require.True(t, ok)
			require.Equal(t, k, got)
			for _, form := range []string{k.GVK().Kind, k.GVR().Resource, k.GVR().Resource + "." + k.GVK().Group} {
				got, ok = kubeflow.ByResource(form)
				require.True(t, ok, form)
				require.Equal(t, k, got)
			}
			if k.OperatorName() != "" {
				require.Equal(t, k.GVK().Kind, kubeflow.KindOfOperator(k.OperatorName()))
			}
			require.True(t, s.Recognizes(k.GVK()))
			// A client lists a kind by its list type's name: <Kind>List.
			lists, _, err := s.ObjectKinds(k.NewList())
			require.NoError(t, err)
			require.Equal(t, k.GVK().Kind+"List", lists[0].Kind)
			j, err := kubeflow.FromObject(k.New())
			require.NoError(t, err)
			require.Equal(t, k.GVK(), j.GVK())
			if k != jobset.Kind { // a JobSet's replica types are its spec's ReplicatedJobs
				require.NotEmpty(t, j.ReplicaTypes())
			}
		})
	}
	require.Equal(t, "", kubeflow.KindOfOperator(""), "kinds whose operators set no operator-name label")
	_, ok := kubeflow.ByName("TFJob")
	require.False(t, ok)
	_, ok = kubeflow.ByResource("tfjobs")
	require.False(t, ok)
	require.Equal(t, "", kubeflow.KindOfOperator("tfjob-controller"))
	_, err := kubeflow.FromObject(&runtime.Unknown{})
	require.ErrorIs(t, err, kubeflow.ErrUnsupported)
}

// Strip reduces the templates to their rank container's launch settings
// and shares equal replica specs between jobs.
func TestStripSharesSpecs(t *testing.T) {
	k, _ := kubeflow.ByGVK(kubeflow.MPIJobGVK)
	a := kubeflowtest.MakeMPIJob("a", "ns").Workers(2).Obj()
	b := kubeflowtest.MakeMPIJob("b", "ns").Workers(2).Obj()
	k.Strip(a)
	k.Strip(b)
	for typ, s := range a.Spec.MPIReplicaSpecs {
		require.LessOrEqual(t, len(s.Template.Spec.Containers), 1)
		for _, c := range s.Template.Spec.Containers {
			require.Empty(t, c.Command)
			require.Empty(t, c.VolumeMounts)
		}
		require.Same(t, s, b.Spec.MPIReplicaSpecs[typ])
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(kubeflowtest.MakePyTorchJob("p", "ns").Obj())
	require.NoError(t, err)
	j, err := kubeflow.FromUnstructured(&unstructured.Unstructured{Object: u})
	require.NoError(t, err)
	require.Equal(t, "PyTorchJob", j.Kind())
}

// Templates names every non-null replica spec's template, a type no
// operator runs included, and they are the object's own templates.
func TestTemplatesEveryReplicaType(t *testing.T) {
	for _, k := range []kubeflow.Kind{pytorchjob.Kind, mpijob.Kind} {
		t.Run(k.GVK().Kind, func(t *testing.T) {
			obj := k.New()
			j0, err := k.Wrap(k.New())
			require.NoError(t, err)
			known := j0.ReplicaTypes()[0]
			path := j0.TemplatePath(known)
			require.Equal(t, []string{"spec", path[1], known, "template"}, path)
			raw := `{"spec":{"` + path[1] + `":{"` + known + `":{"template":{"spec":{"containers":[{"name":"c"}]}}},"Chief":{"template":{}},"Gone":null}}}`
			require.NoError(t, json.Unmarshal([]byte(raw), obj))
			j, err := k.Wrap(obj)
			require.NoError(t, err)
			ts := j.Templates()
			require.Len(t, ts, 2)
			require.Contains(t, ts, "Chief")
			require.Equal(t, "c", ts[known].Spec.Containers[0].Name)
			ts[known].Spec.Containers[0].Name = "renamed"
			require.Equal(t, "renamed", j.Templates()[known].Spec.Containers[0].Name, "the object's own template")
		})
	}
}
