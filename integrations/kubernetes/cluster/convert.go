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
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/topology"
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
		if field != "" {
			field += " "
		}
		return 0, fmt.Errorf("%s%s is %s: must not be negative", field, name, qstr(q))
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
		if field != "" {
			field += " "
		}
		return 0, fmt.Errorf("%s%s is %s: not a plausible amount (at most %d)", field, name, qstr(q), max)
	}
	// Fast path without Value/MilliValue: they may convert the quantity in
	// place, which moves every quantity read here to the heap.
	if v, ok := q.AsInt64(); ok {
		if name == string(corev1.ResourceCPU) {
			return v * 1000, nil
		}
		return v, nil
	}
	return slowValue(q, name == string(corev1.ResourceCPU)), nil
}

// slowValue handles fractional and decimal quantities ("500m", "1.5").
//
//go:noinline
func slowValue(q resource.Quantity, milli bool) int64 {
	if milli {
		return q.MilliValue()
	}
	return q.Value()
}

// qstr prints a quantity. String caches into the quantity, which would move
// every quantity amount looks at to the heap; a copy taken only on the
// error path keeps the hot path allocation-free.
//
//go:noinline
func qstr(q resource.Quantity) string { return q.String() }

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

// NodeReady: the node's Ready condition is True (a node without one is
// not ready).
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodRequests is a pod's effective request as kube-scheduler computes it:
// the larger of the app containers plus sidecars and of each init container
// (with the sidecars started before it), plus overhead; pod-level resources
// replace the container sum where set. Limits stand in for missing requests
// (the API server defaults them so; templates are not defaulted). It adds
// "pods": 1 for node pod limits.
//
// It computes what k8s.io/component-helpers/resource.PodRequests computes
// for any pod the API server admits, once defaulted
// (TestPodRequestsEqualsLibrary, 20,000 random pods,
// and FuzzPodRequestsEqualsLibrary prove it) and stays hand-written for
// the bound-pod path of Builder.AddPod, which runs once per pod of the
// cluster (1.5 million at 50,000 nodes): BenchmarkPodRequests measures
// 0 allocations and about 1.4-2.6 µs a pod here against 6 allocations
// (about 2 KB) and 7.7-19 µs with the library and its Reuse map, and the
// library neither names the container of a bad quantity nor reads limits
// in place of the requests of an undefaulted template.
func PodRequests(spec *corev1.PodSpec) (schedule.Resources, error) {
	var s podScratch
	if err := s.compute(spec); err != nil {
		return nil, err
	}
	return s.total.resources(), nil
}

// acc is a small resource accumulator: a pod names few resources, so a
// linear scan beats a map and allocates nothing once warm.
type acc struct {
	names []string
	vals  []int64
}

func (a *acc) reset() { a.names, a.vals = a.names[:0], a.vals[:0] }

func (a *acc) at(name string) int {
	for i, n := range a.names {
		if n == name {
			return i
		}
	}
	a.names = append(a.names, name)
	a.vals = append(a.vals, 0)
	return len(a.names) - 1
}

func (a *acc) add(name string, v int64) { a.vals[a.at(name)] += v }

func (a *acc) set(name string, v int64) { a.vals[a.at(name)] = v }

func (a *acc) raise(name string, v int64) {
	i := a.at(name)
	a.vals[i] = max(a.vals[i], v)
}

func (a *acc) get(name string) int64 {
	for i, n := range a.names {
		if n == name {
			return a.vals[i]
		}
	}
	return 0
}

func (a *acc) resources() schedule.Resources {
	out := make(schedule.Resources, len(a.names))
	for i, n := range a.names {
		out[n] = a.vals[i]
	}
	return out
}

// podScratch holds the accumulators of one pod's request; reuse it.
type podScratch struct{ total, sidecars, initMax, ctr acc }

// compute leaves the effective request in s.total.
func (s *podScratch) compute(spec *corev1.PodSpec) error {
	s.total.reset()
	s.sidecars.reset()
	s.initMax.reset()
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		if err := s.container("spec.initContainers", c); err != nil {
			return err
		}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			for k, n := range s.ctr.names {
				s.sidecars.add(n, s.ctr.vals[k])
			}
			continue
		}
		for k, n := range s.ctr.names {
			s.initMax.raise(n, s.ctr.vals[k]+s.sidecars.get(n))
		}
	}
	for i := range spec.Containers {
		if err := s.container("spec.containers", &spec.Containers[i]); err != nil {
			return err
		}
		for k, n := range s.ctr.names {
			s.total.add(n, s.ctr.vals[k])
		}
	}
	for k, n := range s.sidecars.names {
		s.total.add(n, s.sidecars.vals[k])
	}
	for k, n := range s.initMax.names {
		s.total.raise(n, s.initMax.vals[k])
	}
	if spec.Resources != nil {
		// Pod-level requests replace the containers' whole request, init
		// containers included. The API server admits only cpu, memory and
		// hugepages there; every name is read, because the controller's
		// pod cache keeps a pod's effective request in spec.resources.
		s.ctr.reset()
		if err := fill(&s.ctr, "spec.resources", spec.Resources); err != nil {
			return err
		}
		for k, n := range s.ctr.names {
			s.total.set(n, s.ctr.vals[k])
		}
	}
	for name, q := range spec.Overhead {
		v, err := amount("spec.overhead", string(name), q)
		if err != nil {
			return err
		}
		s.total.add(string(name), v)
	}
	for k, n := range s.total.names {
		if strings.HasPrefix(n, "nvidia.com/") && s.total.vals[k] > maxGPUResource {
			return fmt.Errorf("requests %s %d in one pod: not a plausible amount (at most %d)", n, s.total.vals[k], maxGPUResource)
		}
	}
	s.total.set(schedule.ResourcePods, 1)
	return nil
}

// container fills s.ctr with one container's requests.
func (s *podScratch) container(list string, c *corev1.Container) error {
	s.ctr.reset()
	if err := fill(&s.ctr, "", &c.Resources); err != nil {
		return fmt.Errorf("%s[%s].resources %w", list, c.Name, err)
	}
	return nil
}

// fill adds requests, and limits where a request is missing, to an empty
// accumulator. With an empty field the error omits it, for the caller to
// prefix.
func fill(a *acc, field string, r *corev1.ResourceRequirements) error {
	for name, q := range r.Requests {
		v, err := amount(field, string(name), q)
		if err != nil {
			return err
		}
		a.add(string(name), v)
	}
	n := len(a.names) // names from this container's requests
	for name, q := range r.Limits {
		if slices.Contains(a.names[:n], string(name)) {
			continue
		}
		v, err := amount(field, string(name), q)
		if err != nil {
			return err
		}
		a.add(string(name), v)
	}
	return nil
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

// AdvertisesGPU: rl (a node's allocatable) has a non-zero GPU or MIG
// resource.
func AdvertisesGPU(rl corev1.ResourceList) bool {
	for r, q := range rl {
		if topology.IsGPUResource(string(r)) && !q.IsZero() {
			return true
		}
	}
	return false
}

func hasGPU(r schedule.Resources) bool {
	for k, v := range r {
		if v > 0 && topology.IsGPUResource(k) {
			return true
		}
	}
	return false
}
