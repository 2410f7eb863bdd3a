package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/verdict"
)

// taintRule is a DeviceTaintRule document: selector is its
// spec.deviceSelector lines ("" for none), its taint key=value:effect.
func taintRule(name, selector, key, value, effect string) string {
	s := "---\napiVersion: resource.k8s.io/v1\nkind: DeviceTaintRule\nmetadata:\n  name: " + name + "\nspec:\n" + selector +
		"  taint:\n    key: " + key + "\n"
	if value != "" {
		s += "    value: " + value + "\n"
	}
	return s + "    effect: " + effect + "\n"
}

// bySelector selects device of the dump's driver and pool (a field left
// "" is not set).
func bySelector(driver, pool, device string) string {
	s := "  deviceSelector:\n"
	for _, f := range [][2]string{{"driver", driver}, {"pool", pool}, {"device", device}} {
		if f[1] != "" {
			s += "    " + f[0] + ": " + f[1] + "\n"
		}
	}
	if s == "  deviceSelector:\n" {
		return "  deviceSelector: {}\n"
	}
	return s
}

const maintKey = "gpu.example.com/maintenance"

// A device a DeviceTaintRule taints NoSchedule or NoExecute is skipped
// by the allocator, as kube-scheduler's tracker makes it skip it, and is
// judged as a device the driver tainted unhealthy: the job waits
// (DRA_DEVICE_UNHEALTHY), the finding naming the rule.
func TestDRADeviceTaintRules(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "dra", "01-extended-resource-h100.yaml"))
	require.NoError(t, err)
	h100s := string(data)
	const head = "Master (1 pod) + Worker (1 pod): the published devices would serve the DRA requests (nvidia.com/gpu from DeviceClass gpu.nvidia.com) of all 2 pending pods, " +
		"but matching devices are tainted (as unhealthy by the driver, or by a DeviceTaintRule) and the scheduler allocates none of those: the healthy ones serve 0. " +
		"nvidia.com/gpu: 1 from DeviceClass gpu.nvidia.com: 2 published devices match, 2 of them tainted: "
	unhealthy := func(t *testing.T, in, tainted string) {
		t.Helper()
		res := judgeDRAText(t, in)
		require.Equal(t, verdict.RuleDRADeviceUnhealthy, res.Rule, res.Report.Reason(0))
		require.False(t, res.Hopeless)
		require.Equal(t, 0, res.ExitCode())
		fs := findingsOf(res, verdict.RuleDRADeviceUnhealthy)
		require.Len(t, fs, 1)
		require.Equal(t, head+tainted+". The pods wait until those devices are repaired and published untainted, and the rules' taints removed.", fs[0].Message)
		require.Contains(t, fs[0].Remediation, "kubectl delete devicetaintrule NAME")
	}
	schedulable := func(t *testing.T, in string) {
		t.Helper()
		res := judgeDRAText(t, in)
		require.Equal(t, verdict.RuleSchedulable, res.Rule, res.Report.Reason(0))
		require.Empty(t, findingsOf(res, verdict.RuleDRADeviceUnhealthy))
	}
	t.Run("by driver, pool and device", func(t *testing.T) {
		unhealthy(t, h100s+taintRule("maint-0", bySelector("gpu.nvidia.com", "dgx-h100-0", "gpu-0"), maintKey, "drain", "NoSchedule")+
			taintRule("maint-1", bySelector("gpu.nvidia.com", "dgx-h100-0", "gpu-1"), maintKey, "", "NoExecute"),
			"gpu-0 on dgx-h100-0 ("+maintKey+"=drain:NoSchedule from DeviceTaintRule maint-0); gpu-1 on dgx-h100-0 ("+maintKey+":NoExecute from DeviceTaintRule maint-1)")
	})
	t.Run("by pool", func(t *testing.T) {
		unhealthy(t, h100s+taintRule("node-0", bySelector("", "dgx-h100-0", ""), maintKey, "", "NoSchedule"),
			"gpu-0 on dgx-h100-0 ("+maintKey+":NoSchedule from DeviceTaintRule node-0); gpu-1 on dgx-h100-0 ("+maintKey+":NoSchedule from DeviceTaintRule node-0)")
	})
	t.Run("empty selector: every device", func(t *testing.T) {
		unhealthy(t, h100s+taintRule("all", bySelector("", "", ""), maintKey, "", "NoSchedule"),
			"gpu-0 on dgx-h100-0 ("+maintKey+":NoSchedule from DeviceTaintRule all); gpu-1 on dgx-h100-0 ("+maintKey+":NoSchedule from DeviceTaintRule all)")
	})
	t.Run("another driver's, pool's or device's rule: no device", func(t *testing.T) {
		schedulable(t, h100s+taintRule("other-driver", bySelector("tpu.example.com", "", ""), maintKey, "", "NoSchedule")+
			taintRule("other-pool", bySelector("gpu.nvidia.com", "dgx-h100-1", ""), maintKey, "", "NoSchedule")+
			taintRule("other-device", bySelector("", "", "gpu-7"), maintKey, "", "NoSchedule"))
	})
	t.Run("nil selector: no device", func(t *testing.T) {
		schedulable(t, h100s+taintRule("nothing", "", maintKey, "", "NoExecute"))
	})
	t.Run("effect None is informational", func(t *testing.T) {
		schedulable(t, h100s+taintRule("note", bySelector("", "", ""), maintKey, "", "None"))
	})
	t.Run("one of two devices: the Worker waits for it", func(t *testing.T) {
		res := judgeDRAText(t, h100s+taintRule("maint-1", bySelector("", "", "gpu-1"), maintKey, "", "NoSchedule"))
		require.Equal(t, verdict.RuleDRADeviceUnhealthy, res.Rule, res.Report.Reason(0))
		fs := findingsOf(res, verdict.RuleDRADeviceUnhealthy)
		require.Len(t, fs, 1)
		require.Contains(t, fs[0].Message, "Worker (1 pod): ")
		require.Contains(t, fs[0].Message, "2 published devices match, 1 of them tainted: gpu-1 on dgx-h100-0 ("+maintKey+":NoSchedule from DeviceTaintRule maint-1).")
	})
	t.Run("a rule and the driver's health taint on one device", func(t *testing.T) {
		in := taintDevices(h100s, "gpu.nvidia.com/xid", "79", "gpu-0")
		unhealthy(t, in+taintRule("maint", bySelector("gpu.nvidia.com", "", ""), maintKey, "", "NoSchedule"),
			"gpu-0 on dgx-h100-0 (gpu.nvidia.com/xid=79:NoSchedule, "+maintKey+":NoSchedule from DeviceTaintRule maint); gpu-1 on dgx-h100-0 ("+maintKey+":NoSchedule from DeviceTaintRule maint)")
	})
	t.Run("a rule and another taint of the driver: gone with the rule, the devices still do not serve", func(t *testing.T) {
		in := taintDevices(h100s, "example.com/reserved", "team-a", "gpu-0", "gpu-1")
		res := judgeDRAText(t, in+taintRule("maint", bySelector("", "", ""), maintKey, "", "NoSchedule"))
		require.Equal(t, verdict.RuleShapeMismatch, res.Rule, res.Report.Reason(0))
		fs := findingsOf(res, verdict.RuleShapeMismatch)
		require.Len(t, fs, 1)
		require.Contains(t, fs[0].Message, "gpu-0 on dgx-h100-0 (example.com/reserved=team-a:NoSchedule, "+maintKey+":NoSchedule from DeviceTaintRule maint)")
		require.Empty(t, findingsOf(res, verdict.RuleDRADeviceUnhealthy))
	})
	t.Run("the published slices are not changed", func(t *testing.T) {
		in := h100s + taintRule("maint", bySelector("", "", ""), maintKey, "", "NoSchedule")
		b := NewBuilder()
		require.NoError(t, Load(b, "rules.yaml", strings.NewReader(in), nil))
		j := b.draJudge()
		require.True(t, j.sick)
		// The published slices are the Builder's, untouched; the judge
		// allocates from copies carrying the rule's taint.
		pool := b.DRAObjects().Pool("gpu.nvidia.com", "dgx-h100-0")
		require.Len(t, pool, 1)
		for _, d := range pool[0].Spec.Devices {
			require.Empty(t, d.Taints, "the published slice was changed")
		}
		require.NotSame(t, pool[0], j.all[0].slice)
		require.Len(t, j.all[0].device.Taints, 1)
		require.Equal(t, []string{"maint"}, j.all[0].rules)
		require.Len(t, b.DRAObjects().TaintRules(), 1)
	})
	t.Run("the beta API's CEL selectors are refused", func(t *testing.T) {
		sel := "  deviceSelector:\n    selectors:\n    - cel:\n        expression: device.attributes['gpu.nvidia.com'].uuid == 'GPU-1'\n"
		err := Load(NewBuilder(), "rules.yaml", strings.NewReader(h100s+taintRule("cel", sel, maintKey, "", "NoSchedule")), nil)
		require.ErrorContains(t, err, "(DeviceTaintRule cel): spec.deviceSelector.selectors is not a field of resource.k8s.io/v1 DeviceTaintRule")
	})
	t.Run("a DeviceTaintRuleList", func(t *testing.T) {
		list := "---\napiVersion: resource.k8s.io/v1\nkind: DeviceTaintRuleList\nitems:\n- metadata:\n    name: all\n  spec:\n    deviceSelector: {}\n    taint:\n      key: " + maintKey + "\n      effect: NoSchedule\n"
		unhealthy(t, h100s+list, "gpu-0 on dgx-h100-0 ("+maintKey+":NoSchedule from DeviceTaintRule all); gpu-1 on dgx-h100-0 ("+maintKey+":NoSchedule from DeviceTaintRule all)")
	})
}

// Live diagnose lists the DeviceTaintRules with the other DRA objects.
func TestLiveDRADeviceTaintRule(t *testing.T) {
	objs := draObjectsOf(t, "01-extended-resource-h100.yaml")
	job := kubeflowtest.MakePyTorchJob("bert-ext", "ml").Master().Workers(1).Request("nvidia.com/gpu", "1").Obj()
	j, err := kubeflow.FromObject(job)
	require.NoError(t, err)
	rule := &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "maint"}, Spec: resourcev1.DeviceTaintRuleSpec{
		DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr.To("gpu.nvidia.com")},
		Taint:          resourcev1.DeviceTaint{Key: maintKey, Effect: resourcev1.DeviceTaintEffectNoSchedule},
	}}
	objs = append(append(objs, job, rule), jobPods(j, "0/1 nodes are available: 1 cannot allocate all claims.")...)
	res := diagnoseLiveJob(t, "ml", "bert-ext", objs...)
	require.Equal(t, verdict.RuleDRADeviceUnhealthy, res.Rule, res.Report.Reason(0))
	fs := findingsOf(res, verdict.RuleDRADeviceUnhealthy)
	require.Len(t, fs, 1)
	require.Contains(t, fs[0].Message, "gpu-0 on dgx-h100-0 ("+maintKey+":NoSchedule from DeviceTaintRule maint)")
}
