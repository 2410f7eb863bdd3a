package controller

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

// draDump is a cluster/testdata/dra dump decoded as the informers would
// hand it to the controller: every object through its cache transform.
type draDump struct {
	job     *kubeflowv1.PyTorchJob
	classes []resourcev1.DeviceClass
	objects draObjects
}

func loadDRADump(t *testing.T, name string) (draDump, []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "cluster", "testdata", "dra", name))
	require.NoError(t, err)
	var d draDump
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta metav1.TypeMeta
		require.NoError(t, yaml.Unmarshal([]byte(doc), &meta))
		trim := func(obj any, f func(any) (any, error)) any {
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), obj))
			out, err := f(obj)
			require.NoError(t, err)
			return out
		}
		switch meta.Kind {
		case "DeviceClass":
			dc := resourcev1.DeviceClass{}
			require.NoError(t, yaml.Unmarshal([]byte(doc), &dc))
			d.classes = append(d.classes, dc)
		case "Node":
			d.objects.nodes = append(d.objects.nodes, trim(&corev1.Node{}, trimNode).(*corev1.Node))
		case "ResourceSlice":
			d.objects.slices = append(d.objects.slices, trim(&resourcev1.ResourceSlice{}, trimResourceSlice).(*resourcev1.ResourceSlice))
		case "ResourceClaim":
			d.objects.claims = append(d.objects.claims, trim(&resourcev1.ResourceClaim{}, trimResourceClaim).(*resourcev1.ResourceClaim))
		case "ResourceClaimTemplate":
			d.objects.templates = append(d.objects.templates, trim(&resourcev1.ResourceClaimTemplate{}, trimResourceClaimTemplate).(*resourcev1.ResourceClaimTemplate))
		case "PyTorchJob":
			d.job = &kubeflowv1.PyTorchJob{}
			require.NoError(t, yaml.Unmarshal([]byte(doc), d.job))
		case "":
		default:
			t.Fatalf("%s: kind %s not expected", name, meta.Kind)
		}
	}
	require.NotNil(t, d.job, name)
	return d, data
}

func (d draDump) state() *draState {
	o := d.objects
	return &draState{classes: d.classes, objects: func() (*draObjects, error) { return &o, nil }}
}

// The watchdog (and GANG_RANK_UNPLACEABLE) judge a DRA job on the cached,
// trimmed DRA objects exactly as offline diagnose judges the same dump:
// same rule, hopelessness and findings (rule, severity, text).
func TestDRAJudgedAsDiagnoseJudges(t *testing.T) {
	for _, tc := range []struct {
		file     string
		rule     string
		hopeless bool
		text     string
	}{
		{"01-extended-resource-h100.yaml", verdict.RuleSchedulable, false, "serve the DRA requests (nvidia.com/gpu from DeviceClass gpu.nvidia.com) of all 2 pending pods now"},
		{"02-claim-profile-mismatch.yaml", verdict.RuleShapeMismatch, true, "no device matches; nearest: 7 x MIG 1g.10gb of NVIDIA H100 80GB HBM3 (16 SMs, 9984Mi, driver 580.126.20) on dgx-h100-1"},
		{"03-devices-held.yaml", verdict.RuleWaitCapacity, false, "Holding them: ResourceClaim research/notebook-a-gpu-x2k9q"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			d, data := loadDRADump(t, tc.file)
			e := schedule.New()
			b := cluster.NewBuilder()
			require.NoError(t, cluster.Load(b, tc.file, strings.NewReader(string(data)), nil))
			ws, err := b.Workloads()
			require.NoError(t, err)
			require.Len(t, ws, 1)
			want := e.Diagnose(e.NewCluster(b.Nodes()), ws[0])
			require.Equal(t, tc.rule, want.Rule)

			m := e.NewModel()
			var nodes []corev1.Node
			for _, n := range d.objects.nodes {
				sn, err := cluster.NodeFromCore(n)
				require.NoError(t, err)
				m.Set(sn)
				nodes = append(nodes, *n)
			}
			j := kubeflow.MustFromObject(d.job)
			got, _, _, ok, err := judgeOn(e, m.Cluster(), d.state(), j, nil, false)
			require.NoError(t, err)
			require.True(t, ok)
			full, _, ok, err := judgeJob(e, nodes, d.state(), j, nil, false)
			require.NoError(t, err)
			require.True(t, ok)
			for _, res := range []schedule.Result{got, full} {
				require.Equal(t, want.Rule, res.Rule)
				require.Equal(t, tc.hopeless, res.Hopeless)
				require.Equal(t, want.Report.Findings, res.Report.Findings)
				require.Contains(t, res.Report.Findings[0].Message, tc.text)
			}
			// Unknown DRA objects (not served, not synced): not judged.
			unknown := &draState{classes: d.classes, objects: func() (*draObjects, error) { return nil, nil }}
			res, _, _, _, err := judgeOn(e, m.Cluster(), unknown, j, nil, false)
			require.NoError(t, err)
			require.Equal(t, verdict.RuleDRANotJudged, res.Rule)
			require.False(t, res.Hopeless)
		})
	}
}

// The DRA objects the cache keeps: what the judge reads, nothing of
// labels, annotations, owners, managed fields, device configuration or
// status; equal attribute values share one string.
func TestTrimDRAObjects(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "x", Namespace: "ns", UID: "u", ResourceVersion: "7", Generation: 3,
		Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"c": strings.Repeat("d", 4096)},
		OwnerReferences: []metav1.OwnerReference{{Kind: "Node", Name: "n", UID: "nu"}},
		ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}}
	want := metav1.ObjectMeta{Name: "x", Namespace: "ns", UID: "u", ResourceVersion: "7", Generation: 3}
	dev := func(name, uuid string) resourcev1.Device {
		return resourcev1.Device{Name: name,
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"productName":   {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
				"uuid":          {StringValue: ptr.To(uuid)},
				"driverVersion": {VersionValue: ptr.To("580.126.20")},
			},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}},
			Taints:   []resourcev1.DeviceTaint{{Key: "gpu.nvidia.com/xid", Value: "79", Effect: resourcev1.DeviceTaintEffectNoSchedule}},
		}
	}

	slice := &resourcev1.ResourceSlice{ObjectMeta: meta, Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.nvidia.com", NodeName: ptr.To("n"),
		Pool: resourcev1.ResourcePool{Name: "n", Generation: 2, ResourceSliceCount: 1}, Devices: []resourcev1.Device{dev("gpu-0", "GPU-a"), dev("gpu-1", "GPU-b")}}}
	o, err := trimResourceSlice(slice.DeepCopy())
	require.NoError(t, err)
	ts := o.(*resourcev1.ResourceSlice)
	require.Equal(t, want, ts.ObjectMeta)
	require.Equal(t, slice.Spec, ts.Spec, "the allocator reads the whole spec")
	p0, p1 := ts.Spec.Devices[0].Attributes["productName"].StringValue, ts.Spec.Devices[1].Attributes["productName"].StringValue
	require.Same(t, p0, p1, "equal attribute values share one pointer")
	require.NotSame(t, ts.Spec.Devices[0].Attributes["uuid"].StringValue, ts.Spec.Devices[1].Attributes["uuid"].StringValue)
	require.Equal(t, reflect.ValueOf(ts.Spec.Devices[0].Capacity).UnsafePointer(), reflect.ValueOf(ts.Spec.Devices[1].Capacity).UnsafePointer(),
		"equal capacities share one map")

	req := resourcev1.DeviceRequest{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "mig.nvidia.com",
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}}}}
	constraint := resourcev1.DeviceConstraint{Requests: []string{"gpu"}, MatchAttribute: ptr.To(resourcev1.FullyQualifiedName("gpu.nvidia.com/parentUUID"))}
	config := []resourcev1.DeviceClaimConfiguration{{Requests: []string{"gpu"}}}
	spec := resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{req}, Constraints: []resourcev1.DeviceConstraint{constraint}, Config: config}}

	pending := &resourcev1.ResourceClaim{ObjectMeta: meta, Spec: spec}
	o, err = trimResourceClaim(pending.DeepCopy())
	require.NoError(t, err)
	tc := o.(*resourcev1.ResourceClaim)
	require.Equal(t, want, tc.ObjectMeta)
	require.Equal(t, resourcev1.DeviceClaim{Requests: spec.Devices.Requests, Constraints: spec.Devices.Constraints}, tc.Spec.Devices)
	require.Nil(t, tc.Status.Allocation)

	allocated := pending.DeepCopy()
	allocated.Status = resourcev1.ResourceClaimStatus{
		Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Request: "gpu", Driver: "gpu.nvidia.com", Pool: "n", Device: "gpu-0", AdminAccess: ptr.To(false)}},
			Config:  []resourcev1.DeviceAllocationConfiguration{{Source: resourcev1.AllocationConfigSourceClaim}}},
			NodeSelector: &corev1.NodeSelector{}, AllocationTimestamp: ptr.To(metav1.Now())},
		ReservedFor: []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "holder", UID: "pu"}},
		Devices:     []resourcev1.AllocatedDeviceStatus{{Driver: "gpu.nvidia.com", Pool: "n", Device: "gpu-0", Data: nil}},
	}
	o, err = trimResourceClaim(allocated.DeepCopy())
	require.NoError(t, err)
	tc = o.(*resourcev1.ResourceClaim)
	require.Equal(t, resourcev1.ResourceClaim{ObjectMeta: want, Status: resourcev1.ResourceClaimStatus{
		Allocation:  &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{Request: "gpu", Driver: "gpu.nvidia.com", Pool: "n", Device: "gpu-0"}}}},
		ReservedFor: []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "holder", UID: "pu"}},
	}}, *tc, "an allocated claim keeps the devices it holds and who holds them, not its requests")

	tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: meta, Spec: resourcev1.ResourceClaimTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "a"}}, Spec: spec}}
	o, err = trimResourceClaimTemplate(tmpl.DeepCopy())
	require.NoError(t, err)
	tt := o.(*resourcev1.ResourceClaimTemplate)
	require.Equal(t, resourcev1.ResourceClaimTemplate{ObjectMeta: want, Spec: resourcev1.ResourceClaimTemplateSpec{
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: spec.Devices.Requests, Constraints: spec.Devices.Constraints}}}}, *tt)

	// The trimmed caches use these transforms.
	for _, obj := range []client.Object{&resourcev1.ResourceSlice{}, &resourcev1.ResourceClaim{}, &resourcev1.ResourceClaimTemplate{}} {
		var found bool
		for o, by := range cacheOptions(nil, true).ByObject {
			if reflect.TypeOf(o) == reflect.TypeOf(obj) {
				found = by.Transform != nil
			}
		}
		require.True(t, found, "%T has no transform in the trimmed cache", obj)
	}

	// A deletion's final state is trimmed too.
	o, err = trimResourceSlice(toolscache.DeletedFinalStateUnknown{Key: "x", Obj: slice.DeepCopy()})
	require.NoError(t, err)
	require.Equal(t, want, o.(toolscache.DeletedFinalStateUnknown).Obj.(*resourcev1.ResourceSlice).ObjectMeta)
}

// Two jobs with the same requests but different published devices for
// their DRA pod sets are not one judgement (the node-event memo and the
// watchdog's last judgement key on it).
func TestWorkloadKeysTellDRAFactsApart(t *testing.T) {
	w := func(outcome schedule.DRAOutcome) schedule.Workload {
		return schedule.Workload{Kind: "PyTorchJob", PodSets: []schedule.PodSet{{Name: "Worker", Count: 1, DRA: "resource claims gpu",
			DRAFacts: &schedule.DRAFacts{Outcome: outcome, Requests: []schedule.DRARequest{{Desc: "gpu", Matching: -1}}}}}}
	}
	require.NotEqual(t, signature(w(schedule.DRAFits)), signature(w(schedule.DRANoDevice)))
	require.NotEqual(t, workloadKey(w(schedule.DRAFits)), workloadKey(w(schedule.DRANoDevice)))
	require.Equal(t, workloadKey(w(schedule.DRAWaits)), workloadKey(w(schedule.DRAWaits)), "equal facts in different copies are one key")
}
