// Package schedule decides whether a distributed GPU job can be placed on a
// fleet, and when it cannot, why: the shape it asks for exists nowhere, or
// exists but is excluded, or is only busy. It is pure Go over its own small
// model (Node, Workload); integrations/kubernetes/cluster fills that model
// from Kubernetes objects, and both `rankgate diagnose` and the controller
// judge with the same Engine.
//
// Typical use:
//
//	e := schedule.New()
//	c := e.NewCluster(nodes) // once per snapshot: free capacity, GPU facts
//	res := e.Diagnose(c, workload)
//	fmt.Println(res.Rule, res.Hopeless, res.Report.Reason(0))
//
// Placement is decided for the whole job at once: every pod set is a class
// of identical pods, packed first-fit-decreasing over per-node free capacity
// (now) and over allocatable capacity (an empty cluster).
package schedule

import (
	"sort"
	"strings"

	"github.com/rankgate/rankgate/topology"
)

// Resource names the engine knows. Other names are treated as opaque
// counted resources (cpu in millicores, memory in bytes, anything else as
// the integer the API server stores).
const (
	ResourceGPU  = topology.ResourceGPU
	MIGPrefix    = topology.ResourceMIGPrefix
	ResourceCPU  = "cpu"
	ResourceMem  = "memory"
	ResourcePods = "pods"
)

// Resources maps a resource name to an amount. cpu is in millicores, memory
// and storage in bytes, everything else in units.
type Resources map[string]int64

// MIGProfileOf returns the profile of a nvidia.com/mig-<profile> resource.
func MIGProfileOf(name string) (string, bool) {
	if !strings.HasPrefix(name, MIGPrefix) {
		return "", false
	}
	p := strings.TrimPrefix(name, MIGPrefix)
	return p, p != ""
}

// Node is one Kubernetes node as the engine sees it.
type Node struct {
	Name string
	// Labels: GFD and mig-manager labels are read from here
	// (ParseGPULabels), and node selectors and affinity match them.
	Labels        map[string]string
	Taints        []Taint
	Unschedulable bool
	// NotReady: the Ready condition is not True.
	NotReady    bool
	Allocatable Resources
	// Capacity is optional; it shows stale zero nvidia.com/mig-* resources
	// the kubelet keeps after a layout change.
	Capacity Resources
	// Used is the sum of the requests of the pods bound to the node that
	// have not finished.
	Used Resources
	// LabelsOnly: the node is known from its labels alone (`kubectl get
	// node -o jsonpath='{.metadata.labels}'`). Allocatable holds the GPU
	// resources its GFD labels imply; cpu, memory, pods and
	// ephemeral-storage are unknown and never limit placement.
	LabelsOnly bool
}

// Unknown is the amount a labels-only node is taken to have of a resource
// its labels say nothing about: more than any pod asks.
const Unknown int64 = 1 << 60

// Taint is a node taint.
type Taint struct {
	Key    string
	Value  string
	Effect string // NoSchedule, PreferNoSchedule, NoExecute
}

func (t Taint) String() string {
	s := t.Key
	if t.Value != "" {
		s += "=" + t.Value
	}
	return s + ":" + t.Effect
}

// Toleration is a pod toleration, with Kubernetes semantics.
type Toleration struct {
	Key      string
	Operator string // Exists or Equal (default)
	Value    string
	Effect   string // empty matches every effect
}

// Requirement is one node-selector requirement (In, NotIn, Exists,
// DoesNotExist, Gt, Lt).
type Requirement struct {
	Key      string
	Operator string
	Values   []string
}

// SelectorTerm is one required node-affinity term: all its requirements
// must hold. MatchFields supports metadata.name only, as Kubernetes does.
type SelectorTerm struct {
	MatchExpressions []Requirement
	MatchFields      []Requirement
}

// Constraints are the placement rules of a pod other than resources.
type Constraints struct {
	// NodeName pins the pod (spec.nodeName set on an unbound pod).
	NodeName     string
	NodeSelector map[string]string
	// Affinity is requiredDuringSchedulingIgnoredDuringExecution: the terms
	// are ORed; empty means any node.
	Affinity    []SelectorTerm
	Tolerations []Toleration
}

// PodSet is a class of identical pods of a workload: a replica type of a
// job, or one lone pod.
type PodSet struct {
	// Name is the replica type ("Worker") or the pod name.
	Name string
	// Count is the number of pods of this set in the job.
	Count int
	// Bound is how many of them are already bound to nodes; their requests
	// are already in those nodes' Used.
	Bound int
	// Requests per pod (effective pod request: containers, init
	// containers, overhead), including "pods": 1 when node pod limits
	// should count.
	Requests    Resources
	Constraints Constraints
	// Pods names unbound pods of the set, for messages (optional).
	Pods []string
	// SchedulerMessage is the PodScheduled=False message of one of its
	// pods, quoted as evidence.
	SchedulerMessage string
	// DRA, when set, says how the set's devices come through Dynamic
	// Resource Allocation ("nvidia.com/gpu from DeviceClass
	// gpu.nvidia.com", "resource claims gpu"). Node allocatable says
	// nothing about such devices: a workload with such a set is not
	// judged (DRA_NOT_JUDGED) unless DRAFacts says what the published
	// devices (ResourceSlices) offer it; Requests then leave out the
	// extended resources DRA serves.
	DRA      string
	DRAFacts *DRAFacts
}

// Pending is the number of pods that still need a node.
func (p PodSet) Pending() int {
	if n := p.Count - p.Bound; n > 0 {
		return n
	}
	return 0
}

// Workload is what is judged: a Kubeflow job or a lone pod.
type Workload struct {
	Kind      string // PyTorchJob, MPIJob, Pod
	Namespace string
	Name      string
	PodSets   []PodSet
	// Suspended jobs are judged as if they were resumed.
	Suspended bool
}

// Subject is "Kind namespace/name".
func (w Workload) Subject() string {
	return w.Kind + " " + w.Namespace + "/" + w.Name
}

func (w Workload) gpuPods() int {
	n := 0
	for _, ps := range w.PodSets {
		if ps.gpuRequest() {
			n += ps.Count
		}
	}
	return n
}

func (p PodSet) gpuRequest() bool {
	for r, v := range p.Requests {
		if v > 0 && topology.IsGPUResource(r) {
			return true
		}
	}
	return false
}

func (p PodSet) migResources() []string {
	var out []string
	for r, v := range p.Requests {
		if v > 0 && strings.HasPrefix(r, MIGPrefix) {
			out = append(out, r)
		}
	}
	sort.Strings(out)
	return out
}

// sortedNames returns the resource names of r with a positive amount, GPU
// resources first.
func (r Resources) sortedNames() []string {
	out := make([]string, 0, len(r))
	for k, v := range r {
		if v > 0 {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		gi, gj := topology.IsGPUResource(out[i]), topology.IsGPUResource(out[j])
		if gi != gj {
			return gi
		}
		return out[i] < out[j]
	})
	return out
}
