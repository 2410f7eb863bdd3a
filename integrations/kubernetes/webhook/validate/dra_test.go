package validate_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/validate"
	"github.com/rankgate/rankgate/preflight/schedule"
)

func classes(dcs ...*resourcev1.DeviceClass) validate.DeviceClassSource {
	return func(context.Context) ([]resourcev1.DeviceClass, error) {
		out := make([]resourcev1.DeviceClass, len(dcs))
		for i, dc := range dcs {
			out[i] = *dc
		}
		return out, nil
	}
}

// A cluster part device plugin (A100s, mixed strategy, all partitioned),
// part DRA (an H100 node whose GPUs are in ResourceSlices, nothing in
// allocatable; DeviceClass gpu.nvidia.com serves nvidia.com/gpu). Judged
// from node allocatable, a job asking nvidia.com/gpu is STRATEGY_MISMATCH;
// the scheduler serves it through DRA. The webhook must admit it.
func TestHandleAdmitsDRAJobs(t *testing.T) {
	dra := gpuNode("dra-h100-0", map[string]string{"nvidia.com/gpu.present": "true"}, nil)
	cluster := nodes(a100Mixed("a100-0"), a100Mixed("a100-1"), dra)
	gpuClass := clustertest.DeviceClass("gpu.nvidia.com", "nvidia.com/gpu")
	claim := func(s *corev1.PodSpec) {
		s.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("h100")}}
		s.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	}
	tests := []struct {
		name    string
		obj     runtime.Object
		classes validate.DeviceClassSource
		allowed bool
		// warn: substrings of the warnings; deny: of the denial.
		warn, deny []string
		noWarn     bool
	}{
		{
			name:    "without the DeviceClass the same job is refused (the device plugin's nvidia.com/gpu)",
			obj:     kubeflowtest.MakeMPIJob("llm", "ml").Workers(2).WorkerRequest("nvidia.com/gpu", "1").Obj(),
			allowed: false, deny: []string{"STRATEGY_MISMATCH: "},
		},
		{
			name:    "nvidia.com/gpu that DeviceClass gpu.nvidia.com maps: admitted",
			obj:     kubeflowtest.MakePyTorchJob("llm", "ml").Master().Workers(1).Request("nvidia.com/gpu", "1").Obj(),
			classes: classes(gpuClass), allowed: true, noWarn: true,
		},
		{
			name:    "MPIJob workers through the DeviceClass: admitted",
			obj:     kubeflowtest.MakeMPIJob("llm", "ml").Workers(2).WorkerRequest("nvidia.com/gpu", "1").Obj(),
			classes: classes(gpuClass), allowed: true, noWarn: true,
		},
		{
			name:    "resource claims next to a MIG shape no node has: admitted",
			obj:     kubeflowtest.MakePyTorchJob("llm", "ml").Workers(2).Request("nvidia.com/mig-1g.5gb", "1").PodSpec(claim).PodSpec(nccl231).Obj(),
			classes: classes(), allowed: true, noWarn: true,
		},
		{
			name:    "template checks still apply: two MIG devices per container warn",
			obj:     kubeflowtest.MakePyTorchJob("llm", "ml").Workers(2).Request("nvidia.com/mig-1g.10gb", "2").PodSpec(claim).Obj(),
			classes: classes(gpuClass), allowed: true, warn: []string{"MIG_MULTIPLE_PER_PROCESS: "},
		},
		{
			name:    "DeviceClasses cannot be read: placement not judged, admitted with a note",
			obj:     kubeflowtest.MakePyTorchJob("llm", "ml").Workers(2).Request("nvidia.com/gpu", "1").Obj(),
			classes: func(context.Context) ([]resourcev1.DeviceClass, error) { return nil, errors.New("cache not synced") },
			allowed: true, warn: []string{"placement checks (SHAPE_MISMATCH, STRATEGY_MISMATCH) skipped", "DeviceClasses", "cache not synced"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := validate.NewHandler(validate.Options{Nodes: cluster, DeviceClasses: tc.classes})
			resp := h.Handle(context.Background(), request(t, tc.obj, admissionv1.Create))
			msg := ""
			if resp.Result != nil {
				msg = resp.Result.Message
			}
			require.Equal(t, tc.allowed, resp.Allowed, "message %q, warnings %q", msg, resp.Warnings)
			for _, s := range tc.deny {
				require.Contains(t, msg, s)
			}
			warnings := strings.Join(resp.Warnings, "\n")
			for _, s := range tc.warn {
				require.Contains(t, warnings, s)
			}
			if tc.noWarn {
				require.Empty(t, resp.Warnings)
			}
		})
	}
}

// Where the DRA source holds the nodes (the controller's caches), a DRA
// job is judged on them: with the prepared fleet (Fleet) the handler
// lists no node for a DRA job, and still names the node of the nearest
// devices.
func TestHandleDRANodesFromTheSource(t *testing.T) {
	ctx := context.Background()
	ns, dcs, dra, job := draDump(t, "")
	listed, err := ns(ctx)
	require.NoError(t, err)
	objs, err := dra(ctx)
	require.NoError(t, err)
	withNodes := *objs
	b := cluster.NewBuilder()
	gpuNodes := 0
	for i := range listed {
		withNodes.Nodes = append(withNodes.Nodes, &listed[i])
		require.NoError(t, b.AddNode(&listed[i]))
		if len(listed[i].Status.Allocatable) > 0 {
			gpuNodes++
		}
	}
	engine := schedule.New()
	fleet := engine.NewCluster(b.Nodes())
	for _, tc := range []struct {
		name  string
		src   *validate.DRAObjects
		lists int
	}{
		{"nodes from the DRA source", &withNodes, 0},
		{"a source without nodes: listed", objs, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, objectReads, classReads := 0, 0, 0
			h := validate.NewHandler(validate.Options{
				Nodes:  func(ctx context.Context) ([]corev1.Node, error) { calls++; return ns(ctx) },
				Fleet:  func(context.Context) (*schedule.Cluster, int, error) { return fleet, gpuNodes, nil },
				Engine: engine,
				DeviceClasses: func(ctx context.Context) ([]resourcev1.DeviceClass, error) {
					classReads++
					return dcs(ctx)
				},
				DRAObjects: func(context.Context) (*validate.DRAObjects, error) { objectReads++; return tc.src, nil },
			})
			resp := h.Handle(ctx, request(t, job, admissionv1.Create))
			require.False(t, resp.Allowed)
			require.Contains(t, resp.Result.Message, "7 x MIG 1g.10gb of NVIDIA H100 80GB HBM3 (16 SMs, 9984Mi, driver 580.126.20) on dgx-h100-1")
			require.Equal(t, tc.lists, calls, "node lists")
			// The placement and the claim checks share one read of each.
			require.Equal(t, 1, objectReads, "DRA object reads")
			require.Equal(t, 1, classReads, "DeviceClass reads")
		})
	}
}

// draDump is cluster/testdata/dra/02 (an H100 split into seven 1g.10gb
// MIG devices, published as NVIDIA's DRA driver does; a PyTorchJob whose
// claim template asks a 7g.80gb device) split into what the webhook's
// sources give it, with extra claim templates.
func draDump(t testing.TB, extra string) (validate.NodeSource, validate.DeviceClassSource, validate.DRAObjectSource, *kubeflowv1.PyTorchJob) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "cluster", "testdata", "dra", "02-claim-profile-mismatch.yaml"))
	require.NoError(t, err)
	var ns []corev1.Node
	var dcs []*resourcev1.DeviceClass
	objs := &validate.DRAObjects{}
	job := &kubeflowv1.PyTorchJob{}
	for _, doc := range strings.Split(string(data)+extra, "\n---\n") {
		switch {
		case strings.Contains(doc, "\nkind: Node\n"):
			n := corev1.Node{}
			require.NoError(t, yaml.Unmarshal([]byte(doc), &n))
			ns = append(ns, n)
		case strings.Contains(doc, "\nkind: DeviceClass\n"):
			dc := &resourcev1.DeviceClass{}
			require.NoError(t, yaml.Unmarshal([]byte(doc), dc))
			dcs = append(dcs, dc)
		case strings.Contains(doc, "\nkind: PyTorchJob\n"):
			require.NoError(t, yaml.Unmarshal([]byte(doc), job))
		case strings.Contains(doc, "\nkind: ResourceSlice\n"):
			o := &resourcev1.ResourceSlice{}
			require.NoError(t, yaml.Unmarshal([]byte(doc), o))
			objs.Slices = append(objs.Slices, o)
		case strings.Contains(doc, "\nkind: ResourceClaim\n"):
			o := &resourcev1.ResourceClaim{}
			require.NoError(t, yaml.Unmarshal([]byte(doc), o))
			objs.Claims = append(objs.Claims, o)
		case strings.Contains(doc, "\nkind: ResourceClaimTemplate\n"):
			o := &resourcev1.ResourceClaimTemplate{}
			require.NoError(t, yaml.Unmarshal([]byte(doc), o))
			objs.Templates = append(objs.Templates, o)
		}
	}
	dra := func(context.Context) (*validate.DRAObjects, error) { return objs, nil }
	return nodes(ns...), classes(dcs...), dra, job
}

// The webhook judges a DRA job's claims on the published devices, as
// diagnose and the watchdog do: a MIG device no published device is
// refused with SHAPE_MISMATCH naming the nearest devices (as a MIG
// resource no node offers is), or warned under the warn policy; a
// published profile is admitted; a full GPU no published device is is
// left to the cluster autoscaler (as through the device plugin); where the
// DRA objects are not known, nothing is judged.
// mig1gTemplate is a ResourceClaimTemplate ml/mig-1g asking one 1g.10gb
// MIG device.
const mig1gTemplate = `
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: mig-1g
  namespace: ml
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: mig.nvidia.com
          selectors:
          - cel:
              expression: device.attributes['gpu.nvidia.com'].profile == '1g.10gb'
`

func TestHandleJudgesDRAClaims(t *testing.T) {
	const templates = mig1gTemplate + `
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: b200
  namespace: ml
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel:
              expression: device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'
`
	ns, dcs, dra, job := draDump(t, templates)
	using := func(tmpl string) *kubeflowv1.PyTorchJob {
		j := job.DeepCopy()
		for _, rs := range j.Spec.PyTorchReplicaSpecs {
			rs.Template.Spec.ResourceClaims[0].ResourceClaimTemplateName = ptr.To(tmpl)
		}
		return j
	}
	unknown := func(context.Context) (*validate.DRAObjects, error) { return nil, nil }
	tests := []struct {
		name     string
		obj      runtime.Object
		dra      validate.DRAObjectSource
		policies map[string]validate.Policy
		allowed  bool
		deny     []string
		warn     []string
	}{
		{name: "7g.80gb on 1g.10gb devices: refused", obj: job, dra: dra,
			deny: []string{"SHAPE_MISMATCH: ", "profile == '7g.80gb': no device matches; nearest: 7 x MIG 1g.10gb of NVIDIA H100 80GB HBM3 (16 SMs, 9984Mi, driver 580.126.20) on dgx-h100-1", "Fix:"}},
		{name: "the warn policy: admitted with the finding", obj: job, dra: dra, policies: map[string]validate.Policy{"SHAPE_MISMATCH": validate.Warn},
			allowed: true, warn: []string{"SHAPE_MISMATCH: Master (1 pod) + Worker (1 pod): no device published in any ResourceSlice can serve"}},
		{name: "a published profile: admitted", obj: using("mig-1g"), dra: dra, allowed: true},
		// Placement leaves it to the autoscaler; the claim lint warns.
		{name: "a full GPU no slice publishes: left to the autoscaler", obj: using("b200"), dra: dra, allowed: true,
			warn: []string{"DRA_CLAIM_UNMATCHED: ResourceClaimTemplate ml/b200 request gpu matches no device"}},
		{name: "DRA objects not known: not judged", obj: job, dra: unknown, allowed: true},
		{name: "no DRA source: not judged", obj: job, allowed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := validate.NewHandler(validate.Options{Nodes: ns, DeviceClasses: dcs, DRAObjects: tc.dra, Policies: tc.policies})
			resp := h.Handle(context.Background(), request(t, tc.obj, admissionv1.Create))
			msg := ""
			if resp.Result != nil {
				msg = resp.Result.Message
			}
			require.Equal(t, tc.allowed, resp.Allowed, "message %q, warnings %q", msg, resp.Warnings)
			for _, s := range tc.deny {
				require.Contains(t, msg, s)
			}
			warnings := strings.Join(resp.Warnings, "\n")
			for _, s := range tc.warn {
				require.Contains(t, warnings, s)
			}
			if len(tc.warn) == 0 {
				require.Empty(t, resp.Warnings)
			}
		})
	}
}
