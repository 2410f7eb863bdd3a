package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

// What people paste besides `kubectl get -o yaml`: a node's labels alone,
// and `kubectl describe` text. Sources: testdata/inputs/README.md and
// testdata/fixtures/README.md.

var (
	inputsDir  = filepath.Join("testdata", "inputs")
	fixtureDir = filepath.Join("..", "..", "..", "testdata", "fixtures", "kubernetes")
	fixture21  = filepath.Join(fixtureDir, "21_node-labels-json_h100_mig-mixed_all-balanced_nvidia-cloud-native-docs.json")
	fixture23  = filepath.Join(fixtureDir, "23_node-labels-json_h100_mig-disabled_single_nvidia-cloud-native-docs.json")
)

const notebookPod = `apiVersion: v1
kind: Pod
metadata: {name: notebook, namespace: research}
spec:
  containers:
  - name: nb
    resources:
      requests: {cpu: "4", memory: 16Gi}
      limits: {%s: "1"}
`

func loadPaths(t *testing.T, paths ...string) (*Builder, LoadStats, error) {
	t.Helper()
	b := NewBuilder()
	var stats LoadStats
	for _, p := range paths {
		if err := LoadFile(t.Context(), b, p, nil, &stats); err != nil {
			return b, stats, err
		}
	}
	return b, stats, nil
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

func TestLoadNodeLabelsAlone(t *testing.T) {
	tests := []struct {
		name     string
		file     string
		node     string
		nameFrom string
		gpu      schedule.Resources
		ask      string
		rule     string
	}{
		{name: "fixture 21: mixed all-balanced, pretty JSON", file: fixture21, node: "s4124-0073", nameFrom: "label kubernetes.io/hostname",
			gpu: schedule.Resources{"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-3g.40gb": 1},
			ask: "nvidia.com/mig-3g.40gb", rule: verdict.RuleSchedulable},
		{name: "fixture 21 asked a full GPU", file: fixture21, node: "s4124-0073", nameFrom: "label kubernetes.io/hostname",
			gpu: schedule.Resources{"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-3g.40gb": 1},
			ask: "nvidia.com/gpu", rule: verdict.RuleStrategyMismatch},
		{name: "fixture 23: single, MIG disabled", file: fixture23, node: "s4124-0073", nameFrom: "label kubernetes.io/hostname",
			gpu: schedule.Resources{"nvidia.com/gpu": 1}, ask: "nvidia.com/gpu", rule: verdict.RuleSchedulable},
		{name: "fixture 23 asked a MIG profile", file: fixture23, node: "s4124-0073", nameFrom: "label kubernetes.io/hostname",
			gpu: schedule.Resources{"nvidia.com/gpu": 1}, ask: "nvidia.com/mig-1g.10gb", rule: verdict.RuleStrategyMismatch},
		{name: "gpu-operator#981: the labels: block of a node's YAML, no hostname", file: filepath.Join(inputsDir, "node-labels-yaml_a100-single-all-1g.5gb_gpuop981.yaml"),
			node: "node-labels-yaml_a100-single-all-1g.5gb_gpuop981", nameFrom: "file name", gpu: schedule.Resources{}, ask: "nvidia.com/gpu", rule: verdict.RuleShapeMismatch},
	}
	e := schedule.New()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := writeTemp(t, "pod.yaml", strings.Replace(notebookPod, "%s", tc.ask, 1))
			b, stats, err := loadPaths(t, tc.file, pod)
			require.NoError(t, err)
			require.Equal(t, []LabelsNode{{Name: tc.node, NameFrom: tc.nameFrom}}, stats.LabelsNodes)
			ns := b.Nodes()
			require.Len(t, ns, 1)
			require.Equal(t, tc.node, ns[0].Name)
			require.True(t, ns[0].LabelsOnly)
			require.Equal(t, tc.gpu, ns[0].Allocatable)
			c := e.NewCluster(ns)
			require.Empty(t, c.LabelErrors)
			ws, err := b.Workloads()
			require.NoError(t, err)
			require.Len(t, ws, 1)
			res := e.Diagnose(c, ws[0])
			require.Equal(t, tc.rule, res.Rule, "%+v", res.Report.Findings)
		})
	}
}

func TestLoadNodeLabelsForms(t *testing.T) {
	data, err := os.ReadFile(fixture21)
	require.NoError(t, err)
	var labels map[string]string
	require.NoError(t, json.Unmarshal(data, &labels))
	compact, err := json.Marshal(labels)
	require.NoError(t, err)

	t.Run("compact JSON as jsonpath prints it, on stdin", func(t *testing.T) {
		b := NewBuilder()
		var stats LoadStats
		require.NoError(t, Load(b, "(stdin)", bytes.NewReader(compact), &stats))
		require.Equal(t, "s4124-0073", b.Nodes()[0].Name)
	})
	t.Run("several maps from {.items[*].metadata.labels}", func(t *testing.T) {
		other := map[string]string{}
		for k, v := range labels {
			other[k] = v
		}
		other[LabelHostname] = "s4124-0074"
		second, err := json.Marshal(other)
		require.NoError(t, err)
		b := NewBuilder()
		var stats LoadStats
		require.NoError(t, Load(b, "labels.json", bytes.NewReader(append(append(compact, ' '), second...)), &stats))
		require.Len(t, b.Nodes(), 2)
		require.Len(t, stats.LabelsNodes, 2)
	})
	t.Run("without a hostname on stdin there is no name", func(t *testing.T) {
		delete(labels, LabelHostname)
		noHost, err := json.Marshal(labels)
		require.NoError(t, err)
		err = Load(NewBuilder(), "(stdin)", bytes.NewReader(noHost), nil)
		var ie *InputError
		require.ErrorAs(t, err, &ie)
		require.Contains(t, err.Error(), "save them to a file named after the node")
	})
	t.Run("a map that is not labels is still refused", func(t *testing.T) {
		err := Load(NewBuilder(), "x.json", strings.NewReader(`{"name": "x", "count": 3}`), nil)
		var ie *InputError
		require.ErrorAs(t, err, &ie)
		require.Contains(t, err.Error(), "apiVersion or kind is missing")
	})
	t.Run("an absurd count is bad input", func(t *testing.T) {
		err := Load(NewBuilder(), "x.json", strings.NewReader(`{"kubernetes.io/hostname": "x", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "99999"}`), nil)
		var ie *InputError
		require.ErrorAs(t, err, &ie)
		require.Contains(t, err.Error(), "not a plausible GPU count")
	})
}

// Single-strategy labels: MIG instances are nvidia.com/gpu; MIG-INVALID
// advertises none; time-slicing replicas multiply.
func TestLabelResources(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		want   schedule.Resources
	}{
		{"single with 1g.10gb instances", map[string]string{
			schedule.LabelProduct: "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", schedule.LabelMIGStrategy: "single", schedule.LabelCount: "7"},
			schedule.Resources{"nvidia.com/gpu": 7}},
		{"single MIG-INVALID", map[string]string{
			schedule.LabelProduct: "NVIDIA-A100-SXM4-40GB-MIG-INVALID", schedule.LabelMIGStrategy: "single", schedule.LabelCount: "0"},
			schedule.Resources{}},
		{"time-slicing replicas", map[string]string{
			schedule.LabelProduct: "NVIDIA-H100-80GB-HBM3", schedule.LabelMIGStrategy: "none", schedule.LabelCount: "8", "nvidia.com/gpu.replicas": "4"},
			schedule.Resources{"nvidia.com/gpu": 32}},
		{"mixed, some GPUs whole", map[string]string{
			schedule.LabelProduct: "NVIDIA-A100-SXM4-80GB", schedule.LabelMIGStrategy: "mixed", schedule.LabelCount: "2", "nvidia.com/gpu.replicas": "1",
			"nvidia.com/mig-1g.10gb.count": "6", "nvidia.com/mig-2g.20gb.count": "4"},
			schedule.Resources{"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 6, "nvidia.com/mig-2g.20gb": 4}},
		{"no GPU", map[string]string{"kubernetes.io/hostname": "cpu-1"}, schedule.Resources{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := labelResources(tc.labels)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestLoadRefusesDescribe(t *testing.T) {
	tests := []struct {
		file string
		run  string
	}{
		{filepath.Join(inputsDir, "describe-node_hami314.txt"), "kubectl get node 416a100 -o yaml"},
		{filepath.Join(inputsDir, "describe-node-labels_a30_gpuop442.txt"), "kubectl get node NAME -o yaml"},
		{filepath.Join(inputsDir, "describe-node-capacity_mig-timeslicing_bottlerocket4418.txt"), "kubectl get node NAME -o yaml"},
		{filepath.Join(inputsDir, "describe-node-allocatable_a100-mixed_gpuop637.txt"), "kubectl get node NAME -o yaml"},
		{filepath.Join(fixtureDir, "35_node-capacity_8gpu_mig-disabled-stale-zero-mig-resources_kai1120.txt"), "kubectl get node NAME -o yaml"},
		{filepath.Join(fixtureDir, "36_podgroup-event_kai_mixed-strategy_no-node-has-mig-1g.5gb_kai1876.txt"), "kubectl get pod NAME -n NAMESPACE -o yaml"},
		{filepath.Join(fixtureDir, "38_pod-event_aks_a100_NotTriggerScaleUp_Insufficient-mig-1g.10gb_gpuop693.txt"), "kubectl get pod NAME -n NAMESPACE -o yaml"},
	}
	for _, tc := range tests {
		t.Run(filepath.Base(tc.file), func(t *testing.T) {
			_, _, err := loadPaths(t, tc.file)
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrDescribe), "%v", err)
			var ie *InputError
			require.ErrorAs(t, err, &ie)
			require.Contains(t, err.Error(), "kubectl describe")
			require.Contains(t, err.Error(), tc.run)
		})
	}
	t.Run("a pod's describe names the pod", func(t *testing.T) {
		text := "Name:             trainer-0\nNamespace:        ml\nPriority:         0\nNode:             <none>\nStatus:           Pending\nContainers:\n  pytorch:\n    Image: pytorch\nEvents:\n  Type     Reason            Age   From               Message\n  ----     ------            ----  ----               -------\n  Warning  FailedScheduling  2m    default-scheduler  0/2 nodes are available: 2 Insufficient nvidia.com/mig-2g.20gb.\n"
		err := Load(NewBuilder(), "pod.txt", strings.NewReader(text), nil)
		require.ErrorIs(t, err, ErrDescribe)
		require.Contains(t, err.Error(), "kubectl get pod trainer-0 -n ml -o yaml")
	})
	t.Run("YAML objects are not taken for describe", func(t *testing.T) {
		require.NoError(t, Load(NewBuilder(), "ok.yaml", strings.NewReader(multiDoc), nil))
	})
}

// `kubectl get nodes -o yaml` prints a v1 List with kind after the items
// (keys sorted) and an empty resourceVersion; the node's status is the one
// posted in podman-desktop#7778.
func TestLoadKubectlYAMLList(t *testing.T) {
	in := `apiVersion: v1
items:
- apiVersion: v1
  kind: Node
  metadata:
    labels:
      kubernetes.io/hostname: nvidia1
    name: nvidia1
  status:
    addresses:
      - address: 192.168.1.94
        type: InternalIP
      - address: nvidia1
        type: Hostname
    allocatable:
      cpu: "16"
      ephemeral-storage: "8443296967"
      hugepages-1Gi: "0"
      hugepages-2Mi: "0"
      memory: 32777408Ki
      nvidia.com/gpu: "1"
      pods: "110"
    capacity:
      cpu: "16"
      ephemeral-storage: 8679376Ki
      hugepages-1Gi: "0"
      hugepages-2Mi: "0"
      memory: 32777408Ki
      nvidia.com/gpu: "1"
      pods: "110"
kind: List
metadata:
  resourceVersion: ""
`
	b := NewBuilder()
	var st LoadStats
	require.NoError(t, Load(b, "nodes.yaml", strings.NewReader(in), &st))
	require.Empty(t, st.LabelsNodes)
	ns := b.Nodes()
	require.Len(t, ns, 1)
	require.False(t, ns[0].LabelsOnly)
	require.Equal(t, int64(1), ns[0].Allocatable["nvidia.com/gpu"])
	require.Equal(t, int64(16000), ns[0].Allocatable["cpu"])
}
