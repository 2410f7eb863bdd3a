package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

// judgeDRAFile loads a testdata/dra dump, with extra YAML appended, and
// judges its one workload.
func judgeDRAFile(t *testing.T, name, extra string) schedule.Result {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "dra", name))
	require.NoError(t, err)
	b := NewBuilder()
	require.NoError(t, Load(b, name, strings.NewReader(string(data)+extra), nil))
	ws, err := b.Workloads()
	require.NoError(t, err)
	require.Len(t, ws, 1)
	e := schedule.New()
	return e.Diagnose(e.NewCluster(b.Nodes()), ws[0])
}

func findingsOf(res schedule.Result, rule string) []verdict.Finding {
	var out []verdict.Finding
	for _, f := range res.Report.Findings {
		if f.Rule == rule {
			out = append(out, f)
		}
	}
	return out
}

func TestDRAJudgedOnPublishedDevices(t *testing.T) {
	t.Run("nvidia.com/gpu served by a DeviceClass fits two H100s", func(t *testing.T) {
		res := judgeDRAFile(t, "01-extended-resource-h100.yaml", "")
		require.Equal(t, verdict.RuleSchedulable, res.Rule)
		require.False(t, res.Hopeless)
		require.Empty(t, findingsOf(res, verdict.RuleShapeMismatch))
		require.Empty(t, findingsOf(res, verdict.RuleDRANotJudged))
		fits := findingsOf(res, verdict.RuleSchedulable)
		require.NotEmpty(t, fits)
		require.Contains(t, fits[0].Message, "Master (1 pod) + Worker (1 pod): the published devices serve the DRA requests (nvidia.com/gpu from DeviceClass gpu.nvidia.com) of all 2 pending pods now. Each pod asks nvidia.com/gpu: 1 from DeviceClass gpu.nvidia.com.")
		require.Equal(t, 0, res.ExitCode())
	})
	t.Run("a claim template asking 7g.80gb on 1g.10gb devices is a shape mismatch naming the nearest", func(t *testing.T) {
		res := judgeDRAFile(t, "02-claim-profile-mismatch.yaml", "")
		require.Equal(t, verdict.RuleShapeMismatch, res.Rule)
		require.True(t, res.Hopeless)
		fs := findingsOf(res, verdict.RuleShapeMismatch)
		require.Len(t, fs, 1)
		msg := fs[0].Message
		require.Contains(t, msg, "Master (1 pod) + Worker (1 pod)")
		require.Contains(t, msg, "profile == '7g.80gb': no device matches")
		require.Contains(t, msg, "nearest: 7 x MIG 1g.10gb of NVIDIA H100 80GB HBM3 (16 SMs, 9984Mi, driver 580.126.20) on dgx-h100-1, e.g. gpu-0-mig-1g10gb-19-0")
		require.Equal(t, 1, res.ExitCode())
	})
	t.Run("every matching device held by other claims waits, naming them", func(t *testing.T) {
		res := judgeDRAFile(t, "03-devices-held.yaml", "")
		require.Equal(t, verdict.RuleWaitCapacity, res.Rule)
		require.False(t, res.Hopeless)
		require.Empty(t, res.Placement)
		fs := findingsOf(res, verdict.RuleWaitCapacity)
		require.Len(t, fs, 1)
		require.Contains(t, fs[0].Message, "of all 2 pending pods on an empty cluster, but of 0 now")
		require.Contains(t, fs[0].Message, "ResourceClaim research/notebook-a-gpu-x2k9q (pod research/notebook-a-0) holds gpu-0: NVIDIA H100 80GB HBM3 (81559Mi, driver 580.126.20) on dgx-h100-0")
		require.Contains(t, fs[0].Message, "ResourceClaim research/notebook-b-gpu-m4t7z (pod research/notebook-b-0) holds")
		// The engine's "fits now" speaks of cpu and memory only: it is
		// dropped while the devices wait.
		require.Empty(t, findingsOf(res, verdict.RuleSchedulable))
	})
}

// The Master and the Worker compete for the same devices: with one of
// the two H100s held, each pod alone would fit now, the job does not.
func TestDRAJudgesTheJobAsAWhole(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "dra", "03-devices-held.yaml"))
	require.NoError(t, err)
	// Drop the second holder: gpu-1 is free, gpu-0 held.
	in := string(data)
	i := strings.Index(in, "---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n  name: notebook-b")
	require.Positive(t, i)
	j := strings.Index(in[i+4:], "---\n")
	in = in[:i] + in[i+4+j:]
	b := NewBuilder()
	require.NoError(t, Load(b, "held-one.yaml", strings.NewReader(in), nil))
	ws, err := b.Workloads()
	require.NoError(t, err)
	e := schedule.New()
	res := e.Diagnose(e.NewCluster(b.Nodes()), ws[0])
	require.Equal(t, verdict.RuleWaitCapacity, res.Rule)
	fs := findingsOf(res, verdict.RuleWaitCapacity)
	require.Len(t, fs, 1, "the Master takes the free H100, the Worker waits")
	require.Contains(t, fs[0].Message, "Worker (1 pod)")
	require.Contains(t, fs[0].Message, "notebook-a-gpu-x2k9q")
	require.NotContains(t, fs[0].Message, "notebook-b")
}

// One H100 published, two pods asking one each: the job never fits.
func TestDRAGangLargerThanThePublishedDevices(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "dra", "01-extended-resource-h100.yaml"))
	require.NoError(t, err)
	in := string(data)
	i := strings.Index(in, "  - name: gpu-1\n")
	j := strings.Index(in, "---\napiVersion: kubeflow.org/v1")
	require.Positive(t, i)
	require.Greater(t, j, i)
	in = in[:i] + in[j:]
	b := NewBuilder()
	require.NoError(t, Load(b, "one-h100.yaml", strings.NewReader(in), nil))
	ws, err := b.Workloads()
	require.NoError(t, err)
	e := schedule.New()
	res := e.Diagnose(e.NewCluster(b.Nodes()), ws[0])
	require.Equal(t, verdict.RuleGangTooLarge, res.Rule)
	require.True(t, res.Hopeless)
}

// Without published devices the judgement stands down as before.
func TestDRAWithoutSlicesStaysUnjudged(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "dra", "01-extended-resource-h100.yaml"))
	require.NoError(t, err)
	in := string(data)
	i := strings.Index(in, "---\napiVersion: resource.k8s.io/v1\nkind: ResourceSlice")
	j := strings.Index(in, "---\napiVersion: kubeflow.org/v1")
	in = in[:i] + in[j:]
	b := NewBuilder()
	require.NoError(t, Load(b, "no-slices.yaml", strings.NewReader(in), nil))
	ws, err := b.Workloads()
	require.NoError(t, err)
	e := schedule.New()
	res := e.Diagnose(e.NewCluster(b.Nodes()), ws[0])
	require.Equal(t, verdict.RuleDRANotJudged, res.Rule)
}

// Where a node also advertises nvidia.com/gpu from the device plugin,
// the scheduler may serve the request from either: the job is not judged
// on the DRA devices alone (here none would be free).
func TestDRAMappedResourceAlsoAdvertisedStaysUnjudged(t *testing.T) {
	plugin := `---
apiVersion: v1
kind: Node
metadata:
  name: plugin-a100-0
status:
  allocatable:
    cpu: "64"
    memory: 512Gi
    pods: "110"
    nvidia.com/gpu: "8"
`
	res := judgeDRAFile(t, "03-devices-held.yaml", plugin)
	require.Equal(t, verdict.RuleDRANotJudged, res.Rule)
}

// Devices the driver tainted (an XID error) are skipped by the allocator:
// with both H100s tainted, no device serves the job, and the finding says
// the matching devices carry taints the request does not tolerate.
func TestDRATaintedDevicesNamed(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "dra", "01-extended-resource-h100.yaml"))
	require.NoError(t, err)
	taint := "    taints:\n    - key: gpu.nvidia.com/xid\n      value: \"79\"\n      effect: NoSchedule\n"
	in := strings.ReplaceAll(string(data), "  - name: gpu-0\n", "  - name: gpu-0\n"+taint)
	in = strings.ReplaceAll(in, "  - name: gpu-1\n", "  - name: gpu-1\n"+taint)
	b := NewBuilder()
	require.NoError(t, Load(b, "tainted.yaml", strings.NewReader(in), nil))
	ws, err := b.Workloads()
	require.NoError(t, err)
	e := schedule.New()
	res := e.Diagnose(e.NewCluster(b.Nodes()), ws[0])
	require.Equal(t, verdict.RuleShapeMismatch, res.Rule, res.Report.Reason(0))
	fs := findingsOf(res, verdict.RuleShapeMismatch)
	require.Len(t, fs, 1)
	require.Contains(t, fs[0].Message, "2 devices match on their own, 2 of them with a device taint the request does not tolerate: gpu-0 on dgx-h100-0 (gpu.nvidia.com/xid=79:NoSchedule)")
}
