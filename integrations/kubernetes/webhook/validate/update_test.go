package validate_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	kftraining "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/validate"
)

const controllerUser = "system:serviceaccount:rankgate-system:rankgate-controller"

// update is an UPDATE request from user, old -> new.
func update(t *testing.T, old, obj runtime.Object, user string) admission.Request {
	t.Helper()
	req := request(t, obj, admissionv1.Update)
	raw, err := json.Marshal(old)
	require.NoError(t, err)
	req.OldObject = runtime.RawExtension{Raw: raw}
	req.UserInfo = authnv1.UserInfo{Username: user}
	return req
}

// hopeless: a job asking 1g.5gb, a shape no node of the cluster (A100-80GB
// mixed) offers and no layout could give: a create is refused.
func hopeless() *kftraining.PyTorchJob {
	return kubeflowtest.MakePyTorchJob("retired", "ml").Master().Workers(1).Request("nvidia.com/mig-1g.5gb", "1").Obj()
}

func edit(j *kftraining.PyTorchJob, f func(*kftraining.PyTorchJob)) *kftraining.PyTorchJob {
	c := j.DeepCopy()
	f(c)
	return c
}

func setRequest(res string) func(*kftraining.PyTorchJob) {
	return func(j *kftraining.PyTorchJob) {
		for _, rs := range j.Spec.PyTorchReplicaSpecs {
			rs.Template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(res): resource.MustParse("1")}
		}
	}
}

// An update is judged as a change: the writes that stop or describe a job
// whose shape no longer exists are admitted; a change that brings a new
// refusal is refused, unless it suspends the job.
func TestHandleUpdate(t *testing.T) {
	cluster := nodes(a100Mixed("a100-0"))
	h := validate.NewHandler(validate.Options{Nodes: cluster, TrustedUsers: []string{controllerUser}})
	old := hopeless()
	// The create is refused: the job could only exist from before the
	// shape was retired (or from before the webhook saw it).
	require.False(t, h.Handle(context.Background(), request(t, old, admissionv1.Create)).Allowed)

	suspended := func(j *kftraining.PyTorchJob) { j.Spec.RunPolicy.Suspend = ptr.To(true) }
	verdictAnn := func(j *kftraining.PyTorchJob) {
		j.Annotations = map[string]string{"rankgate.io/verdict": "fail", "rankgate.io/rule": "SHAPE_MISMATCH"}
	}
	label := func(j *kftraining.PyTorchJob) { j.Labels = map[string]string{"team": "vision"} }
	optOut := func(j *kftraining.PyTorchJob) { j.Labels = map[string]string{"rankgate.io/gate": "disabled"} }
	good := kubeflowtest.MakePyTorchJob("retired", "ml").Master().Workers(1).Request("nvidia.com/mig-1g.10gb", "1").Obj()
	tests := []struct {
		name     string
		old, new *kftraining.PyTorchJob
		user     string
		allowed  bool
		warn     string
	}{
		{name: "the controller's verdict: annotations and suspend", old: old, new: edit(old, func(j *kftraining.PyTorchJob) { verdictAnn(j); suspended(j) }), user: controllerUser, allowed: true},
		{name: "the same write by another user (Kueue, a person): nothing judged changed", old: old, new: edit(old, func(j *kftraining.PyTorchJob) { verdictAnn(j); suspended(j) }), user: "kueue", allowed: true},
		{name: "kubectl label by an editor", old: old, new: edit(old, label), user: "alice", allowed: true},
		{name: "opting out", old: old, new: edit(old, optOut), user: "alice", allowed: true},
		{name: "opting out while changing the shape", old: good, new: edit(edit(good, optOut), setRequest("nvidia.com/mig-1g.5gb")), user: "alice", allowed: true},
		{name: "a change to a retired shape is refused", old: good, new: edit(good, setRequest("nvidia.com/mig-1g.5gb")), user: "alice", allowed: false},
		{name: "the same change that also suspends: admitted with the warning", old: good, new: edit(edit(good, setRequest("nvidia.com/mig-1g.5gb")), suspended), user: "alice", allowed: true, warn: "SHAPE_MISMATCH"},
		{name: "a change that keeps the old refusal as it was is not refused for it", old: old, new: edit(old, func(j *kftraining.PyTorchJob) {
			j.Spec.PyTorchReplicaSpecs[kftraining.PyTorchJobReplicaTypeWorker].Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "INFO"}}
		}), user: "alice", allowed: true},
		{name: "the controller's own identity is trusted", old: good, new: edit(good, setRequest("nvidia.com/mig-1g.5gb")), user: controllerUser, allowed: true},
		{name: "a fix of a retired shape is admitted", old: old, new: edit(old, setRequest("nvidia.com/mig-1g.10gb")), user: "alice", allowed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := h.Handle(context.Background(), update(t, tc.old, tc.new, tc.user))
			msg := ""
			if resp.Result != nil {
				msg = resp.Result.Message
			}
			require.Equal(t, tc.allowed, resp.Allowed, "message %q, warnings %q", msg, resp.Warnings)
			if !tc.allowed {
				require.Contains(t, msg, "SHAPE_MISMATCH")
			}
			if tc.warn != "" {
				require.Contains(t, strings.Join(resp.Warnings, "\n"), tc.warn)
			}
		})
	}
}

// An UPDATE whose old object cannot be read is judged as a create.
func TestHandleUpdateUnreadableOld(t *testing.T) {
	h := validate.NewHandler(validate.Options{Nodes: nodes(a100Mixed("a100-0"))})
	req := update(t, hopeless(), hopeless(), "alice")
	req.OldObject = runtime.RawExtension{}
	require.False(t, h.Handle(context.Background(), req).Allowed)
}
