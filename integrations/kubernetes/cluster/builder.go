package cluster

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/preflight/schedule"
)

// Builder collects Kubernetes objects into the engine's model. Add nodes,
// pods and jobs in any order, then call Nodes and Workloads (or
// WorkloadFor). It is not safe for concurrent use.
type Builder struct {
	nodes   []schedule.Node
	nodeIdx map[string]int
	// usage sums the requests of bound, unfinished pods per node name,
	// per interned resource (resName).
	usage   map[string][]int64
	resName []string
	scratch podScratch
	// pods keeps a short record of every unbound pending pod.
	pods []podRecord
	// boundJob counts bound pods of Kubeflow jobs.
	boundJob map[jobReplica]int
	jobs     []kubeflow.Job
}

type podRecord struct {
	namespace, name string
	// jobKind and job name the Kubeflow job: from a controller owner
	// reference, or from the job-name label (jobKind "").
	jobKind, job string
	replicaType  string
	requests     schedule.Resources
	constraints  schedule.Constraints
	schedMsg     string
	gpu          bool
}

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder {
	return &Builder{nodeIdx: map[string]int{}, usage: map[string][]int64{}, boundJob: map[jobReplica]int{}}
}

// jobReplica keys the bound pods of one replica type of one job.
type jobReplica struct {
	namespace, kind, job string
	// replicaType as the pod label spells it (lower case).
	replicaType string
}

func (k jobReplica) of(j kubeflow.Job) bool {
	return k.namespace == j.Namespace() && k.job == j.Name() && (k.kind == "" || k.kind == j.Kind())
}

// AddNode adds a node; a second node with the same name is an error.
func (b *Builder) AddNode(n *corev1.Node) error {
	sn, err := NodeFromCore(n)
	if err != nil {
		return err
	}
	if _, dup := b.nodeIdx[sn.Name]; dup {
		return fmt.Errorf("node %s appears twice", sn.Name)
	}
	b.nodeIdx[sn.Name] = len(b.nodes)
	b.nodes = append(b.nodes, sn)
	return nil
}

// AddPod adds a pod: a bound, unfinished pod adds its requests to its
// node's usage; an unbound pending pod is kept for judging. Finished pods
// are ignored. The pod is not retained.
func (b *Builder) AddPod(p *corev1.Pod) error {
	if p.Name == "" {
		return fmt.Errorf("metadata.name is empty")
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil
	}
	jobKind, job := jobOf(p)
	bound := p.Spec.NodeName != ""
	if bound {
		// The hot path of large clusters: no allocation once warm.
		if err := b.scratch.compute(&p.Spec); err != nil {
			return err
		}
		u, seen := b.usage[p.Spec.NodeName]
		grown := false
		for k, name := range b.scratch.total.names {
			// A cluster has few resource names: a scan beats hashing.
			j := slices.Index(b.resName, name)
			if j < 0 {
				j = len(b.resName)
				b.resName = append(b.resName, name)
			}
			if j >= len(u) {
				u = append(u, make([]int64, j+1-len(u))...)
				grown = true
			}
			u[j] += b.scratch.total.vals[k]
		}
		if !seen || grown {
			b.usage[p.Spec.NodeName] = u
		}
		if job != "" {
			b.boundJob[jobReplica{p.Namespace, jobKind, job, p.Labels[kubeflow.LabelReplicaType]}]++
		}
		return nil
	}
	if p.DeletionTimestamp != nil {
		return nil
	}
	req, err := PodRequests(&p.Spec)
	if err != nil {
		return err
	}
	b.pods = append(b.pods, podRecord{
		namespace: p.Namespace, name: p.Name, jobKind: jobKind, job: job,
		replicaType: p.Labels[kubeflow.LabelReplicaType],
		requests:    req, constraints: ConstraintsOf(&p.Spec),
		schedMsg: schedulerMessage(p), gpu: hasGPU(req),
	})
	return nil
}

// jobOf names the Kubeflow job a pod belongs to, if any: kind and name
// from a controller owner reference, or only the name from the job-name
// label (the MPIJob launcher pod is owned by a batch Job).
func jobOf(p *corev1.Pod) (kind, name string) {
	for i := range p.OwnerReferences {
		ref := &p.OwnerReferences[i]
		if ref.Controller != nil && *ref.Controller && strings.HasPrefix(ref.APIVersion, "kubeflow.org/") {
			return ref.Kind, ref.Name
		}
	}
	return "", p.Labels[kubeflow.LabelJobName]
}

// AddJob adds a job after validating it.
func (b *Builder) AddJob(j kubeflow.Job) error {
	if j.Name() == "" {
		return fmt.Errorf("metadata.name is empty")
	}
	if err := j.Validate(); err != nil {
		return err
	}
	b.jobs = append(b.jobs, j)
	return nil
}

// Jobs returns the jobs added.
func (b *Builder) Jobs() []kubeflow.Job { return b.jobs }

// Nodes returns the nodes, sorted by name, with their usage filled in.
func (b *Builder) Nodes() []schedule.Node {
	out := make([]schedule.Node, len(b.nodes))
	copy(out, b.nodes)
	for i := range out {
		u := b.usage[out[i].Name]
		if len(u) == 0 {
			continue
		}
		used := make(schedule.Resources, len(u))
		for j, v := range u {
			if v != 0 {
				used[b.resName[j]] = v
			}
		}
		out[i].Used = used
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// OrphanNodes is the number of node names that bound pods refer to but
// that were not added (their usage is ignored).
func (b *Builder) OrphanNodes() int {
	n := 0
	for name := range b.usage {
		if _, ok := b.nodeIdx[name]; !ok {
			n++
		}
	}
	return n
}

func (r *podRecord) belongsTo(j kubeflow.Job) bool {
	if r.namespace != j.Namespace() {
		return false
	}
	return r.job == j.Name() && (r.jobKind == "" || r.jobKind == j.Kind())
}

// WorkloadFor builds the workload of a job: one pod set per replica type,
// counting the job's pods that are already bound. Where an unbound pod of a
// replica type exists, its own requests and constraints are used (they
// include what admission webhooks added); otherwise the template's.
func (b *Builder) WorkloadFor(j kubeflow.Job) (schedule.Workload, error) {
	w := schedule.Workload{Kind: j.Kind(), Namespace: j.Namespace(), Name: j.Name(), Suspended: j.Suspended()}
	for _, rs := range j.ReplicaSpecs() {
		ps := schedule.PodSet{Name: rs.Type, Count: int(rs.Replicas)}
		for k, n := range b.boundJob {
			if k.of(j) && strings.EqualFold(k.replicaType, rs.Type) {
				ps.Bound += n
			}
		}
		var sample *podRecord
		for i := range b.pods {
			r := &b.pods[i]
			if !r.belongsTo(j) || !strings.EqualFold(r.replicaType, rs.Type) {
				continue
			}
			ps.Pods = append(ps.Pods, r.namespace+"/"+r.name)
			if sample == nil {
				sample = r
			}
			if ps.SchedulerMessage == "" {
				ps.SchedulerMessage = r.schedMsg
			}
		}
		if sample != nil {
			ps.Requests, ps.Constraints = sample.requests, sample.constraints
		} else {
			req, err := PodRequests(&rs.Template.Spec)
			if err != nil {
				return w, fmt.Errorf("%s replica template: %w", rs.Type, err)
			}
			ps.Requests, ps.Constraints = req, ConstraintsOf(&rs.Template.Spec)
		}
		if ps.Bound > ps.Count {
			ps.Bound = ps.Count
		}
		w.PodSets = append(w.PodSets, ps)
	}
	return w, nil
}

// Workloads returns what offline diagnose judges: every job added, every
// group of unbound GPU pods of a job that is not in the input (judged from
// the pods), and every other unbound GPU pod alone.
func (b *Builder) Workloads() ([]schedule.Workload, error) {
	var out []schedule.Workload
	for _, j := range b.jobs {
		w, err := b.WorkloadFor(j)
		if err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", j.Kind(), j.Namespace(), j.Name(), err)
		}
		out = append(out, w)
	}
	owned := func(r *podRecord) bool {
		for _, j := range b.jobs {
			if r.belongsTo(j) {
				return true
			}
		}
		return false
	}
	groups := map[string][]*podRecord{}
	var order []string
	for i := range b.pods {
		r := &b.pods[i]
		if r.job == "" || owned(r) {
			continue
		}
		key := r.namespace + "/" + r.jobKind + "/" + r.job
		if _, ok := groups[key]; !ok {
			order = append(order, key)
		}
		groups[key] = append(groups[key], r)
	}
	for _, key := range order {
		if w, ok := b.workloadFromPods(groups[key]); ok {
			out = append(out, w)
		}
	}
	for i := range b.pods {
		r := &b.pods[i]
		if r.job != "" || !r.gpu {
			continue
		}
		out = append(out, schedule.Workload{Kind: "Pod", Namespace: r.namespace, Name: r.name, PodSets: []schedule.PodSet{{
			Name: r.name, Count: 1, Requests: r.requests, Constraints: r.constraints,
			Pods: []string{r.namespace + "/" + r.name}, SchedulerMessage: r.schedMsg,
		}}})
	}
	return out, nil
}

// workloadFromPods judges a job whose object is missing from the input by
// the pods seen: one pod set per replica type. Only groups with an unbound
// GPU pod are judged.
func (b *Builder) workloadFromPods(rs []*podRecord) (schedule.Workload, bool) {
	kind, name := rs[0].jobKind, rs[0].job
	if kind == "" {
		kind = "Job"
	}
	w := schedule.Workload{Kind: kind, Namespace: rs[0].namespace, Name: name + " (job object not in the input: judged from its pods)"}
	sets := map[string]*schedule.PodSet{}
	var order []string
	judge := false
	for _, r := range rs {
		ps, ok := sets[r.replicaType]
		if !ok {
			ps = &schedule.PodSet{Name: r.replicaType}
			if ps.Name == "" {
				ps.Name = "pods"
			}
			ps.Bound = b.boundJob[jobReplica{r.namespace, r.jobKind, r.job, r.replicaType}]
			ps.Count = ps.Bound
			sets[r.replicaType] = ps
			order = append(order, r.replicaType)
		}
		ps.Count++
		judge = judge || r.gpu
		ps.Pods = append(ps.Pods, r.namespace+"/"+r.name)
		if ps.Requests == nil {
			ps.Requests, ps.Constraints = r.requests, r.constraints
		}
		if ps.SchedulerMessage == "" {
			ps.SchedulerMessage = r.schedMsg
		}
	}
	for _, k := range order {
		w.PodSets = append(w.PodSets, *sets[k])
	}
	return w, judge
}

// PodWorkload builds the workload of a single unbound pod; ok is false when
// the pod was not added or is bound.
func (b *Builder) PodWorkload(namespace, name string) (schedule.Workload, bool) {
	for i := range b.pods {
		r := &b.pods[i]
		if r.namespace == namespace && r.name == name {
			return schedule.Workload{Kind: "Pod", Namespace: namespace, Name: name, PodSets: []schedule.PodSet{{
				Name: name, Count: 1, Requests: r.requests, Constraints: r.constraints,
				Pods: []string{namespace + "/" + name}, SchedulerMessage: r.schedMsg,
			}}}, true
		}
	}
	return schedule.Workload{}, false
}
