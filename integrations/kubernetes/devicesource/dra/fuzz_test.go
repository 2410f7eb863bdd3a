package dra

import (
	"context"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rankgate/rankgate/preflight"
)

// FuzzRank: whatever a driver publishes (attribute strings, capacities,
// device names, counters) and however a claim's allocation names its
// devices, the source makes a report or says what it waits for, and the
// gang rules take the reports, without a panic; and it says the same
// with a memo of the pools (Pools) as without.
func FuzzRank(f *testing.F) {
	f.Add("gpu-0-mig-1g10gb-0", "mig", "MIG-a", "GPU-a", "1g.10gb", "NVIDIA H100 80GB HBM3", "580.126.20", "9.0.0", int64(9984<<20), int64(16), "gpu-0-mig-1g10gb-0", false, 2)
	f.Add("gpu-0", "gpu", "GPU-a", "", "", "NVIDIA A100-SXM4-80GB", "570.124.06", "8.0", int64(80<<30), int64(0), "gpu-0", true, 1)
	f.Add("gpu-9999", "vfio", "", "", "", "", "", "", int64(-1), int64(-5), "missing", false, 3)
	f.Add("x", "mig", "", "", "", "\x00", "v", "1", int64(1<<62), int64(1<<40), "x", true, 8)
	f.Fuzz(func(t *testing.T, name, typ, uuid, parent, profile, product, driver, cc string, mem, sms int64, allocated string, counters bool, devices int) {
		if devices < 1 || devices > 16 {
			devices = 1
		}
		sl := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: resourcev1.ResourceSliceSpec{
			Driver: "gpu.nvidia.com", NodeName: ptr.To("n1"), Pool: resourcev1.ResourcePool{Name: "n1", ResourceSliceCount: 1}}}
		for i := 0; i < devices; i++ {
			d := resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"type": {StringValue: ptr.To(typ)}, "uuid": {StringValue: ptr.To(uuid)}, "parentUUID": {StringValue: ptr.To(parent)},
				"profile": {StringValue: ptr.To(profile)}, "productName": {StringValue: ptr.To(product)},
				"driverVersion": {VersionValue: ptr.To(driver)}, "gpu.nvidia.com/cudaComputeCapability": {VersionValue: ptr.To(cc)},
			}, Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
				"memory": {Value: *resource.NewQuantity(mem, resource.BinarySI)}, "multiprocessors": {Value: *resource.NewQuantity(sms, resource.DecimalSI)},
			}}
			if i > 0 {
				d.Name = name + "-" + string(rune('a'+i))
			}
			if counters {
				d.ConsumesCounters = []resourcev1.DeviceCounterConsumption{{CounterSet: "c"}}
			}
			if i%2 == 1 {
				d.Taints = []resourcev1.DeviceTaint{{Key: "gpu.nvidia.com/xid", Value: name, Effect: resourcev1.DeviceTaintEffectNoSchedule}}
			}
			sl.Spec.Devices = append(sl.Spec.Devices, d)
		}
		claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
		claim.Status.Allocation = &resourcev1.AllocationResult{}
		for _, dev := range []string{allocated, name} {
			claim.Status.Allocation.Devices.Results = append(claim.Status.Allocation.Devices.Results,
				resourcev1.DeviceRequestAllocationResult{Request: "r", Driver: "gpu.nvidia.com", Pool: "n1", Device: dev})
		}
		o := &objects{claims: map[string]*resourcev1.ResourceClaim{"ns/c": claim}, slices: []*resourcev1.ResourceSlice{sl}}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: corev1.PodSpec{NodeName: "n1",
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("c")}}}}
		r, err := (&Source{Objects: o, Drivers: preflight.DefaultDriverTable()}).Rank(context.Background(), pod, 0)
		if err != nil {
			t.Fatal(err)
		}
		memo, err := (&Source{Objects: o, Drivers: preflight.DefaultDriverTable(), Pools: &Pools{}}).Rank(context.Background(), pod, 0)
		if err != nil {
			t.Fatal(err)
		}
		a, errA := json.Marshal(r)
		b, errB := json.Marshal(memo)
		if errA != nil || errB != nil || string(a) != string(b) {
			t.Fatalf("with the memo:\n%s\nwithout:\n%s\n%v %v", b, a, errA, errB)
		}
		if r.Known == (r.Waiting != "") && r.Known {
			t.Fatalf("known and waiting: %+v", r)
		}
		if r.Known {
			_ = preflight.GangRules(preflight.GangInput{Job: "ns/j", Expected: 2, Ranks: []preflight.RankReport{r.Report, r.Report}})
		}
	})
}
