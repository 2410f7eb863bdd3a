package dra

import (
	"slices"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
)

// DeviceTaintRules (resource.k8s.io/v1, GA in Kubernetes 1.37) taint
// devices the way their driver does, without touching the ResourceSlices:
// kube-scheduler's ResourceSlice tracker
// (k8s.io/dynamic-resource-allocation/resourceslice/tracker, applyPatches)
// appends each rule's taint to every device the rule selects before it
// allocates. A rule's selector names, each optionally, the driver, the
// pool and the device, which must be equal where set; the empty selector
// selects every device, a rule without one none. (The selector's
// deviceClassName and CEL selectors of the beta API are tombstoned in v1:
// the tracker has nothing else to match.) The tracker's matching is not
// exported, so it is written out here, once, for the DRA judge
// (cluster) and this source alike.

// RuleTaint is a taint that a DeviceTaintRule puts on a device.
type RuleTaint struct {
	Rule  string // the rule's name
	Taint resourcev1.DeviceTaint
}

// String: "key=value:Effect from DeviceTaintRule name".
func (t RuleTaint) String() string {
	return TaintString(t.Taint) + " from DeviceTaintRule " + t.Rule
}

// TaintString is a taint as findings name it: "key=value:Effect", or
// "key:Effect" without a value.
func TaintString(t resourcev1.DeviceTaint) string {
	s := t.Key
	if t.Value != "" {
		s += "=" + t.Value
	}
	return s + ":" + string(t.Effect)
}

// Selects: rule r applies its taint to device name of driver's pool (the
// tracker's matching).
func Selects(r *resourcev1.DeviceTaintRule, driver, pool, name string) bool {
	sel := r.Spec.DeviceSelector
	switch {
	case sel == nil:
		return false // no selector selects no device
	case sel.Driver != nil && *sel.Driver != driver:
		return false
	case sel.Pool != nil && *sel.Pool != pool:
		return false
	case sel.Device != nil && *sel.Device != name:
		return false
	}
	return true
}

// RuleTaints are the taints rules put on device name of driver's pool,
// in the rules' name order (the tracker appends them in no set order; a
// device's taints are a set to the allocator).
func RuleTaints(rules []*resourcev1.DeviceTaintRule, driver, pool, name string) []RuleTaint {
	var out []RuleTaint
	for _, r := range rules {
		if Selects(r, driver, pool, name) {
			out = append(out, RuleTaint{Rule: r.Name, Taint: r.Spec.Taint})
		}
	}
	if len(out) > 1 {
		slices.SortStableFunc(out, func(a, b RuleTaint) int { return strings.Compare(a.Rule, b.Rule) })
	}
	return out
}

// Keeps: a NoSchedule or NoExecute taint keeps the scheduler from
// allocating the device to a claim that does not tolerate it. Effect
// None, and effects this version does not know, are informational.
func Keeps(t resourcev1.DeviceTaint) bool {
	return t.Effect == resourcev1.DeviceTaintEffectNoSchedule || t.Effect == resourcev1.DeviceTaintEffectNoExecute
}
