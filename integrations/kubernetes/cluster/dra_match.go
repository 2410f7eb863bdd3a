package cluster

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource/dra"
	"github.com/rankgate/rankgate/preflight/schedule"
)

// describe records the requests of a claim for messages.
func (d *podDemand) describe(c *resourcev1.ResourceClaim, from string) {
	for i := range c.Spec.Devices.Requests {
		r := &c.Spec.Devices.Requests[i]
		d.descs = append(d.descs, reqDesc{text: from + " request " + r.Name + ": " + requestText(r), req: r})
	}
}

// requestText: "1 device of DeviceClass mig.nvidia.com where <cel>".
func requestText(r *resourcev1.DeviceRequest) string {
	if r.Exactly != nil {
		return exactText(r.Exactly)
	}
	var alts []string
	for i := range r.FirstAvailable {
		s := &r.FirstAvailable[i]
		alts = append(alts, s.Name+": "+exactText(&resourcev1.ExactDeviceRequest{DeviceClassName: s.DeviceClassName, Selectors: s.Selectors, AllocationMode: s.AllocationMode, Count: s.Count, Capacity: s.Capacity}))
	}
	return "first available of " + strings.Join(alts, " | ")
}

func exactText(e *resourcev1.ExactDeviceRequest) string {
	n := fmt.Sprintf("%d", e.Count)
	if e.AllocationMode == resourcev1.DeviceAllocationModeAll {
		n = "all"
	} else if e.Count == 0 {
		n = "1"
	}
	s := n + " device(s) of DeviceClass " + e.DeviceClassName
	var sel []string
	for _, x := range e.Selectors {
		if x.CEL != nil {
			sel = append(sel, strings.TrimSpace(x.CEL.Expression))
		}
	}
	if len(sel) > 0 {
		s += " where " + strings.Join(sel, " && ")
	}
	if e.Capacity != nil && len(e.Capacity.Requests) > 0 {
		var caps []string
		for k, v := range e.Capacity.Requests {
			caps = append(caps, string(k)+" >= "+v.String())
		}
		sort.Strings(caps)
		s += " with capacity " + strings.Join(caps, ", ")
	}
	return s
}

// judge allocates n pods' claims on an empty cluster, now, and (where
// the driver tainted devices unhealthy) on an empty cluster with those
// devices repaired; empty, now and *healed are the devices taken in each,
// which the pods' allocations join. *healed stays nil while every set
// judged fits the empty cluster: until then the repaired cluster holds
// the same allocations.
func (j *draJudge) judge(d *podDemand, n int, empty, now sets.Set[structured.DeviceID], healed *sets.Set[structured.DeviceID]) (*schedule.DRAFacts, error) {
	if n > maxDRAPods {
		return nil, fmt.Errorf("%d pending pods: more than the %d judged on DRA devices", n, maxDRAPods)
	}
	f := &schedule.DRAFacts{}
	var before sets.Set[structured.DeviceID]
	if j.sick && *healed == nil {
		before = empty.Clone()
	}
	var err error
	if f.FitEmpty, err = j.place(d, n, empty, false); err != nil {
		return nil, err
	}
	if f.FitNow, err = j.place(d, n, now, false); err != nil {
		return nil, err
	}
	// Where a published device carries a health taint and the set does
	// not fit the empty cluster (or one before it did not), the pods are
	// placed once more with those devices repaired: a set they serve
	// then waits for the repair; one they do not is hopeless on the
	// repaired devices' count.
	fitEmpty, heal := f.FitEmpty, false
	if j.sick && (*healed != nil || f.FitEmpty < n) {
		if *healed == nil {
			*healed = before
		}
		fitHealed, err := j.place(d, n, *healed, true)
		if err != nil {
			return nil, err
		}
		if fitEmpty < n {
			fitEmpty, heal = fitHealed, true
		}
	}
	f.Outcome = j.outcome(d, n, fitEmpty, f.FitNow, heal)
	if heal && f.Outcome == schedule.DRAGangTooLarge {
		// Too large even with the unhealthy devices repaired: the
		// count the message gives is theirs.
		f.FitEmpty = fitEmpty
	}
	j.describeFacts(d, f)
	return f, nil
}

// outcome classifies a set of n pods of which fitEmpty get their devices
// on an empty cluster (with heal, with the unhealthy devices repaired)
// and fitNow now.
func (j *draJudge) outcome(d *podDemand, n, fitEmpty, fitNow int, heal bool) schedule.DRAOutcome {
	switch {
	case heal && fitEmpty >= n:
		return schedule.DRAUnhealthy
	case fitEmpty == 0 && n > 0 && j.fitsAlone(d, heal):
		return schedule.DRAGangTooLarge
	case fitEmpty == 0 && n > 0:
		return schedule.DRANoDevice
	case fitEmpty < n:
		return schedule.DRAGangTooLarge
	case fitNow < n:
		return schedule.DRAWaits
	}
	return schedule.DRAFits
}

// describeFacts fills f's requests (and holders) for the message of its
// outcome.
func (j *draJudge) describeFacts(d *podDemand, f *schedule.DRAFacts) {
	// Which devices match each request is worked out only where the
	// message needs it (CEL over every published device is the costly
	// part): all devices when the job cannot be served, the held ones
	// when it waits, none when it fits.
	var devs []*draDevice
	switch f.Outcome {
	case schedule.DRANoDevice, schedule.DRAGangTooLarge, schedule.DRAUnhealthy:
		devs = j.all
	case schedule.DRAWaits:
		// The held devices, and those whose counters they may hold.
		devs = j.heldAndSharing()
	}
	matched := sets.New[structured.DeviceID]()
	for _, rd := range d.descs {
		r := schedule.DRARequest{Desc: rd.text, Matching: -1}
		if devs != nil {
			m, near, inClass, tainted, byRule := j.match(rd.req, devs)
			matched = matched.Union(m)
			if f.Outcome != schedule.DRAWaits {
				r.Matching, r.Nearest, r.NearestInClass, r.Tainted, r.TaintedByRule = m.Len(), near, inClass, tainted, byRule
			}
		}
		f.Requests = append(f.Requests, r)
	}
	if f.Outcome == schedule.DRAWaits || f.Outcome == schedule.DRAUnhealthy {
		f.Holders = j.holders(matched, j.counterHolders(matched))
	}
}

// fitsAlone: one pod's claims fit the published devices when no other
// pod of the job takes any (with heal, the devices tainted unhealthy
// repaired).
func (j *draJudge) fitsAlone(d *podDemand, heal bool) bool {
	n, err := j.place(d, 1, sets.New[structured.DeviceID](), heal)
	return err == nil && n == 1
}

// healthTaints are the device taints NVIDIA's DRA driver (v0.4.1, its
// NVMLDeviceHealthCheck monitor) puts on a device it finds unhealthy,
// with effect NoSchedule: a fatal Xid (value: the Xid) and a GPU that
// fell off the bus. Its non-fatal Xids and unmonitored devices get
// effect None, which does not keep the scheduler off. The driver never
// clears them by itself: they stay until the GPU is repaired and the
// driver's kubelet plugin restarted.
var healthTaints = []string{"gpu.nvidia.com/xid", "gpu.nvidia.com/gpu-lost"}

// healthTolerations tolerate every health taint.
func healthTolerations() []resourcev1.DeviceToleration {
	out := make([]resourcev1.DeviceToleration, 0, len(healthTaints))
	for _, k := range healthTaints {
		out = append(out, resourcev1.DeviceToleration{Key: k, Operator: resourcev1.DeviceTolerationOpExists})
	}
	return out
}

// isHealthTaint: a taint that keeps the scheduler off a device the driver
// found unhealthy.
func isHealthTaint(t resourcev1.DeviceTaint) bool {
	return slices.Contains(healthTaints, t.Key) && (t.Effect == resourcev1.DeviceTaintEffectNoSchedule || t.Effect == resourcev1.DeviceTaintEffectNoExecute)
}

// repaired is a copy of c whose requests tolerate the health taints.
func repaired(c *resourcev1.ResourceClaim) *resourcev1.ResourceClaim {
	c = c.DeepCopy()
	for i := range c.Spec.Devices.Requests {
		r := &c.Spec.Devices.Requests[i]
		if r.Exactly != nil {
			r.Exactly.Tolerations = append(r.Exactly.Tolerations, healthTolerations()...)
		}
		for k := range r.FirstAvailable {
			r.FirstAvailable[k].Tolerations = append(r.FirstAvailable[k].Tolerations, healthTolerations()...)
		}
	}
	return c
}

// place allocates the claims of up to n pods, one pod after the other,
// each on the first node where all its claims fit, with the devices in
// allocated taken; it returns how many pods got their devices. The pods
// are alike and allocated only grows, so a node that failed one pod is
// not tried for the next. Each allocation is bounded by allocTimeout, as
// the scheduler bounds its own. With heal, the claims tolerate the health
// taints and the DeviceTaintRules are gone: what the devices serve once
// repaired.
func (j *draJudge) place(d *podDemand, n int, allocated sets.Set[structured.DeviceID], heal bool) (int, error) {
	failed := make([]bool, len(j.nodes))
	for i := 0; i < n; i++ {
		claims := make([]*resourcev1.ResourceClaim, 0, len(d.perPod)+len(d.shared))
		for _, c := range d.perPod {
			cc := c.DeepCopy()
			if heal {
				cc = repaired(c)
			}
			cc.Name = fmt.Sprintf("%s-%d", c.Name, i)
			claims = append(claims, cc)
		}
		if i == 0 {
			for _, c := range d.shared {
				if heal {
					c = repaired(c)
				}
				claims = append(claims, c)
			}
		}
		ok, err := j.placeOne(claims, allocated, failed, heal)
		if err != nil || !ok {
			return i, err
		}
	}
	return n, nil
}

// allocTimeout bounds one pod's allocation on one node.
const allocTimeout = 2 * time.Second

// placeOne allocates one pod's claims on the first node not failed yet
// where they fit, and takes the devices; with heal, on the slices without
// the DeviceTaintRules' taints.
func (j *draJudge) placeOne(claims []*resourcev1.ResourceClaim, allocated sets.Set[structured.DeviceID], failed []bool, heal bool) (bool, error) {
	state := structured.AllocatedState{AllocatedDevices: allocated, AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	for k, node := range j.nodes {
		if failed[k] {
			continue
		}
		// The node's own slices and those for many nodes: the allocator
		// gathers its pools from the slices it is given, for every call.
		alloc, err := structured.NewAllocator(context.Background(), draFeatures, state, j.lister, j.slicesFor(node.Name, heal), j.cache)
		if err != nil {
			return false, fmt.Errorf("dra allocator: %w", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), allocTimeout)
		res, err := alloc.Allocate(ctx, node, claims)
		cancel()
		if err != nil {
			return false, fmt.Errorf("allocate on node %s: %w", node.Name, err)
		}
		if res == nil {
			failed[k] = true
			continue
		}
		for _, r := range res {
			for _, dr := range r.Devices.Results {
				allocated.Insert(structured.MakeDeviceID(dr.Driver, dr.Pool, dr.Device))
			}
		}
		return true, nil
	}
	return false, nil
}

// match returns the published devices that satisfy a request on their
// own (class, selectors, capacity), and when there are none, the nearest
// ones: those that fail the fewest of the class's and the request's
// conditions (the class's counting as more), grouped by shape; inClass
// when they pass the request's DeviceClass. tainted names the matching
// devices whose taints the request does not tolerate (the allocator skips
// them).
func (j *draJudge) match(r *resourcev1.DeviceRequest, devs []*draDevice) (out sets.Set[structured.DeviceID], nearest []schedule.DRADevice, inClass bool, tainted []string, byRule bool) {
	alts := []resourcev1.ExactDeviceRequest{}
	if r.Exactly != nil {
		alts = append(alts, *r.Exactly)
	}
	for _, s := range r.FirstAvailable {
		alts = append(alts, resourcev1.ExactDeviceRequest{DeviceClassName: s.DeviceClassName, Selectors: s.Selectors, Capacity: s.Capacity, Tolerations: s.Tolerations})
	}
	out = sets.New[structured.DeviceID]()
	best := -1
	var near []*draDevice
	for _, dev := range devs {
		score, alt := -1, 0
		for k := range alts {
			if s := j.misses(&alts[k], dev); score < 0 || s < score {
				score, alt = s, k
			}
		}
		switch {
		case score == 0:
			out.Insert(dev.id)
			if t, rule := dev.untolerated(alts[alt].Tolerations); t != "" {
				tainted = append(tainted, dev.facts().Name+" on "+dev.facts().Node+" ("+t+")")
				byRule = byRule || rule
			}
		case best < 0 || score < best:
			best, near = score, []*draDevice{dev}
		case score == best:
			near = append(near, dev)
		}
	}
	if out.Len() > 0 {
		return out, nil, false, tainted, byRule
	}
	return out, groupDevices(near, 5), len(near) > 0 && best < classMiss, nil, false
}

// untolerated describes the NoSchedule and NoExecute taints of the
// device that none of the tolerations tolerates, each naming the
// DeviceTaintRule it comes from (byRule: one does), or returns "".
func (dev *draDevice) untolerated(tols []resourcev1.DeviceToleration) (s string, byRule bool) {
	var out []string
	for k, t := range dev.device.Taints {
		if !dra.Keeps(t) {
			continue
		}
		ok := false
		for _, tol := range tols {
			ok = ok || resourceclaim.ToleratesTaint(tol, t)
		}
		if !ok {
			origin := dev.taintOrigin(k)
			out = append(out, dra.TaintString(t)+origin)
			byRule = byRule || origin != ""
		}
	}
	return strings.Join(out, ", "), byRule
}

// misses counts the conditions a device fails: 100 per failed class
// selector (or a missing class), 1 per failed request selector or
// capacity. A selector that does not compile or evaluate fails.
func (j *draJudge) misses(e *resourcev1.ExactDeviceRequest, dev *draDevice) int {
	n := 0
	input := cel.Device{Driver: dev.slice.Spec.Driver, Attributes: dev.device.Attributes, Capacity: dev.device.Capacity}
	if class, ok := j.lister[e.DeviceClassName]; ok {
		n += classMiss * j.failedSelectors(class.Spec.Selectors, input)
	} else {
		n += classMiss
	}
	n += j.failedSelectors(e.Selectors, input)
	if e.Capacity != nil {
		for name, want := range e.Capacity.Requests {
			have, ok := capacityOf(dev, name)
			if !ok || have.Cmp(want) < 0 {
				n++
			}
		}
	}
	return n
}

func (j *draJudge) failedSelectors(sel []resourcev1.DeviceSelector, dev cel.Device) int {
	n := 0
	for _, s := range sel {
		if s.CEL == nil {
			continue
		}
		prog := j.cache.GetOrCompile(s.CEL.Expression)
		if prog.Error != nil {
			n++
			continue
		}
		ok, _, err := prog.DeviceMatches(context.Background(), dev)
		if err != nil || !ok {
			n++
		}
	}
	return n
}

// classMiss is what failing a DeviceClass selector (or a missing class)
// counts in misses.
const classMiss = 100

func capacityOf(dev *draDevice, name resourcev1.QualifiedName) (quantity, bool) {
	short := resourcev1.QualifiedName(strings.TrimPrefix(string(name), dev.slice.Spec.Driver+"/"))
	for _, k := range []resourcev1.QualifiedName{name, short} {
		if c, ok := dev.device.Capacity[k]; ok {
			return c.Value, true
		}
	}
	return quantity{}, false
}

// holders names the allocated claims that hold matching devices, or
// devices consuming the counters that matching devices need (byCounters:
// the counter set of each).
func (j *draJudge) holders(matched sets.Set[structured.DeviceID], byCounters map[structured.DeviceID]string) []string {
	ids := matched.UnsortedList()
	for id := range byCounters {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a].String() < ids[b].String() })
	var out []string
	for _, id := range ids {
		c, ok := j.held[id]
		if !ok {
			continue
		}
		s := fmt.Sprintf("ResourceClaim %s/%s", c.Namespace, c.Name)
		var pods []string
		for _, r := range c.Status.ReservedFor {
			if r.Resource == "pods" {
				pods = append(pods, c.Namespace+"/"+r.Name)
			}
		}
		if len(pods) > 0 {
			s += " (pod " + strings.Join(pods, ", ") + ")"
		}
		s += " holds " + j.byID[id].facts().String()
		if set, ok := byCounters[id]; ok {
			s += ", which consumes the counters of counter set " + set + " that the matching devices draw on"
		}
		out = append(out, strings.TrimSpace(s))
	}
	return out
}
