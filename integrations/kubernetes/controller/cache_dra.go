package controller

import (
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	interntable "github.com/rankgate/rankgate/internal/intern"
)

// The DRA objects in the cache keep what judging a DRA job reads
// (cluster.Builder's DRA judge, the scheduler's allocator): a slice's
// spec whole (the allocator reads every part of it), a claim's requests
// and its allocation's devices and consumers, a template's requests.
// Labels, annotations, owners, device configuration and device status are
// dropped; names and attribute values, which repeat across a fleet
// (driver, pool, product, profile, driver version), are interned.

// draMeta keeps identity only.
func draMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: m.Name, Namespace: intern(m.Namespace), UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, DeletionTimestamp: m.DeletionTimestamp,
	}
}

// trimResourceSlice keeps the slice's spec with its strings interned.
func trimResourceSlice(i any) (any, error) {
	s, ok := i.(*resourcev1.ResourceSlice)
	if !ok {
		return unwrapTombstone(i, trimResourceSlice)
	}
	out := &resourcev1.ResourceSlice{ObjectMeta: draMeta(&s.ObjectMeta), Spec: s.Spec}
	out.Spec.Driver = intern(s.Spec.Driver)
	out.Spec.Pool.Name = intern(s.Spec.Pool.Name)
	if n := s.Spec.NodeName; n != nil {
		out.Spec.NodeName = internPtr(*n)
	}
	if len(s.Spec.Devices) > 0 {
		out.Spec.Devices = make([]resourcev1.Device, len(s.Spec.Devices))
		for k := range s.Spec.Devices {
			out.Spec.Devices[k] = trimDevice(&s.Spec.Devices[k])
		}
	}
	return out, nil
}

// trimDevice interns a device's attribute names and string values and
// its capacity names.
func trimDevice(d *resourcev1.Device) resourcev1.Device {
	out := *d
	if len(d.Attributes) > 0 {
		out.Attributes = make(map[resourcev1.QualifiedName]resourcev1.DeviceAttribute, len(d.Attributes))
		for k, a := range d.Attributes {
			switch {
			case a.StringValue != nil:
				a.StringValue = internPtr(*a.StringValue)
			case a.VersionValue != nil:
				a.VersionValue = internPtr(*a.VersionValue)
			}
			out.Attributes[resourcev1.QualifiedName(intern(string(k)))] = a
		}
	}
	out.Capacity = internCapacity(d.Capacity)
	return out
}

// capacities shares equal capacity maps between cached devices (every MIG
// device of one profile and product publishes the same); shared maps are
// read only, as every cached object is.
var capacities = boundedShares[map[resourcev1.QualifiedName]resourcev1.DeviceCapacity]{max: 1024}

func internCapacity(c map[resourcev1.QualifiedName]resourcev1.DeviceCapacity) map[resourcev1.QualifiedName]resourcev1.DeviceCapacity {
	if len(c) == 0 {
		return c
	}
	for _, v := range c {
		if v.RequestPolicy != nil {
			return c // consumable capacity: kept as it is
		}
	}
	k := quantityMapKey(c, func(v resourcev1.DeviceCapacity) resource.Quantity { return v.Value })
	return capacities.share(k, func() map[resourcev1.QualifiedName]resourcev1.DeviceCapacity {
		out := make(map[resourcev1.QualifiedName]resourcev1.DeviceCapacity, len(c))
		for n, v := range c {
			out[resourcev1.QualifiedName(intern(string(n)))] = v
		}
		return out
	})
}

// strPtrs shares pointers to equal attribute values.
var strPtrs interntable.Table[string]

// internPtr is a pointer to the interned s. Cached objects are read only,
// so equal values may share one pointer.
func internPtr(s string) *string {
	return strPtrs.ShareFunc(s, func() *string { v := intern(s); return &v })
}

// trimResourceClaim keeps a claim's requests and constraints while it is
// not allocated (the judge allocates a shared claim that is not), and of
// an allocated one the devices it holds and the consumers it is reserved
// for (named as the holders of a waiting job's devices).
func trimResourceClaim(i any) (any, error) {
	c, ok := i.(*resourcev1.ResourceClaim)
	if !ok {
		return unwrapTombstone(i, trimResourceClaim)
	}
	out := &resourcev1.ResourceClaim{ObjectMeta: draMeta(&c.ObjectMeta)}
	if a := c.Status.Allocation; a != nil {
		results := make([]resourcev1.DeviceRequestAllocationResult, len(a.Devices.Results))
		for k, r := range a.Devices.Results {
			results[k] = resourcev1.DeviceRequestAllocationResult{Request: r.Request, Driver: intern(r.Driver), Pool: intern(r.Pool), Device: r.Device}
		}
		out.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: results}}
		for _, r := range c.Status.ReservedFor {
			out.Status.ReservedFor = append(out.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{APIGroup: r.APIGroup, Resource: intern(r.Resource), Name: r.Name, UID: r.UID})
		}
		return out, nil
	}
	out.Spec.Devices = resourcev1.DeviceClaim{Requests: c.Spec.Devices.Requests, Constraints: c.Spec.Devices.Constraints}
	return out, nil
}

// trimResourceClaimTemplate keeps the requests and constraints of the
// claims made from the template.
func trimResourceClaimTemplate(i any) (any, error) {
	t, ok := i.(*resourcev1.ResourceClaimTemplate)
	if !ok {
		return unwrapTombstone(i, trimResourceClaimTemplate)
	}
	out := &resourcev1.ResourceClaimTemplate{ObjectMeta: draMeta(&t.ObjectMeta)}
	out.Spec.Spec.Devices = resourcev1.DeviceClaim{Requests: t.Spec.Spec.Devices.Requests, Constraints: t.Spec.Spec.Devices.Constraints}
	return out, nil
}
