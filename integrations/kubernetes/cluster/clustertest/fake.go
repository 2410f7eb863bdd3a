package clustertest

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
)

// FakeClients splits objs between client-go fakes for unit tests: core
// objects into a fake clientset, Kubeflow jobs (as unstructured) into a
// dynamic fake that can list them. Tests against a real API server use the
// envtest harness instead.
func FakeClients(t testing.TB, objs ...runtime.Object) (*fake.Clientset, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	var core, jobs []runtime.Object
	for _, o := range objs {
		gvk := o.GetObjectKind().GroupVersionKind()
		if kubeflow.Supported(gvk) || trainjob.IsRuntime(gvk.GroupVersion().String(), gvk.Kind) {
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
			if err != nil {
				t.Fatalf("converting %T: %v", o, err)
			}
			jobs = append(jobs, &unstructured.Unstructured{Object: u})
			continue
		}
		core = append(core, o)
	}
	listKinds := map[schema.GroupVersionResource]string{}
	for _, k := range kubeflow.All() {
		listKinds[k.GVR()] = k.GVK().Kind + "List"
	}
	listKinds[trainjob.TrainingRuntimeGVR] = trainjob.KindTrainingRuntime + "List"
	listKinds[trainjob.ClusterTrainingRuntimeGVR] = trainjob.KindClusterTrainingRuntime + "List"
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, jobs...)
	return fake.NewSimpleClientset(core...), dyn
}
