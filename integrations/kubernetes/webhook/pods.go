package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/review"
)

// PodPath is where the controller's webhook server serves the Pod
// mutating webhook.
const PodPath = "/mutate-rank-pods"

// PodMutator is the admission.Handler of PodPath: into a JobSet's pod
// that carries contract.LabelInject (its template's, which the job
// webhook wrote on the rank templates of an opted-in JobSet or a
// TrainJob's JobSet) it adds the same init container and volumes the job
// webhook adds to a PyTorchJob's templates, sized by the pod's own GPU
// requests, waiting as long as the pod's rankgate.io/gang-timeout
// annotation says (the job's, copied onto the template) or the
// controller's default.
//
// The API server sends it only such pods (the shipped objectSelector), so
// that no other pod's creation waits on rankgate. A review is still input
// to judge: a pod without the label, or not a JobSet's, or opted out, is
// admitted unchanged.
type PodMutator struct{ m *Mutator }

// Pods is the Pod mutating handler with m's options.
func (m *Mutator) Pods() *PodMutator { return &PodMutator{m: m} }

var podKind = corev1.SchemeGroupVersion.WithKind("Pod")

// Handle implements admission.Handler. Creates only: a pod's init
// containers cannot change after it is made.
func (p *PodMutator) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.Kind.Group != podKind.Group || req.Kind.Version != podKind.Version || req.Kind.Kind != podKind.Kind {
		return admission.Allowed("not a Pod create")
	}
	pod, err := review.DecodePod(req.Namespace, req.Object.Raw)
	if errors.Is(err, review.ErrTooLarge) {
		return admission.Allowed("").WithWarnings(fmt.Sprintf("rankgate: not gated: %v", err))
	}
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if pod.Labels[contract.LabelInject] != contract.ValueInjectRanks || optedOut(pod.Labels, pod.Annotations) {
		return admission.Allowed("not a rank pod to gate")
	}
	if pod.Labels[jobset.LabelJobSetName] == "" {
		return admission.Allowed("").WithWarnings(fmt.Sprintf("rankgate: not gated: %s=%s is read on a JobSet's pods only (label %s)",
			contract.LabelInject, contract.ValueInjectRanks, jobset.LabelJobSetName))
	}
	timeout, _ := p.m.gangTimeout(pod.Annotations)
	ops, err := p.m.podSpecOps("/spec", pod.Namespace, &pod.Spec, timeout)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("pod %s/%s: %w", pod.Namespace, podName(pod), err))
	}
	if len(ops) == 0 {
		return admission.Allowed("")
	}
	return admission.Patched("", ops...)
}

// podName: a pod's name, or its generateName prefix before the API server
// names it.
func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Name
	}
	return pod.GenerateName + "*"
}

var _ admission.Handler = (*PodMutator)(nil)
