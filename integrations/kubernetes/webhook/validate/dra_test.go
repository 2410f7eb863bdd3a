package validate_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/validate"
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
