// Package cluster builds the schedulability engine's model
// (preflight/schedule) from Kubernetes objects: Nodes, Pods, PyTorchJobs and
// MPIJobs, read from files (offline, LoadFile) or from an API server (Live).
//
// A Builder takes objects one at a time and keeps only what the engine
// needs: per-node usage is summed as pods arrive, so listing a large cluster
// page by page does not hold every Pod in memory.
package cluster

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/rankgate/rankgate/preflight/schedule"
)

// Bounds beyond which a quantity is taken for a typo or garbage, not a
// machine: bad input, exit 2.
const (
	maxGPUResource = 4096          // nvidia.com/* per node or pod
	maxCPUMilli    = 1_000_000_000 // a million cores
	maxBytes       = 1 << 56       // 64 PiB
	maxCount       = 1 << 40       // any other countable resource
)

// resources converts a ResourceList: cpu in millicores, the rest in units.
// Negative and absurd amounts are errors naming the field.
func resources(field string, rl corev1.ResourceList) (schedule.Resources, error) {
	if len(rl) == 0 {
		return nil, nil
	}
	out := make(schedule.Resources, len(rl))
	for name, q := range rl {
		v, err := amount(field, string(name), q)
		if err != nil {
			return nil, err
		}
		out[string(name)] = v
	}
	return out, nil
}

func amount(field, name string, q resource.Quantity) (int64, error) {
	if q.Sign() < 0 {
		return 0, fmt.Errorf("%s %s is %s: must not be negative", field, name, q.String())
	}
	// Compare the quantity itself first: Value saturates at the int64 range.
	var max int64
	switch {
	case name == string(corev1.ResourceCPU):
		max = maxCPUMilli / 1000
	case strings.HasPrefix(name, "nvidia.com/"):
		max = maxGPUResource
	case name == string(corev1.ResourceMemory) || name == string(corev1.ResourceEphemeralStorage) || strings.HasPrefix(name, "hugepages-"):
		max = maxBytes
	default:
		max = maxCount
	}
	if q.CmpInt64(max) > 0 {
		return 0, fmt.Errorf("%s %s is %s: not a plausible amount (at most %d)", field, name, q.String(), max)
	}
	if name == string(corev1.ResourceCPU) {
		return q.MilliValue(), nil
	}
	return q.Value(), nil
}

// NodeFromCore converts a Node. GPU facts are read from its labels by the
// engine; a malformed GFD label is reported by schedule.ParseGPULabels.
func NodeFromCore(n *corev1.Node) (schedule.Node, error) {
	if n.Name == "" {
		return schedule.Node{}, errors.New("metadata.name is empty")
	}
	alloc, err := resources("status.allocatable", n.Status.Allocatable)
	if err != nil {
		return schedule.Node{}, err
	}
	capa, err := resources("status.capacity", n.Status.Capacity)
	if err != nil {
		return schedule.Node{}, err
	}
	if len(alloc) == 0 {
		// Hand-written dumps sometimes carry capacity only.
		alloc = capa
	}
	out := schedule.Node{
		Name:          n.Name,
		Labels:        n.Labels,
		Unschedulable: n.Spec.Unschedulable,
		Allocatable:   alloc,
		Capacity:      capa,
	}
	for _, t := range n.Spec.Taints {
		out.Taints = append(out.Taints, schedule.Taint{Key: t.Key, Value: t.Value, Effect: string(t.Effect)})
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			out.NotReady = true
		}
	}
	return out, nil
}

// PodRequests is a pod's effective request as kube-scheduler computes it:
// the larger of the app containers plus sidecars and of each init container
// (with the sidecars started before it), plus overhead; pod-level resources
// replace the container sum where set. Limits stand in for missing requests
// (the API server defaults them so; templates are not defaulted). It adds
// "pods": 1 for node pod limits.
func PodRequests(spec *corev1.PodSpec) (schedule.Resources, error) {
	total := schedule.Resources{}
	sidecars := schedule.Resources{}
	initMax := schedule.Resources{}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		req, err := containerRequests(fmt.Sprintf("spec.initContainers[%s]", c.Name), c)
		if err != nil {
			return nil, err
		}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			addTo(sidecars, req)
			continue
		}
		for k, v := range req {
			if s := v + sidecars[k]; s > initMax[k] {
				initMax[k] = s
			}
		}
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		req, err := containerRequests(fmt.Sprintf("spec.containers[%s]", c.Name), c)
		if err != nil {
			return nil, err
		}
		addTo(total, req)
	}
	addTo(total, sidecars)
	if spec.Resources != nil {
		podLevel, err := resources("spec.resources.requests", withLimits(spec.Resources))
		if err != nil {
			return nil, err
		}
		for k, v := range podLevel {
			total[k] = v
		}
	}
	for k, v := range initMax {
		if v > total[k] {
			total[k] = v
		}
	}
	over, err := resources("spec.overhead", spec.Overhead)
	if err != nil {
		return nil, err
	}
	addTo(total, over)
	for k, v := range total {
		if strings.HasPrefix(k, "nvidia.com/") && v > maxGPUResource {
			return nil, fmt.Errorf("requests %s %d in one pod: not a plausible amount (at most %d)", k, v, maxGPUResource)
		}
	}
	total[schedule.ResourcePods] = 1
	return total, nil
}

func containerRequests(field string, c *corev1.Container) (schedule.Resources, error) {
	return resources(field+".resources", withLimits(&c.Resources))
}

// withLimits returns requests with limits filling the missing names.
func withLimits(r *corev1.ResourceRequirements) corev1.ResourceList {
	if len(r.Limits) == 0 {
		return r.Requests
	}
	out := make(corev1.ResourceList, len(r.Requests)+len(r.Limits))
	for k, v := range r.Limits {
		out[k] = v
	}
	for k, v := range r.Requests {
		out[k] = v
	}
	return out
}

func addTo(dst, src schedule.Resources) {
	for k, v := range src {
		dst[k] += v
	}
}

// ConstraintsOf reads a pod's placement rules.
func ConstraintsOf(spec *corev1.PodSpec) schedule.Constraints {
	c := schedule.Constraints{NodeName: spec.NodeName, NodeSelector: spec.NodeSelector}
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			c.Affinity = append(c.Affinity, schedule.SelectorTerm{
				MatchExpressions: requirements(t.MatchExpressions),
				MatchFields:      requirements(t.MatchFields),
			})
		}
		if len(c.Affinity) == 0 {
			// Required affinity with no terms matches no node.
			c.Affinity = []schedule.SelectorTerm{{}}
		}
	}
	for _, t := range spec.Tolerations {
		c.Tolerations = append(c.Tolerations, schedule.Toleration{
			Key: t.Key, Operator: string(t.Operator), Value: t.Value, Effect: string(t.Effect),
		})
	}
	return c
}

func requirements(in []corev1.NodeSelectorRequirement) []schedule.Requirement {
	out := make([]schedule.Requirement, 0, len(in))
	for _, r := range in {
		out = append(out, schedule.Requirement{Key: r.Key, Operator: string(r.Operator), Values: r.Values})
	}
	return out
}

// schedulerMessage returns what the scheduler said about an unbound pod,
// or that scheduling gates hold it back.
func schedulerMessage(p *corev1.Pod) string {
	if len(p.Spec.SchedulingGates) > 0 {
		var names []string
		for _, g := range p.Spec.SchedulingGates {
			names = append(names, g.Name)
		}
		sort.Strings(names)
		return "scheduling gates " + strings.Join(names, ", ") + " hold the pod back: no scheduler looks at it until they are removed"
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			return c.Message
		}
	}
	return ""
}

func hasGPU(r schedule.Resources) bool {
	for k, v := range r {
		if v > 0 && schedule.IsGPUResource(k) {
			return true
		}
	}
	return false
}
