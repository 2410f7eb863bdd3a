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

// taintDevices adds a device taint to the named devices of a testdata/dra
// dump.
func taintDevices(in, key, value string, devices ...string) string {
	taint := "    taints:\n    - key: " + key + "\n"
	if value != "" {
		taint += "      value: \"" + value + "\"\n"
	}
	taint += "      effect: NoSchedule\n"
	for _, d := range devices {
		in = strings.ReplaceAll(in, "  - name: "+d+"\n", "  - name: "+d+"\n"+taint)
	}
	return in
}

func judgeDRAText(t *testing.T, in string) schedule.Result {
	t.Helper()
	b := NewBuilder()
	require.NoError(t, Load(b, "tainted.yaml", strings.NewReader(in), nil))
	ws, err := b.Workloads()
	require.NoError(t, err)
	require.Len(t, ws, 1)
	e := schedule.New()
	return e.Diagnose(e.NewCluster(b.Nodes()), ws[0])
}

// Devices NVIDIA's driver tainted unhealthy (a fatal Xid, a GPU lost) are
// skipped by the allocator, as the scheduler skips them. When the job
// would be served with them repaired, it waits for them
// (DRA_DEVICE_UNHEALTHY, never hopeless), and the finding names each
// tainted device with its taint.
func TestDRAUnhealthyDevicesWait(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "dra", "01-extended-resource-h100.yaml"))
	require.NoError(t, err)
	h100s := string(data)
	t.Run("both H100s tainted", func(t *testing.T) {
		in := taintDevices(h100s, "gpu.nvidia.com/xid", "79", "gpu-0")
		in = taintDevices(in, "gpu.nvidia.com/gpu-lost", "", "gpu-1")
		res := judgeDRAText(t, in)
		require.Equal(t, verdict.RuleDRADeviceUnhealthy, res.Rule, res.Report.Reason(0))
		require.False(t, res.Hopeless)
		require.Equal(t, 0, res.ExitCode())
		require.Empty(t, findingsOf(res, verdict.RuleShapeMismatch))
		require.Empty(t, findingsOf(res, verdict.RuleSchedulable), "the engine's fits-now speaks of cpu and memory only")
		fs := findingsOf(res, verdict.RuleDRADeviceUnhealthy)
		require.Len(t, fs, 1)
		require.Equal(t, verdict.SeverityWarn, fs[0].Severity)
		require.Equal(t, "Master (1 pod) + Worker (1 pod): the published devices would serve the DRA requests (nvidia.com/gpu from DeviceClass gpu.nvidia.com) of all 2 pending pods, "+
			"but the driver tainted matching devices as unhealthy and the scheduler allocates none of those: the healthy ones serve 0. "+
			"nvidia.com/gpu: 1 from DeviceClass gpu.nvidia.com: 2 published devices match, 2 of them tainted: "+
			"gpu-0 on dgx-h100-0 (gpu.nvidia.com/xid=79:NoSchedule); gpu-1 on dgx-h100-0 (gpu.nvidia.com/gpu-lost:NoSchedule). "+
			"The pods wait until those devices are repaired and published untainted.", fs[0].Message)
		require.Contains(t, fs[0].Remediation, "restart the DRA driver's kubelet plugin")
	})
	t.Run("one of two tainted: the gang waits, not too large", func(t *testing.T) {
		res := judgeDRAText(t, taintDevices(h100s, "gpu.nvidia.com/xid", "48", "gpu-1"))
		require.Equal(t, verdict.RuleDRADeviceUnhealthy, res.Rule, res.Report.Reason(0))
		require.False(t, res.Hopeless)
		fs := findingsOf(res, verdict.RuleDRADeviceUnhealthy)
		require.Len(t, fs, 1)
		// The Master gets the healthy H100, the Worker waits for the other.
		require.Contains(t, fs[0].Message, "Worker (1 pod): the published devices would serve the DRA requests (nvidia.com/gpu from DeviceClass gpu.nvidia.com) of all 1 pending pod, ")
		require.Contains(t, fs[0].Message, "the healthy ones serve 0. ")
		require.Contains(t, fs[0].Message, "2 published devices match, 1 of them tainted: gpu-1 on dgx-h100-0 (gpu.nvidia.com/xid=48:NoSchedule).")
		require.Empty(t, findingsOf(res, verdict.RuleGangTooLarge))
	})
	t.Run("one tainted, the other held: names the holder too", func(t *testing.T) {
		held, err := os.ReadFile(filepath.Join("testdata", "dra", "03-devices-held.yaml"))
		require.NoError(t, err)
		in := string(held)
		i := strings.Index(in, "---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n  name: notebook-a")
		require.Positive(t, i)
		j := strings.Index(in[i+4:], "---\n")
		in = taintDevices(in[:i]+in[i+4+j:], "gpu.nvidia.com/xid", "79", "gpu-0")
		res := judgeDRAText(t, in)
		require.Equal(t, verdict.RuleDRADeviceUnhealthy, res.Rule, res.Report.Reason(0))
		fs := findingsOf(res, verdict.RuleDRADeviceUnhealthy)
		require.Len(t, fs, 1)
		require.Contains(t, fs[0].Message, "gpu-0 on dgx-h100-0 (gpu.nvidia.com/xid=79:NoSchedule)")
		require.Contains(t, fs[0].Message, "Other allocated claims hold matching devices too: ResourceClaim research/notebook-b-gpu-m4t7z (pod research/notebook-b-0) holds gpu-1: ")
		// The Master waits for the held H100 (the other is unhealthy);
		// the Worker for the tainted one. The health cause comes first.
		ws := findingsOf(res, verdict.RuleWaitCapacity)
		require.Len(t, ws, 1)
		require.Contains(t, ws[0].Message, "Master (1 pod)")
		require.Contains(t, fs[0].Message, "Worker (1 pod)")
	})
	t.Run("repaired, the gang is still too large", func(t *testing.T) {
		i := strings.Index(h100s, "  - name: gpu-1\n")
		j := strings.Index(h100s, "---\napiVersion: kubeflow.org/v1")
		require.Positive(t, i)
		require.Greater(t, j, i)
		res := judgeDRAText(t, taintDevices(h100s[:i]+h100s[j:], "gpu.nvidia.com/xid", "79", "gpu-0"))
		require.Equal(t, verdict.RuleGangTooLarge, res.Rule, res.Report.Reason(0))
		require.True(t, res.Hopeless)
		// The Master would get the repaired H100, the Worker none.
		gs := findingsOf(res, verdict.RuleGangTooLarge)
		require.Len(t, gs, 1)
		require.Contains(t, gs[0].Message, "Worker (1 pod): even with every device free, the published devices serve the DRA requests (nvidia.com/gpu from DeviceClass gpu.nvidia.com) of 0 of the 1 pending pod at once.")
		require.Len(t, findingsOf(res, verdict.RuleDRADeviceUnhealthy), 1)
	})
	t.Run("a tainted GPU besides two healthy ones: the job fits", func(t *testing.T) {
		// gpu-2: a copy of gpu-1 (up to the next document), lost.
		i := strings.Index(h100s, "  - name: gpu-1\n")
		j := i + strings.Index(h100s[i:], "---\n")
		in := h100s[:j] + strings.Replace(h100s[i:j], "  - name: gpu-1\n", "  - name: gpu-2\n", 1) + h100s[j:]
		res := judgeDRAText(t, taintDevices(in, "gpu.nvidia.com/gpu-lost", "", "gpu-2"))
		require.Equal(t, verdict.RuleSchedulable, res.Rule, res.Report.Reason(0))
		require.Empty(t, findingsOf(res, verdict.RuleDRADeviceUnhealthy))
	})
	t.Run("a taint that is not the driver's health taint stays a shape mismatch", func(t *testing.T) {
		res := judgeDRAText(t, taintDevices(h100s, "example.com/reserved", "team-a", "gpu-0", "gpu-1"))
		require.Equal(t, verdict.RuleShapeMismatch, res.Rule, res.Report.Reason(0))
		require.True(t, res.Hopeless)
		fs := findingsOf(res, verdict.RuleShapeMismatch)
		require.Len(t, fs, 1)
		require.Contains(t, fs[0].Message, "2 devices match on their own, 2 of them with a device taint the request does not tolerate: gpu-0 on dgx-h100-0 (example.com/reserved=team-a:NoSchedule)")
		require.Empty(t, findingsOf(res, verdict.RuleDRADeviceUnhealthy))
	})
}
