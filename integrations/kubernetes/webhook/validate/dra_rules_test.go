package validate_test

import (
	"context"
	"strings"
	"testing"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/validate"
)

// The webhook judges a DRA job with the DeviceTaintRules applied (the
// source hands them to the judge: TestDRASourceAddsTaintRules) and keeps
// only shape verdicts: a job that only the devices a rule takes out of
// service would serve waits (DRA_DEVICE_UNHEALTHY), as in the scheduler,
// so it is admitted as it is without the rule.
func TestHandleJudgesDRAWithTaintRules(t *testing.T) {
	ns, dcs, dra, job := draDump(t, mig1gTemplate)
	j := job.DeepCopy()
	for _, rs := range j.Spec.PyTorchReplicaSpecs {
		rs.Template.Spec.ResourceClaims[0].ResourceClaimTemplateName = ptr.To("mig-1g")
	}
	withRule := func(effect resourcev1.DeviceTaintEffect) validate.DRAObjectSource {
		return func(ctx context.Context) (*validate.DRAObjects, error) {
			o, err := dra(ctx)
			if err != nil {
				return nil, err
			}
			cp := *o
			cp.TaintRules = []*resourcev1.DeviceTaintRule{{ObjectMeta: metav1.ObjectMeta{Name: "drain-dgx-h100-1"}, Spec: resourcev1.DeviceTaintRuleSpec{
				DeviceSelector: &resourcev1.DeviceTaintSelector{Pool: ptr.To("dgx-h100-1")},
				Taint:          resourcev1.DeviceTaint{Key: "gpu.example.com/maintenance", Effect: effect},
			}}}
			return &cp, nil
		}
	}
	handle := func(src validate.DRAObjectSource, obj *kubeflowv1.PyTorchJob) (bool, string) {
		h := validate.NewHandler(validate.Options{Nodes: ns, DeviceClasses: dcs, DRAObjects: src})
		resp := h.Handle(context.Background(), request(t, obj, admissionv1.Create))
		return resp.Allowed, strings.Join(resp.Warnings, "\n")
	}
	for _, src := range []validate.DRAObjectSource{dra, withRule(resourcev1.DeviceTaintEffectNoSchedule), withRule(resourcev1.DeviceTaintEffectNone)} {
		ok, warnings := handle(src, j)
		require.True(t, ok, warnings)
		require.NotContains(t, warnings, "SHAPE_MISMATCH")
	}
}

// ListDRAObjects lists the DeviceTaintRules with the other DRA objects.
func TestListDRAObjectsReadsTaintRules(t *testing.T) {
	rule := &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "maint"}, Spec: resourcev1.DeviceTaintRuleSpec{
		DeviceSelector: &resourcev1.DeviceTaintSelector{}, Taint: resourcev1.DeviceTaint{Key: "k", Effect: resourcev1.DeviceTaintEffectNoSchedule}}}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(rule).Build()
	o, err := validate.ListDRAObjects(c)(context.Background())
	require.NoError(t, err)
	require.NotNil(t, o)
	require.Len(t, o.TaintRules, 1)
	require.Equal(t, "maint", o.TaintRules[0].Name)
}
