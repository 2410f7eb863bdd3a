package cluster

import (
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Partitionable devices (KEP-4815; NVIDIA's dynamic MIG): devices of a
// pool consume counters of shared counter sets, and an allocated device
// keeps out every device whose counters it took, though it matches no
// request itself (the full GPU allocated leaves none of its MIG
// placements). Which devices fit is the allocator's to say; the judge
// only names, for a job that waits, the claims holding devices that draw
// on the counter sets of the devices the job matches.

// counterKey names a counter set of a pool.
type counterKey struct{ driver, pool, set string }

// counterKeys are the counter sets the device consumes.
func (d *draDevice) counterKeys() []counterKey {
	out := make([]counterKey, 0, len(d.device.ConsumesCounters))
	for _, c := range d.device.ConsumesCounters {
		out = append(out, counterKey{d.slice.Spec.Driver, d.slice.Spec.Pool.Name, c.CounterSet})
	}
	return out
}

// counterPeers indexes the published devices by the counter sets they
// consume, built on first use.
func (j *draJudge) counterPeers() map[counterKey][]*draDevice {
	if j.peers == nil {
		j.peers = map[counterKey][]*draDevice{}
		for _, d := range j.all {
			for _, k := range d.counterKeys() {
				j.peers[k] = append(j.peers[k], d)
			}
		}
	}
	return j.peers
}

// heldAndSharing are the held devices and the devices that consume a
// counter set a held device consumes: those a job may wait for.
func (j *draJudge) heldAndSharing() []*draDevice {
	seen := sets.New[structured.DeviceID]()
	var out []*draDevice
	add := func(d *draDevice) {
		if !seen.Has(d.id) {
			seen.Insert(d.id)
			out = append(out, d)
		}
	}
	for _, d := range j.heldDevs {
		add(d)
		for _, k := range d.counterKeys() {
			for _, p := range j.counterPeers()[k] {
				add(p)
			}
		}
	}
	return out
}

// counterHolders are the held devices, not among matched, that consume a
// counter set a matched device consumes, each with that set's name.
func (j *draJudge) counterHolders(matched sets.Set[structured.DeviceID]) map[structured.DeviceID]string {
	out := map[structured.DeviceID]string{}
	for id := range matched {
		d, ok := j.byID[id]
		if !ok {
			continue
		}
		for _, k := range d.counterKeys() {
			for _, p := range j.counterPeers()[k] {
				if _, held := j.held[p.id]; held && !matched.Has(p.id) {
					out[p.id] = k.set
				}
			}
		}
	}
	return out
}
