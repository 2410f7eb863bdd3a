package cluster

import (
	"slices"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource/dra"
)

// DeviceTaintRules (resource.k8s.io/v1, GA in Kubernetes 1.37) taint the
// devices they select as if their driver had: kube-scheduler's
// ResourceSlice tracker appends each rule's taint to those devices before
// it allocates. The judge does the same on copies of the slices
// (withRules), with the tracker's matching (dra.Selects), so the
// allocator skips a device a rule taints NoSchedule or NoExecute as the
// scheduler does. Such a device is judged as one the driver tainted
// unhealthy: a job that only it would serve waits
// (DRA_DEVICE_UNHEALTHY), the finding naming the rule; the repaired
// cluster it is judged on has the rules' taints gone. A rule's taint of
// effect None is carried, and ignored, as the allocator ignores it.

// withRules is s with the rules' taints appended to the devices they
// select, and for each device patched, the names of the rules whose
// taints it gained (the last of its taints, in that order). s is
// returned as it is when no rule selects any of its devices; otherwise
// the copy shares everything with s but the device list and the patched
// devices' taints (cached objects are never written).
func withRules(s *resourcev1.ResourceSlice, rules []*resourcev1.DeviceTaintRule) (*resourcev1.ResourceSlice, map[int][]string) {
	if len(rules) == 0 {
		return s, nil
	}
	var out *resourcev1.ResourceSlice
	var origin map[int][]string
	for i := range s.Spec.Devices {
		rts := dra.RuleTaints(rules, s.Spec.Driver, s.Spec.Pool.Name, s.Spec.Devices[i].Name)
		if len(rts) == 0 {
			continue
		}
		if out == nil {
			cp := *s
			cp.Spec.Devices = slices.Clone(s.Spec.Devices)
			out, origin = &cp, map[int][]string{}
		}
		d := &out.Spec.Devices[i]
		d.Taints = slices.Clip(slices.Clone(d.Taints))
		for _, rt := range rts {
			d.Taints = append(d.Taints, rt.Taint)
			origin[i] = append(origin[i], rt.Rule)
		}
	}
	if out == nil {
		return s, nil
	}
	return out, origin
}

// sliceSet is the slices the allocator is given, by node.
type sliceSet struct {
	// byNode: the node-local slices of each node; shared: the slices for
	// many nodes (nodeSelector, allNodes, perDeviceNodeSelection).
	byNode map[string][]*resourcev1.ResourceSlice
	shared []*resourcev1.ResourceSlice
}

func (s *sliceSet) add(sl *resourcev1.ResourceSlice) {
	if n := sl.Spec.NodeName; n != nil && *n != "" {
		if s.byNode == nil {
			s.byNode = map[string][]*resourcev1.ResourceSlice{}
		}
		s.byNode[*n] = append(s.byNode[*n], sl)
		return
	}
	s.shared = append(s.shared, sl)
}

// forNode are the slices whose devices a node may get.
func (s *sliceSet) forNode(node string) []*resourcev1.ResourceSlice {
	if len(s.shared) == 0 {
		return s.byNode[node]
	}
	return append(append([]*resourcev1.ResourceSlice(nil), s.byNode[node]...), s.shared...)
}

// taintOrigin says where taint k of dev comes from: " from DeviceTaintRule
// name" for a rule's, "" for the driver's.
func (dev *draDevice) taintOrigin(k int) string {
	first := len(dev.device.Taints) - len(dev.rules)
	if k < first {
		return ""
	}
	return " from DeviceTaintRule " + dev.rules[k-first]
}

// keepsOff: taint t of a device keeps the scheduler off it until it is
// repaired: a health taint of the driver, or any NoSchedule or NoExecute
// taint of a DeviceTaintRule (byRule).
func keepsOff(t resourcev1.DeviceTaint, byRule bool) bool {
	return isHealthTaint(t) || (byRule && dra.Keeps(t))
}
