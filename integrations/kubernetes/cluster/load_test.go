package cluster

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/preflight/schedule"
)

const multiDoc = `
# kubectl get nodes -o yaml, then a job, then a pod
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: gpu-1
    labels:
      nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
      nvidia.com/mig.strategy: none
  status:
    allocatable:
      cpu: "96"
      memory: 1Ti
      pods: "110"
      nvidia.com/gpu: "8"
- apiVersion: v1
  kind: Service
  metadata:
    name: ignored
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: train
  namespace: ml
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: pytorch
            image: pytorch
            resources:
              limits:
                nvidia.com/gpu: "4"
---
---
apiVersion: v1
kind: Pod
metadata:
  name: lone
  namespace: ml
spec:
  containers:
  - name: c
    image: x
    resources:
      limits:
        nvidia.com/gpu: 1
status:
  phase: Pending
  conditions:
  - type: PodScheduled
    status: "False"
    reason: Unschedulable
    message: "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
`

func TestLoadMultiDocAndLists(t *testing.T) {
	b := NewBuilder()
	var st LoadStats
	require.NoError(t, Load(b, "dump.yaml", strings.NewReader(multiDoc), &st))
	require.Equal(t, map[string]int{"v1 Service": 1}, st.Skipped)
	require.Equal(t, 4, st.Objects)
	nodes := b.Nodes()
	require.Len(t, nodes, 1)
	require.Equal(t, int64(8), nodes[0].Allocatable["nvidia.com/gpu"])
	ws, err := b.Workloads()
	require.NoError(t, err)
	require.Len(t, ws, 2)
	require.Equal(t, "PyTorchJob", ws[0].Kind)
	require.Equal(t, 2, ws[0].PodSets[0].Count)
	require.Equal(t, int64(4), ws[0].PodSets[0].Requests["nvidia.com/gpu"])
	require.Equal(t, "Pod", ws[1].Kind)
	require.Equal(t, "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.", ws[1].PodSets[0].SchedulerMessage)
}

func TestLoadJSONList(t *testing.T) {
	in := `{"apiVersion":"v1","kind":"NodeList","items":[{"metadata":{"name":"a"},"status":{"allocatable":{"nvidia.com/gpu":"2"}}},
	{"metadata":{"name":"b"},"status":{"capacity":{"nvidia.com/gpu":"4"}}}]}
	{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"p","namespace":"ns"},"spec":{"nodeName":"a","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]},"status":{"phase":"Running"}}]}`
	b := NewBuilder()
	require.NoError(t, Load(b, "dump.json", strings.NewReader(in), nil))
	nodes := b.Nodes()
	require.Len(t, nodes, 2)
	require.Equal(t, schedule.Resources{"nvidia.com/gpu": 1, "pods": 1}, nodes[0].Used)
	require.Equal(t, int64(4), nodes[1].Allocatable["nvidia.com/gpu"])
}

func TestLoadBadInput(t *testing.T) {
	tests := []struct {
		name, in, err string
	}{
		{"malformed yaml", "apiVersion: v1\nkind: Node\nmetadata: [unclosed", "dump.yaml: document 1: not valid YAML or JSON"},
		{"not an object", "- a\n- b\n", "dump.yaml: document 1: not a Kubernetes object"},
		// A node's labels alone are read (load_inputs_test.go); a map that
		// is neither an object nor labels is not.
		{"map that is not labels", `{"product": "NVIDIA-H100-80GB-HBM3", "gpus": [1, 2]}`, "apiVersion or kind is missing"},
		{"node without name", "apiVersion: v1\nkind: Node\nmetadata: {}\n", "dump.yaml: document 1 (Node): metadata.name is empty"},
		{"negative gpus", "apiVersion: v1\nkind: Node\nmetadata: {name: gpu-7}\nstatus: {allocatable: {nvidia.com/gpu: \"-3\"}}\n",
			"dump.yaml: document 1 (Node gpu-7): status.allocatable nvidia.com/gpu is -3: must not be negative"},
		{"bad quantity", "apiVersion: v1\nkind: Node\nmetadata: {name: gpu-7}\nstatus: {allocatable: {nvidia.com/gpu: eight}}\n",
			"dump.yaml: document 1 (Node gpu-7): quantities must match"},
		{"absurd gpus", "---\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1e9}}}]}\n",
			"dump.yaml: document 2 (Pod ns/p): spec.containers[c].resources nvidia.com/gpu is 1G: not a plausible amount"},
		{"job replicas wrong type", "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: j, namespace: ns}\nspec: {pytorchReplicaSpecs: {Worker: {replicas: two}}}\n",
			"dump.yaml: document 1 (PyTorchJob ns/j): json: cannot unmarshal string"},
		{"job without replica specs", "apiVersion: kubeflow.org/v2beta1\nkind: MPIJob\nmetadata: {name: j, namespace: ns}\nspec: {}\n",
			"(MPIJob ns/j): spec.mpiReplicaSpecs is empty"},
		{"list item", "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata: {name: ok}\n- apiVersion: v1\n  kind: Node\n  metadata: {name: bad}\n  status: {capacity: {cpu: \"-1\"}}\n",
			"dump.yaml: document 1, item 2 (Node bad): status.capacity cpu is -1"},
		{"duplicate node", "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: a}\n", "document 2 (Node a): node a appears twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Load(NewBuilder(), "dump.yaml", strings.NewReader(tc.in), nil)
			require.Error(t, err)
			var ie *InputError
			require.True(t, errors.As(err, &ie), "%T %v", err, err)
			require.Contains(t, err.Error(), tc.err)
		})
	}
}

func TestLoadSkipsUnusedKinds(t *testing.T) {
	in := "apiVersion: kubeflow.org/v1\nkind: MPIJob\nmetadata: {name: old}\n---\napiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: tf}\n---\napiVersion: v1\nkind: ConfigMapList\nitems: []\n"
	var st LoadStats
	require.NoError(t, Load(NewBuilder(), "x", strings.NewReader(in), &st))
	require.Equal(t, map[string]int{"kubeflow.org/v1 MPIJob": 1, "kubeflow.org/v1 TFJob": 1, "v1 ConfigMapList": 1}, st.Skipped)
}
