package trainjob_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
)

// FuzzDecodeRuntime: a runtime from a dump, then the pods of a TrainJob
// with a runtime patch derived from it, never panic; what decodes
// derives or says why not. The input is the runtime's JSON, a NUL byte,
// and the patch's JSON.
func FuzzDecodeRuntime(f *testing.F) {
	patch := []byte(`{"replicatedJobs":[{"name":"node","template":{"spec":{"template":{"spec":{"nodeSelector":{"a":"b"}}}}}}]}`)
	for _, name := range []string{"torch-distributed.yaml", "deepspeed-distributed.yaml"} {
		raw, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append(append(js, 0), patch...))
	}
	f.Add([]byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"ClusterTrainingRuntime","metadata":{"name":"x"},"spec":{"template":{"spec":{"replicatedJobs":[{"name":"node"}]}}}}` + "\x00" + `{"replicatedJobs":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, patch, _ := bytes.Cut(data, []byte{0})
		rt, err := trainjob.DecodeRuntime(raw)
		if err != nil {
			return
		}
		n := int32(2)
		tj := &trainjob.TrainJob{Spec: trainjob.Spec{
			Trainer: &trainjob.Trainer{NumNodes: &n},
			RuntimePatches: []trainjob.RuntimePatch{{Manager: "m", TrainingRuntimeSpec: &trainjob.TrainingRuntimeSpecPatch{
				Template: &trainjob.JobSetTemplatePatch{Spec: patch},
			}}},
		}}
		spec, err := trainjob.Derive(tj, rt)
		if err == nil && spec == nil {
			t.Fatal("no spec and no error")
		}
	})
}
