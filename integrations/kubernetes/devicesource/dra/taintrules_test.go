package dra

import (
	"testing"

	"github.com/stretchr/testify/require"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/verdict"
)

// rule is a DeviceTaintRule name with selector sel (nil: none) and a
// taint of key and effect.
func rule(name string, sel *resourcev1.DeviceTaintSelector, key string, effect resourcev1.DeviceTaintEffect) *resourcev1.DeviceTaintRule {
	return &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.DeviceTaintRuleSpec{DeviceSelector: sel, Taint: resourcev1.DeviceTaint{Key: key, Effect: effect}}}
}

// The tracker's matching: driver, pool and device each equal where set;
// the empty selector selects every device, a nil one none.
func TestSelects(t *testing.T) {
	for _, tc := range []struct {
		name string
		sel  *resourcev1.DeviceTaintSelector
		want []bool // gpu.nvidia.com/n1/gpu-0, gpu.nvidia.com/n1/gpu-1, gpu.nvidia.com/n2/gpu-0, other.example.com/n1/gpu-0
	}{
		{"nil selector", nil, []bool{false, false, false, false}},
		{"empty selector", &resourcev1.DeviceTaintSelector{}, []bool{true, true, true, true}},
		{"driver", &resourcev1.DeviceTaintSelector{Driver: ptr.To("gpu.nvidia.com")}, []bool{true, true, true, false}},
		{"pool", &resourcev1.DeviceTaintSelector{Pool: ptr.To("n1")}, []bool{true, true, false, true}},
		{"device", &resourcev1.DeviceTaintSelector{Device: ptr.To("gpu-0")}, []bool{true, false, true, true}},
		{"driver, pool and device", &resourcev1.DeviceTaintSelector{Driver: ptr.To("gpu.nvidia.com"), Pool: ptr.To("n1"), Device: ptr.To("gpu-0")}, []bool{true, false, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rule("r", tc.sel, "k", resourcev1.DeviceTaintEffectNoSchedule)
			got := []bool{Selects(r, "gpu.nvidia.com", "n1", "gpu-0"), Selects(r, "gpu.nvidia.com", "n1", "gpu-1"),
				Selects(r, "gpu.nvidia.com", "n2", "gpu-0"), Selects(r, "other.example.com", "n1", "gpu-0")}
			require.Equal(t, tc.want, got)
		})
	}
	rs := []*resourcev1.DeviceTaintRule{
		rule("z-all", &resourcev1.DeviceTaintSelector{}, "example.com/z", resourcev1.DeviceTaintEffectNone),
		rule("a-gpu0", &resourcev1.DeviceTaintSelector{Device: ptr.To("gpu-0")}, "example.com/a", resourcev1.DeviceTaintEffectNoExecute),
		rule("none", nil, "example.com/n", resourcev1.DeviceTaintEffectNoSchedule),
	}
	got := RuleTaints(rs, "gpu.nvidia.com", "n1", "gpu-0")
	require.Len(t, got, 2)
	require.Equal(t, "example.com/a:NoExecute from DeviceTaintRule a-gpu0", got[0].String())
	require.Equal(t, "example.com/z:None from DeviceTaintRule z-all", got[1].String())
	require.True(t, Keeps(got[0].Taint))
	require.False(t, Keeps(got[1].Taint))
	require.Empty(t, RuleTaints(nil, "gpu.nvidia.com", "n1", "gpu-0"))
}

// An allocated device a DeviceTaintRule taints NoSchedule or NoExecute
// fails its rank with DEVICE_TAINTED naming the rule, as a device its
// driver tainted does; a rule's taint of effect None does not.
func TestRuleTaintedDevice(t *testing.T) {
	sl := clustertest.GPUSlice("n1",
		clustertest.DRAGPU{UUID: gpuA, Product: h100, Driver: driver, MemoryGiB: 80},
		clustertest.DRAGPU{UUID: gpuB, Product: h100, Driver: driver, MemoryGiB: 80})
	cached := sl.DeepCopy()
	o := &objects{claims: map[string]*resourcev1.ResourceClaim{"ns/a": claimed("a", "gpu-0"), "ns/b": claimed("b", "gpu-1")}, slices: []*resourcev1.ResourceSlice{sl}}
	maint := func(name string, sel *resourcev1.DeviceTaintSelector, effect resourcev1.DeviceTaintEffect) *resourcev1.DeviceTaintRule {
		return rule(name, sel, "gpu.example.com/maintenance", effect)
	}
	gpu1 := &resourcev1.DeviceTaintSelector{Driver: ptr.To("gpu.nvidia.com"), Pool: ptr.To("n1"), Device: ptr.To("gpu-1")}
	for _, pools := range []*Pools{nil, {}} {
		s := &Source{Objects: o, Pools: pools}
		t.Run("by driver, pool and device", func(t *testing.T) {
			o.rules = []*resourcev1.DeviceTaintRule{maint("maint-gpu1", gpu1, resourcev1.DeviceTaintEffectNoSchedule)}
			ok := rankOf(t, s, podWith("p0", "a"), 0)
			require.Equal(t, verdict.VerdictPass, ok.Report.Report.Verdict, "%+v", ok.Report.Report.Findings)
			bad := rankOf(t, s, podWith("p1", "b"), 1)
			require.Equal(t, []string{verdict.RuleDeviceTainted}, rules(bad.Report.Report))
			f := bad.Report.Report.Findings[0]
			require.Equal(t, verdict.SeverityFail, f.Severity)
			require.Equal(t, "device gpu.nvidia.com/n1/gpu-1 ("+gpuB+") of ResourceClaim ns/b carries the taint(s) gpu.example.com/maintenance:NoSchedule from DeviceTaintRule maint-gpu1: "+
				"DeviceTaintRule maint-gpu1 took it out of service", f.Message)
			require.Contains(t, f.Remediation, "kubectl delete devicetaintrule maint-gpu1")
			require.NotContains(t, f.Remediation, "dmesg")
		})
		t.Run("empty selector: every device", func(t *testing.T) {
			o.rules = []*resourcev1.DeviceTaintRule{maint("drain", &resourcev1.DeviceTaintSelector{}, resourcev1.DeviceTaintEffectNoExecute)}
			for i, c := range []string{"a", "b"} {
				r := rankOf(t, s, podWith("p", c), i)
				require.Equal(t, []string{verdict.RuleDeviceTainted}, rules(r.Report.Report))
				require.Contains(t, r.Report.Report.Findings[0].Message, "gpu.example.com/maintenance:NoExecute from DeviceTaintRule drain")
			}
		})
		t.Run("nil selector: no device", func(t *testing.T) {
			o.rules = []*resourcev1.DeviceTaintRule{maint("nothing", nil, resourcev1.DeviceTaintEffectNoExecute)}
			for i, c := range []string{"a", "b"} {
				r := rankOf(t, s, podWith("p", c), i)
				require.Equal(t, verdict.VerdictPass, r.Report.Report.Verdict, "%+v", r.Report.Report.Findings)
			}
		})
		t.Run("effect None is informational", func(t *testing.T) {
			o.rules = []*resourcev1.DeviceTaintRule{maint("note", gpu1, resourcev1.DeviceTaintEffectNone)}
			r := rankOf(t, s, podWith("p1", "b"), 1)
			require.Equal(t, verdict.VerdictPass, r.Report.Report.Verdict, "%+v", r.Report.Report.Findings)
		})
		t.Run("a rule and the driver's taint on one device", func(t *testing.T) {
			sl.Spec.Devices[1].Taints = []resourcev1.DeviceTaint{{Key: "gpu.nvidia.com/xid", Value: "79", Effect: resourcev1.DeviceTaintEffectNoSchedule}}
			defer func() { sl.Spec.Devices[1].Taints = nil }()
			o.rules = []*resourcev1.DeviceTaintRule{maint("maint-gpu1", gpu1, resourcev1.DeviceTaintEffectNoSchedule)}
			r := rankOf(t, s, podWith("p1", "b"), 1)
			require.Equal(t, []string{verdict.RuleDeviceTainted}, rules(r.Report.Report))
			f := r.Report.Report.Findings[0]
			require.Contains(t, f.Message, "carries the taint(s) gpu.nvidia.com/xid=79:NoSchedule, gpu.example.com/maintenance:NoSchedule from DeviceTaintRule maint-gpu1: "+
				"its driver marked it unhealthy, and DeviceTaintRule maint-gpu1 took it out of service")
			require.Contains(t, f.Remediation, "dmesg")
			require.Contains(t, f.Remediation, "kubectl delete devicetaintrule maint-gpu1")
		})
	}
	sl.Spec.Devices[1].Taints = nil
	require.Equal(t, cached, sl, "the published slice was changed")
}
