package cluster

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/rankgate/rankgate/preflight/schedule"
)

// A DRA pod set is judged with the scheduler's own allocator and CEL
// (k8s.io/dynamic-resource-allocation): its pending pods' claims are
// allocated one pod after the other, node by node, first on an empty
// cluster (can the published devices ever serve them?), then with the
// devices that allocated claims hold (do they fit now?). What the pods
// ask besides DRA devices (cpu, memory, node selectors) is judged by the
// engine as usual; which node a DRA device's pod may go to is not
// combined with it yet.

// draFeatures are the allocator features of Kubernetes 1.36 by default
// (partitionable devices, prioritized lists, device taints).
var draFeatures = structured.Features{
	AdminAccess: true, PrioritizedList: true, PartitionableDevices: true, DeviceTaints: true,
}

// maxDRAPods bounds the pods of one set that are allocated one by one;
// a larger set stays unjudged (DRA_NOT_JUDGED).
const maxDRAPods = 4096

// draDevice is a published device and where it is, with the taints of
// the DeviceTaintRules that select it.
type draDevice struct {
	id     structured.DeviceID
	slice  *resourcev1.ResourceSlice
	device *resourcev1.Device
	// rules name the DeviceTaintRules whose taints are the last of
	// device.Taints, in order (dra_rules.go).
	rules []string
}

// draJudge holds what judging every DRA pod set of one snapshot needs.
type draJudge struct {
	b       *Builder
	nodes   []*corev1.Node
	devices []draDevice
	all     []*draDevice // every published device
	// heldDevs: published devices that allocated claims hold.
	heldDevs []*draDevice
	byID     map[structured.DeviceID]*draDevice
	// held: devices of allocated claims, with the claim holding them.
	held   map[structured.DeviceID]*resourcev1.ResourceClaim
	cache  *cel.Cache
	lister classLister
	// slices: the published slices with the DeviceTaintRules' taints, as
	// the scheduler allocates from them; plain: as published, on which
	// the devices are judged repaired (the rules gone).
	slices, plain sliceSet
	// sick: some published device carries a health taint (healthTaints)
	// or a NoSchedule or NoExecute taint of a DeviceTaintRule.
	sick bool
	// peers: the devices consuming each counter set (dra_counters.go).
	peers map[counterKey][]*draDevice
}

// slicesFor are the slices whose devices a node may get (heal: with the
// rules' taints gone).
func (j *draJudge) slicesFor(node string, heal bool) []*resourcev1.ResourceSlice {
	if heal {
		return j.plain.forNode(node)
	}
	return j.slices.forNode(node)
}

func (b *Builder) draJudge() *draJudge {
	if b.draJ != nil {
		return b.draJ
	}
	j := &draJudge{b: b, byID: map[structured.DeviceID]*draDevice{}, held: map[structured.DeviceID]*resourcev1.ResourceClaim{},
		cache: cel.NewCache(256, cel.Features{}), lister: classLister(b.dra.classObjs)}
	// Nodes the allocator tries: where only node-local slices exist
	// (spec.nodeName), the nodes they name; with slices for many nodes
	// (nodeSelector, allNodes), every node.
	known := map[string]bool{}
	everyNode := false
	for _, s := range b.dra.slices {
		everyNode = everyNode || s.Spec.NodeName == nil || *s.Spec.NodeName == ""
	}
	if everyNode {
		for _, n := range b.nodes {
			known[n.Name] = true
			j.nodes = append(j.nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels}})
		}
	}
	for _, plain := range b.dra.slices {
		s, origin := withRules(plain, b.dra.rules)
		j.slices.add(s)
		j.plain.add(plain)
		if n := s.Spec.NodeName; n != nil && *n != "" && !known[*n] {
			known[*n] = true
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: *n}}
			if i, ok := b.nodeIdx[*n]; ok {
				node.Labels = b.nodes[i].Labels
			}
			j.nodes = append(j.nodes, node)
		}
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			dev := draDevice{id: structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, d.Name), slice: s, device: d, rules: origin[i]}
			j.devices = append(j.devices, dev)
			for k, t := range d.Taints {
				j.sick = j.sick || keepsOff(t, dev.taintOrigin(k) != "")
			}
		}
	}
	for i := range j.devices {
		j.byID[j.devices[i].id] = &j.devices[i]
		j.all = append(j.all, &j.devices[i])
	}
	keys := make([]string, 0, len(b.dra.claims))
	for k := range b.dra.claims {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c := b.dra.claims[k]
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			j.held[id] = c
			if d, ok := j.byID[id]; ok {
				j.heldDevs = append(j.heldDevs, d)
			}
		}
	}
	b.draJ = j
	return j
}

// judgeDRA judges the DRA pod sets of a workload together on the
// published devices: the sets' pods are allocated one after the other,
// each taking the devices the ones before it took, so a Master and its
// Workers compete for the same devices. Each judged set gets
// ps.DRAFacts, and its Requests leave out the extended resources DRA
// serves. refs are the sets' pod resource claims, by index. Sets stay
// unjudged (DRA_NOT_JUDGED) when no driver publishes devices in the input
// or their claims cannot be resolved.
func (b *Builder) judgeDRA(w *schedule.Workload, refs [][]corev1.PodResourceClaim) {
	if !b.dra.published() {
		return
	}
	j := b.draJudge()
	empty := sets.New[structured.DeviceID]()
	now := sets.New[structured.DeviceID]()
	var healed sets.Set[structured.DeviceID]
	for id := range j.held {
		now.Insert(id)
	}
	for i := range w.PodSets {
		ps := &w.PodSets[i]
		if ps.DRA == "" || ps.Count <= 0 || i >= len(refs) {
			continue
		}
		pod, err := j.podClaims(w.Namespace, refs[i], ps.Requests)
		if err != nil {
			continue
		}
		facts, err := j.judge(pod, ps.Pending(), empty, now, &healed)
		if err != nil {
			continue
		}
		ps.DRAFacts, ps.Requests = facts, pod.rest
	}
}

// podDemand is what one pod of a set asks through DRA.
type podDemand struct {
	// perPod: claims each pod gets of its own (from templates and from
	// extended resources); shared: existing unallocated claims the pods
	// share, allocated once.
	perPod, shared []*resourcev1.ResourceClaim
	descs          []reqDesc
	rest           schedule.Resources
}

type reqDesc struct {
	text string
	req  *resourcev1.DeviceRequest
}

func (j *draJudge) podClaims(ns string, refs []corev1.PodResourceClaim, req schedule.Resources) (*podDemand, error) {
	d := &podDemand{rest: schedule.Resources{}}
	for _, ref := range refs {
		switch {
		case ref.ResourceClaimTemplateName != nil:
			key := ns + "/" + *ref.ResourceClaimTemplateName
			t, ok := j.b.dra.templates[key]
			if !ok {
				return nil, fmt.Errorf("resource claim %s: ResourceClaimTemplate %s is not in the input", ref.Name, key)
			}
			c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pod-" + ref.Name}, Spec: *t.Spec.Spec.DeepCopy()}
			defaultRequests(c)
			d.perPod = append(d.perPod, c)
			d.describe(c, "claim template "+key)
		case ref.ResourceClaimName != nil:
			key := ns + "/" + *ref.ResourceClaimName
			c, ok := j.b.dra.claims[key]
			if !ok {
				return nil, fmt.Errorf("resource claim %s: ResourceClaim %s is not in the input", ref.Name, key)
			}
			if c.Status.Allocation == nil {
				c = c.DeepCopy()
				defaultRequests(c)
				d.shared = append(d.shared, c)
				d.describe(c, "claim "+key)
			}
		}
	}
	names := make([]string, 0, len(req))
	for r := range req {
		names = append(names, r)
	}
	sort.Strings(names)
	for _, r := range names {
		class, ok := j.b.classes[r]
		if !ok || req[r] <= 0 {
			d.rest[r] = req[r]
			continue
		}
		if j.b.advertised(r) {
			// The scheduler may serve it from the device plugin too:
			// judging DRA devices alone could call a job hopeless that
			// runs.
			return nil, fmt.Errorf("%s: nodes advertise it and DeviceClass %s maps it", r, class)
		}
		exact := &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: req[r]}
		c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "extended-" + class},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "extended", Exactly: exact}}}}}
		d.perPod = append(d.perPod, c)
		d.descs = append(d.descs, reqDesc{text: fmt.Sprintf("%s: %d from DeviceClass %s", r, req[r], class), req: &c.Spec.Devices.Requests[0]})
	}
	return d, nil
}

// defaultRequests applies the API server's defaults to a claim's
// requests (allocation mode ExactCount, count 1), which a hand-written
// template may leave out.
func defaultRequests(c *resourcev1.ResourceClaim) {
	for i := range c.Spec.Devices.Requests {
		r := &c.Spec.Devices.Requests[i]
		if e := r.Exactly; e != nil {
			e.AllocationMode, e.Count = defaultMode(e.AllocationMode, e.Count)
		}
		for k := range r.FirstAvailable {
			s := &r.FirstAvailable[k]
			s.AllocationMode, s.Count = defaultMode(s.AllocationMode, s.Count)
		}
	}
}

func defaultMode(m resourcev1.DeviceAllocationMode, n int64) (resourcev1.DeviceAllocationMode, int64) {
	if m == "" {
		m = resourcev1.DeviceAllocationModeExactCount
	}
	if m == resourcev1.DeviceAllocationModeExactCount && n == 0 {
		n = 1
	}
	return m, n
}

// advertised: some node advertises resource r in its allocatable (a
// device plugin serves it there).
func (b *Builder) advertised(r string) bool {
	for i := range b.nodes {
		if b.nodes[i].Allocatable[r] > 0 {
			return true
		}
	}
	return false
}
