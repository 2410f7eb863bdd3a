package cluster

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rankgate/rankgate/preflight/schedule"
)

// FuzzLoad feeds arbitrary bytes through the whole offline path: the
// loader must either accept them or return an *InputError, never panic;
// whatever it accepts, the engine must judge without panicking.
//
//	go test ./integrations/kubernetes/cluster -run '^$' -fuzz FuzzLoad -fuzztime 60s
func FuzzLoad(f *testing.F) {
	for _, s := range []string{multiDoc, "", "---\n", "null", "[]", "apiVersion: v1\nkind: List\nitems: [1]\n",
		`{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"p"},"spec":{"containers":[{"resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}]}`,
		// A node's labels alone, and kubectl describe text.
		`{"kubernetes.io/hostname":"h","nvidia.com/gpu.product":"NVIDIA-A100-SXM4-80GB-MIG-1g.10gb","nvidia.com/mig.strategy":"single","nvidia.com/gpu.count":"7"}`,
		"labels:\n  nvidia.com/mig.strategy: mixed\n  nvidia.com/mig-1g.10gb.count: 2\n  nvidia.com/gpu.replicas: '0'\n",
		"Name: n\nRoles: worker\nCapacity:\n  nvidia.com/gpu: 8\n",
		"  Warning  FailedScheduling  2m  default-scheduler  0/2 nodes are available\n",
		// A TrainJob with a runtime patch and its runtime.
		`{"apiVersion":"v1","kind":"List","items":[
 {"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"t","namespace":"ml"},"spec":{"runtimeRef":{"name":"r","kind":"TrainingRuntime"},
  "trainer":{"numNodes":2,"resourcesPerNode":{"limits":{"nvidia.com/mig-1g.10gb":"1"}}},
  "runtimePatches":[{"manager":"kueue.x-k8s.io/manager","trainingRuntimeSpec":{"template":{"spec":{"replicatedJobs":[{"name":"node","template":{"spec":{"template":{"spec":{"nodeSelector":{"pool":"a"}}}}}}]}}}}]}},
 {"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainingRuntime","metadata":{"name":"r","namespace":"ml"},"spec":{"mlPolicy":{"numNodes":1,"mpi":{"runLauncherAsNode":true}},
  "template":{"spec":{"replicatedJobs":[{"name":"node","template":{"spec":{"template":{"spec":{"containers":[{"name":"node","image":"i"}]}}}}},
   {"name":"launcher","template":{"metadata":{"labels":{"trainer.kubeflow.org/trainjob-ancestor-step":"trainer"}},"spec":{"template":{"spec":{"containers":[{"name":"node","image":"i"}]}}}}}]}}}}]}`,
		// A DeviceTaintRule by device, one with an empty selector and a
		// List of one without a selector, with a slice they select.
		`{"apiVersion":"v1","kind":"List","items":[
 {"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"s"},"spec":{"driver":"gpu.nvidia.com","nodeName":"n","pool":{"name":"n","generation":1,"resourceSliceCount":1},
  "devices":[{"name":"gpu-0","attributes":{"type":{"string":"gpu"}},"taints":[{"key":"gpu.nvidia.com/xid","value":"79","effect":"NoSchedule"}]}]}},
 {"apiVersion":"resource.k8s.io/v1","kind":"DeviceTaintRule","metadata":{"name":"r"},"spec":{"deviceSelector":{"driver":"gpu.nvidia.com","pool":"n","device":"gpu-0"},"taint":{"key":"k","value":"v","effect":"NoExecute"}}},
 {"apiVersion":"resource.k8s.io/v1","kind":"DeviceTaintRule","metadata":{"name":"all"},"spec":{"deviceSelector":{},"taint":{"key":"k","effect":"None"}}}]}`,
		`{"apiVersion":"resource.k8s.io/v1","kind":"DeviceTaintRuleList","items":[{"metadata":{"name":"none"},"spec":{"taint":{"key":"k","effect":"NoSchedule"}}}]}`,
	} {
		f.Add([]byte(s))
	}
	files, _ := filepath.Glob(filepath.Join(scenarioDir, "*.yaml"))
	legacy, _ := filepath.Glob(filepath.Join(legacyDir, "*.yaml"))
	files = append(files, legacy...)
	inputs, _ := filepath.Glob(filepath.Join("testdata", "inputs", "*.*"))
	fixtures, _ := filepath.Glob(filepath.Join("..", "..", "..", "testdata", "fixtures", "kubernetes", "*"))
	files = append(append(files, inputs...), fixtures...)
	dra, _ := filepath.Glob(filepath.Join("testdata", "dra", "*.yaml"))
	files = append(files, dra...)
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err == nil {
			f.Add(data)
		}
	}
	e := schedule.New()
	f.Fuzz(func(t *testing.T, data []byte) {
		// A slow input crashes the worker, so the fuzzer keeps it.
		watchdog := time.AfterFunc(10*time.Second, func() { panic("input took more than 10s") })
		defer watchdog.Stop()
		b := NewBuilder()
		err := Load(b, "fuzz.yaml", bytes.NewReader(data), nil)
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("error is %T, want *InputError: %v", err, err)
			}
			return
		}
		c := e.NewCluster(b.Nodes())
		ws, err := b.Workloads()
		if err != nil {
			return
		}
		for _, w := range ws {
			res := e.Diagnose(c, w)
			if res.Rule == "" {
				t.Fatalf("no verdict for %s", w.Subject())
			}
		}
	})
}
