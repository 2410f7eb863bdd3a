package schedule

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func fixtureLabels(t *testing.T, name string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "fixtures", "kubernetes", name))
	require.NoError(t, err)
	var m map[string]string
	require.NoError(t, json.Unmarshal(data, &m))
	return m
}

func TestParseGPULabelsFixtures(t *testing.T) {
	mixed, err := ParseGPULabels(fixtureLabels(t, "21_node-labels-json_h100_mig-mixed_all-balanced_nvidia-cloud-native-docs.json"))
	require.NoError(t, err)
	require.Equal(t, GPU{
		Product: "NVIDIA-H100-80GB-HBM3", Count: 1, MemoryMiB: 81559, Strategy: StrategyMixed, MIGCapable: true,
		MIGConfig: "all-balanced", MIGConfigState: MIGStateSuccess, Driver: "550.54.15",
		MIGProfiles: map[string]MIGProfileLabels{
			"1g.10gb": {Count: 2, MemoryMiB: 9984, SMs: 16},
			"2g.20gb": {Count: 1, MemoryMiB: 20096, SMs: 32},
			"3g.40gb": {Count: 1, MemoryMiB: 40320, SMs: 60},
		},
	}, mixed)

	disabled, err := ParseGPULabels(fixtureLabels(t, "23_node-labels-json_h100_mig-disabled_single_nvidia-cloud-native-docs.json"))
	require.NoError(t, err)
	require.Equal(t, StrategySingle, disabled.Strategy)
	require.Equal(t, "all-disabled", disabled.MIGConfig)
	require.Empty(t, disabled.SingleProfile(), "MIG off under single: nvidia.com/gpu is a full GPU")
	require.Empty(t, disabled.MIGProfiles)
}

func TestParseGPULabelsErrorsAndVariants(t *testing.T) {
	_, err := ParseGPULabels(map[string]string{LabelCount: "eight", MIGPrefix + "1g.10gb.count": "-1"})
	require.ErrorContains(t, err, `label nvidia.com/gpu.count="eight"`)
	require.ErrorContains(t, err, `label nvidia.com/mig-1g.10gb.count="-1"`)

	g, err := ParseGPULabels(map[string]string{
		"nvidia.com/cuda.driver.major": "570", "nvidia.com/cuda.driver.minor": "133", "nvidia.com/cuda.driver.rev": "20",
		LabelProduct: "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", LabelMIGStrategy: StrategySingle,
		"nvidia.com/gpu.deploy.device-plugin": PausedForMIGChange,
	})
	require.NoError(t, err)
	require.Equal(t, "570.133.20", g.Driver)
	require.Equal(t, "1g.5gb", g.SingleProfile())
	require.Equal(t, "NVIDIA-A100-SXM4-40GB", g.BaseProduct())
	require.True(t, g.PausedForMIGChange)
	require.False(t, g.Invalid())

	inv, _ := ParseGPULabels(map[string]string{LabelProduct: "NVIDIA-A100-SXM4-40GB-MIG-INVALID", LabelMIGStrategy: StrategySingle})
	require.True(t, inv.Invalid())
	require.Empty(t, inv.SingleProfile())
}

func TestTargetOf(t *testing.T) {
	a100, _ := testCatalog.ModelByName("A100-80GB")
	a30, _ := testCatalog.ModelByName("A30-24GB")
	tests := []struct {
		config string
		model  string
		want   target
	}{
		{"all-disabled", "A100-80GB", target{known: true, disabled: true}},
		{"all-1g.10gb", "A100-80GB", target{known: true, layout: map[string]int{"1g.10gb": 7}}},
		{"all-2g.20gb", "A100-80GB", target{known: true, layout: map[string]int{"2g.20gb": 3}}},
		{"all-balanced", "A100-80GB", target{known: true, layout: map[string]int{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}},
		{"all-balanced", "A30-24GB", target{known: true, layout: map[string]int{"1g.6gb": 2, "2g.12gb": 1}}},
		{"all-3g.20gb", "A100-80GB", target{known: true, layout: map[string]int{}}},
		{"custom-config", "A100-80GB", target{}},
	}
	for _, tc := range tests {
		t.Run(tc.config+" "+tc.model, func(t *testing.T) {
			m := a100
			if tc.model == "A30-24GB" {
				m = a30
			}
			got := targetOf(tc.config, m)
			if tc.want.layout == nil {
				require.Nil(t, got.layout)
			}
			require.Equal(t, tc.want.known, got.known)
			require.Equal(t, tc.want.disabled, got.disabled)
			if tc.want.layout != nil {
				require.Equal(t, map[string]int(tc.want.layout), map[string]int(got.layout))
			}
		})
	}
	// Unknown model: the profile is known, the count is not.
	got := targetOf("all-1g.10gb", nil)
	ok, per := got.offers(MIGPrefix + "1g.10gb")
	require.True(t, ok)
	require.Zero(t, per)
}

func TestConstraintsAdmit(t *testing.T) {
	n := node("gpu-1").label("pool", "train", "gpus", "8").taint("dedicated", "ml", "NoSchedule").taint("soft", "", "PreferNoSchedule").obj()
	tests := []struct {
		name string
		c    Constraints
		want exclusionKind
	}{
		{"taint not tolerated", Constraints{}, exTaint},
		{"equal toleration", Constraints{Tolerations: []Toleration{{Key: "dedicated", Value: "ml", Effect: "NoSchedule"}}}, admitted},
		{"wrong value", Constraints{Tolerations: []Toleration{{Key: "dedicated", Value: "web"}}}, exTaint},
		{"exists all", Constraints{Tolerations: []Toleration{{Operator: "Exists"}}}, admitted},
		{"wrong effect", Constraints{Tolerations: []Toleration{{Key: "dedicated", Operator: "Exists", Effect: "NoExecute"}}}, exTaint},
	}
	tol := []Toleration{{Operator: "Exists"}}
	aff := func(terms ...SelectorTerm) Constraints { return Constraints{Tolerations: tol, Affinity: terms} }
	tests = append(tests, []struct {
		name string
		c    Constraints
		want exclusionKind
	}{
		{"selector match", Constraints{Tolerations: tol, NodeSelector: map[string]string{"pool": "train"}}, admitted},
		{"selector miss", Constraints{Tolerations: tol, NodeSelector: map[string]string{"pool": "infer"}}, exSelector},
		{"In", aff(SelectorTerm{MatchExpressions: []Requirement{{Key: "pool", Operator: "In", Values: []string{"a", "train"}}}}), admitted},
		{"NotIn", aff(SelectorTerm{MatchExpressions: []Requirement{{Key: "pool", Operator: "NotIn", Values: []string{"train"}}}}), exAffinity},
		{"DoesNotExist", aff(SelectorTerm{MatchExpressions: []Requirement{{Key: "spot", Operator: "DoesNotExist"}}}), admitted},
		{"Gt", aff(SelectorTerm{MatchExpressions: []Requirement{{Key: "gpus", Operator: "Gt", Values: []string{"4"}}}}), admitted},
		{"Lt", aff(SelectorTerm{MatchExpressions: []Requirement{{Key: "gpus", Operator: "Lt", Values: []string{"4"}}}}), exAffinity},
		{"terms ORed", aff(
			SelectorTerm{MatchExpressions: []Requirement{{Key: "pool", Operator: "In", Values: []string{"x"}}}},
			SelectorTerm{MatchFields: []Requirement{{Key: "metadata.name", Operator: "In", Values: []string{"gpu-1"}}}}), admitted},
		{"empty term matches nothing", aff(SelectorTerm{}), exAffinity},
		{"nodeName", Constraints{Tolerations: tol, NodeName: "gpu-2"}, exNodeName},
	}...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.c.admits(&n).kind)
		})
	}
	cordoned := node("gpu-2").cordon().obj()
	require.Equal(t, exCordoned, (&Constraints{}).admits(&cordoned).kind)
	unsched := Constraints{Tolerations: []Toleration{{Key: "node.kubernetes.io/unschedulable", Operator: "Exists", Effect: "NoSchedule"}}}
	require.Equal(t, admitted, unsched.admits(&cordoned).kind)
}
