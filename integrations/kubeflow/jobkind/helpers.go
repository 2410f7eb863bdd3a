package jobkind

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rankgate/rankgate/topology"
)

// Replicas is a replica count with the operator's default def for nil.
func Replicas(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// RankCount checks a replica count that ranks are numbered by.
func RankCount(path string, n int32) (int, error) {
	if n < 0 || n > MaxReplicas {
		return 0, fmt.Errorf("%s.replicas is %d: want 0..%d", path, n, MaxReplicas)
	}
	return int(n), nil
}

// CheckTemplate checks one replica spec's count and template.
func CheckTemplate(path string, count *int32, t *corev1.PodTemplateSpec) error {
	if count != nil && (*count < 0 || *count > MaxReplicas) {
		return fmt.Errorf("%s.replicas is %d: want 0..%d", path, *count, MaxReplicas)
	}
	if len(t.Spec.Containers) == 0 {
		return fmt.Errorf("%s.template.spec.containers is empty", path)
	}
	return nil
}

// OwnsPod: p is in job's namespace and controlled by the kubeflow.org job
// of that kind and name (and UID when both are known), or, with no such
// owner reference, labelled with the job's name.
func OwnsPod(job metav1.Object, kind string, p *corev1.Pod) bool {
	if p.Namespace != job.GetNamespace() {
		return false
	}
	if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == kind && ref.Name == job.GetName() &&
		strings.HasPrefix(ref.APIVersion, "kubeflow.org/") {
		return job.GetUID() == "" || ref.UID == "" || ref.UID == job.GetUID()
	}
	return p.Labels[LabelJobName] == job.GetName()
}

// IndexedPodNameFits checks the name the operators give a replica's pod:
// <job>-<type in lower case>-<index>, where index is the pod's
// replica-index label less offset.
func IndexedPodNameFits(jobName string, p *corev1.Pod, typ string, offset int) error {
	v := p.Labels[LabelReplicaIdx]
	idx, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("label %s=%q is not a replica index", LabelReplicaIdx, v)
	}
	if want := fmt.Sprintf("%s-%s-%d", jobName, strings.ToLower(typ), idx-offset); p.Name != want {
		return fmt.Errorf("the operator names the pod of %s %s %s, not %s", typ, v, want, p.Name)
	}
	return nil
}

// ReplicaIdxLabel reads the replica-index label the Kubeflow operators
// set on every replica pod.
func ReplicaIdxLabel(labels map[string]string) (int, error) {
	v, ok := labels[LabelReplicaIdx]
	if !ok {
		return 0, fmt.Errorf("has no %s label, which its operator sets on every replica pod: %w", LabelReplicaIdx, ErrNoIndex)
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 {
		return 0, fmt.Errorf("label %s=%q is not a replica index: want an integer 0 or more", LabelReplicaIdx, v)
	}
	return i, nil
}

// KubeflowPodLabels are the labels the Kubeflow operators' pods are
// mapped to ranks by.
var KubeflowPodLabels = []string{LabelJobName, LabelReplicaType, LabelReplicaIdx, LabelJobRole, LabelOperatorName}

// StripTemplate reduces a cached pod template to what the gang rules read
// from it (the NCCL settings rules, integrations/kubeflow/ncclsettings):
// the rank container only (the first asking for GPUs, else the first),
// with its name, image, GPU resources, the launch settings of its
// environment (NCCL_*, FI_*, UCX_*, CUDA_VISIBLE_DEVICES,
// NVIDIA_VISIBLE_DEVICES), whether it takes more from envFrom, and the
// launch settings an mpirun on its command line exports to the ranks
// (MPIRunExports; the command becomes `mpirun` with those exports only).
// Everything else (metadata, volumes, other containers, scheduling) goes:
// the cache holds every job of the cluster.
func StripTemplate(t *corev1.PodTemplateSpec) {
	cs := t.Spec.Containers
	*t = corev1.PodTemplateSpec{}
	if len(cs) == 0 {
		return
	}
	c := &cs[0]
	for i := range cs {
		if hasGPU(cs[i].Resources.Limits) || hasGPU(cs[i].Resources.Requests) {
			c = &cs[i]
			break
		}
	}
	keep := corev1.Container{Name: c.Name, Image: c.Image, Resources: corev1.ResourceRequirements{
		Limits: gpuOnly(c.Resources.Limits), Requests: gpuOnly(c.Resources.Requests)}}
	for _, e := range c.Env {
		if launchSetting(e.Name) {
			keep.Env = append(keep.Env, e)
		}
	}
	if len(c.EnvFrom) > 0 {
		keep.EnvFrom = c.EnvFrom[:1:1]
	}
	keep.Command = keepExports(append(append([]string(nil), c.Command...), c.Args...))
	t.Spec.Containers = []corev1.Container{keep}
}

func launchSetting(name string) bool {
	return strings.HasPrefix(name, "NCCL_") || strings.HasPrefix(name, "FI_") || strings.HasPrefix(name, "UCX_") ||
		name == "CUDA_VISIBLE_DEVICES" || name == "NVIDIA_VISIBLE_DEVICES"
}

func hasGPU(l corev1.ResourceList) bool {
	for name := range l {
		if topology.IsGPUResource(string(name)) {
			return true
		}
	}
	return false
}

func gpuOnly(l corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for name, q := range l {
		if topology.IsGPUResource(string(name)) {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[name] = q
		}
	}
	return out
}
