package cluster

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource/dra"
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
	// classes: the extended resources DeviceClasses map (dra.go).
	classes DeviceClasses
	// boundDRA: bound pods with resource claims that are not running yet;
	// runningDRA counts those that run (dra.go).
	boundDRA   []BoundDRAPod
	runningDRA int
	// dra: slices, claims, templates and classes (dra_objects.go).
	dra  draObjects
	draJ *draJudge
	// runtimes: the Trainer runtimes TrainJobs are resolved with
	// (runtimes.go).
	runtimes  map[trainjob.RuntimeKey]*trainjob.Runtime
	snapshots map[string]trainjob.Snapshot // by the TrainJob's namespace/name
	live      bool                         // the runtimes come from an API server
}

type podRecord struct {
	namespace, name string
	// jobKind and job name the Kubeflow job (jobOf): from a controller
	// owner reference, or from the job-name label (jobKind from the
	// operator-name label, "" if unknown).
	jobKind, job string
	replica      replicaLabels
	requests     schedule.Resources
	constraints  schedule.Constraints
	schedMsg     string
	gpu          bool
	// claims names the pod's resource claims (DRA); claimRefs are
	// those entries.
	claims    []string
	claimRefs []corev1.PodResourceClaim
}

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder {
	return &Builder{nodeIdx: map[string]int{}, usage: map[string][]int64{}, boundJob: map[jobReplica]int{}}
}

// jobReplica keys the bound pods of one job that carry the same replica
// labels.
type jobReplica struct {
	namespace, kind, job string
	replica              replicaLabels
}

// replicaLabels are the labels that name a pod's replica type. Which of
// them counts depends on the job's operator (kubeflow.ReplicaTypeOf):
// the training-operator sets replica-type ("master", "worker"),
// mpi-operator only job-role ("launcher", "worker"). Both are kept, as
// the pod's job may be added after its pods. The replica-index label is
// not needed: diagnose counts pods per replica type, so mpi-operator's
// indexes shifted by runLauncherAsWorker do not matter here.
// A JobSet's pods (a TrainJob's too) name their ReplicatedJob instead.
type replicaLabels struct{ replicaType, jobRole, replicatedJob string }

func replicaLabelsOf(p *corev1.Pod) replicaLabels {
	return replicaLabels{replicaType: p.Labels[kubeflow.LabelReplicaType], jobRole: p.Labels[kubeflow.LabelJobRole],
		replicatedJob: p.Labels[kubeflow.LabelReplicatedJob]}
}

// replicaTyper maps replica labels to the replica types of a job's kind,
// read the way that kind's operator labels its pods, with a memo (a job's
// pods carry few distinct label pairs).
type replicaTyper struct {
	j    kubeflow.Job
	memo map[replicaLabels]string
}

func newReplicaTyper(j kubeflow.Job) *replicaTyper {
	return &replicaTyper{j: j, memo: map[replicaLabels]string{}}
}

// newKindTyper is a replicaTyper for a kind, on an empty job of it.
func newKindTyper(k kubeflow.Kind) *replicaTyper {
	j, err := k.Wrap(k.New())
	if err != nil {
		panic(fmt.Sprintf("cluster: %v", err)) // a kind that cannot wrap its own New
	}
	return newReplicaTyper(j)
}

// typeOf returns the replica type as the kind spells it (one of every
// type the kind knows, whether or not the job's spec has it), or "" if
// the labels name none.
func (t *replicaTyper) typeOf(l replicaLabels) string {
	if v, ok := t.memo[l]; ok {
		return v
	}
	v, _, _ := t.j.ReplicaTypeLabel(map[string]string{kubeflow.LabelReplicaType: l.replicaType, kubeflow.LabelJobRole: l.jobRole,
		kubeflow.LabelReplicatedJob: l.replicatedJob})
	name := ""
	for _, rt := range t.j.ReplicaTypes() {
		if v != "" && strings.EqualFold(rt, v) {
			name = rt
			break
		}
	}
	t.memo[l] = name
	return name
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
	return b.addNode(sn)
}

func (b *Builder) addNode(sn schedule.Node) error {
	b.draJ = nil
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
			b.boundJob[jobReplica{p.Namespace, jobKind, job, replicaLabelsOf(p)}]++
		}
		if dra.UsesClaims(p) {
			b.addBoundDRA(p)
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
		replica:  replicaLabelsOf(p),
		requests: req, constraints: ConstraintsOf(&p.Spec),
		schedMsg: schedulerMessage(p), gpu: hasGPU(req), claims: claimNames(&p.Spec),
		claimRefs: p.Spec.ResourceClaims,
	})
	return nil
}

// jobOf names the Kubeflow job a pod belongs to, if any: kind and name
// from a controller owner reference, or the name from the job-name label.
// The MPIJob launcher pod is owned by a batch Job (<job>-launcher) that
// the MPIJob owns, so it takes the second way; its kind is then read from
// the operator-name label ("" where that names no known operator). A
// JobSet's pods, controlled by batch Jobs, are named by the JobSet label
// (kind "": the JobSet's, or its TrainJob's, of that name).
func jobOf(p *corev1.Pod) (kind, name string) {
	for i := range p.OwnerReferences {
		ref := &p.OwnerReferences[i]
		if ref.Controller != nil && *ref.Controller && strings.HasPrefix(ref.APIVersion, "kubeflow.org/") {
			return ref.Kind, ref.Name
		}
	}
	name = p.Labels[kubeflow.LabelJobName]
	if name == "" {
		// A JobSet's pod (controlled by a batch Job): the JobSet, or the
		// TrainJob that made it, has its name.
		return "", p.Labels[kubeflow.LabelJobSetName]
	}
	return kubeflow.KindOfOperator(p.Labels[kubeflow.LabelOperatorName]), name
}

// AddJob adds a job after validating it.
func (b *Builder) AddJob(j kubeflow.Job) error {
	if j.Name() == "" {
		return fmt.Errorf("metadata.name is empty")
	}
	if _, ok, err := trainjob.RuntimeOf(j); ok {
		// Validated once resolved with its runtime (Resolve), which may
		// give its node count; the runtime may come later in the input.
		if err != nil {
			return err
		}
	} else if err := j.Validate(); err != nil {
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
		out[i].Used = NamedSums(b.resName, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Usage is the summed requests of the bound, unfinished pods added, by
// node name, whether or not the node was added: what Nodes puts in Used.
func (b *Builder) Usage() map[string]schedule.Resources {
	out := make(map[string]schedule.Resources, len(b.usage))
	for name, u := range b.usage {
		if used := NamedSums(b.resName, u); len(used) > 0 {
			out[name] = used
		}
	}
	return out
}

// NamedSums are sums kept by resource index as resources by name (names
// by index), the zero ones left out.
func NamedSums(names []string, sums []int64) schedule.Resources {
	out := make(schedule.Resources, len(sums))
	for i, v := range sums {
		if v != 0 {
			out[names[i]] = v
		}
	}
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
// as j says them (a TrainJob alone: its numNodes x resourcesPerNode; see
// Resolve for its runtime's pods),
// counting the job's pods that are already bound. Where an unbound pod of a
// replica type exists, its own requests and constraints are used (they
// include what admission webhooks added); otherwise the template's.
func (b *Builder) WorkloadFor(j kubeflow.Job) (schedule.Workload, error) {
	w := schedule.Workload{Kind: j.Kind(), Namespace: j.Namespace(), Name: j.Name(), Suspended: j.Suspended()}
	typer := newReplicaTyper(j)
	var refs [][]corev1.PodResourceClaim
	for _, rs := range j.ReplicaSpecs() {
		ps := schedule.PodSet{Name: rs.Type, Count: int(rs.Replicas)}
		for k, n := range b.boundJob {
			if k.of(j) && typer.typeOf(k.replica) == rs.Type {
				ps.Bound += n
			}
		}
		var sample *podRecord
		for i := range b.pods {
			r := &b.pods[i]
			if !r.belongsTo(j) || typer.typeOf(r.replica) != rs.Type {
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
			ps.DRA = b.viaDRA(sample)
		} else {
			req, err := PodRequests(&rs.Template.Spec)
			if err != nil {
				return w, fmt.Errorf("%s replica template: %w", rs.Type, err)
			}
			ps.Requests, ps.Constraints = req, ConstraintsOf(&rs.Template.Spec)
			ps.DRA = b.classes.viaDRA(claimNames(&rs.Template.Spec), req)
		}
		if ps.Bound > ps.Count {
			ps.Bound = ps.Count
		}
		refs = append(refs, rs.Template.Spec.ResourceClaims)
		if sample != nil {
			refs[len(refs)-1] = sample.claimRefs
		}
		w.PodSets = append(w.PodSets, ps)
	}
	b.judgeDRA(&w, refs)
	return w, nil
}

// Workloads returns what offline diagnose judges: every job added (a
// TrainJob resolved with its runtime, which must be in the input), every
// group of unbound GPU (or DRA) pods of a job that is not in the input
// (judged from the pods), and every other unbound GPU (or DRA) pod alone.
func (b *Builder) Workloads() ([]schedule.Workload, error) {
	var out []schedule.Workload
	for _, j := range b.jobs {
		rj, err := b.Resolve(j)
		if err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", j.Kind(), j.Namespace(), j.Name(), err)
		}
		w, err := b.WorkloadFor(rj)
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
	// A pod known only by its job-name label (kind "", e.g. from a dump
	// without the operator-name label) joins the group of the one job of
	// that name whose kind is known.
	kinds := map[string][]string{}
	for i := range b.pods {
		r := &b.pods[i]
		if k := r.namespace + "/" + r.job; r.job != "" && r.jobKind != "" && !slices.Contains(kinds[k], r.jobKind) {
			kinds[k] = append(kinds[k], r.jobKind)
		}
	}
	type group struct {
		kind string
		rs   []*podRecord
	}
	groups := map[string]*group{}
	var order []string
	for i := range b.pods {
		r := &b.pods[i]
		if r.job == "" || owned(r) {
			continue
		}
		kind := r.jobKind
		if ks := kinds[r.namespace+"/"+r.job]; kind == "" && len(ks) == 1 {
			kind = ks[0]
		}
		key := r.namespace + "/" + kind + "/" + r.job
		g, ok := groups[key]
		if !ok {
			g = &group{kind: kind}
			groups[key] = g
			order = append(order, key)
		}
		g.rs = append(g.rs, r)
	}
	for _, key := range order {
		if w, ok := b.workloadFromPods(groups[key].kind, groups[key].rs); ok {
			out = append(out, w)
		}
	}
	for i := range b.pods {
		r := &b.pods[i]
		if r.job != "" || !b.devicePod(r) {
			continue
		}
		out = append(out, b.podWorkload(r))
	}
	return out, nil
}

// workloadFromPods judges a job whose object is missing from the input by
// the pods seen: one pod set per replica type. Only groups with an unbound
// GPU or DRA pod are judged. kind is the job's kind, "" if unknown.
func (b *Builder) workloadFromPods(kind string, rs []*podRecord) (schedule.Workload, bool) {
	ns, name := rs[0].namespace, rs[0].job
	w := schedule.Workload{Kind: kind, Namespace: ns, Name: name + " (job object not in the input: judged from its pods)"}
	if w.Kind == "" {
		w.Kind = "Job"
	}
	namer := newSetNamer(kind)
	sets := map[string]*schedule.PodSet{}
	refs := map[string][]corev1.PodResourceClaim{}
	var order []string
	judge := false
	for _, r := range rs {
		set := namer.name(r.replica)
		ps, ok := sets[set]
		if !ok {
			ps = &schedule.PodSet{Name: set}
			sets[set] = ps
			order = append(order, set)
		}
		ps.Count++
		judge = judge || b.devicePod(r)
		ps.Pods = append(ps.Pods, r.namespace+"/"+r.name)
		if ps.Requests == nil {
			ps.Requests, ps.Constraints = r.requests, r.constraints
			ps.DRA = b.viaDRA(r)
			refs[set] = r.claimRefs
		}
		if ps.SchedulerMessage == "" {
			ps.SchedulerMessage = r.schedMsg
		}
	}
	// The job's bound pods count towards the pod sets that have pending
	// pods.
	for k, n := range b.boundJob {
		if k.namespace != ns || k.job != name || (k.kind != "" && kind != "" && k.kind != kind) {
			continue
		}
		if ps, ok := sets[namer.name(k.replica)]; ok {
			ps.Bound += n
			ps.Count += n
		}
	}
	var setRefs [][]corev1.PodResourceClaim
	for _, k := range order {
		w.PodSets = append(w.PodSets, *sets[k])
		setRefs = append(setRefs, refs[k])
	}
	b.judgeDRA(&w, setRefs)
	return w, judge
}

// setNamer names the pod set of a pod of a job that is not in the
// input, by the replica types of the job's kind, or of every kind if it
// is unknown (the first whose labels name one of its types: the
// operators' labels do not overlap).
type setNamer []*replicaTyper

func newSetNamer(kind string) setNamer {
	if k, ok := kubeflow.ByName(kind); ok {
		return setNamer{newKindTyper(k)}
	}
	var n setNamer
	for _, k := range kubeflow.All() {
		n = append(n, newKindTyper(k))
	}
	return n
}

func (n setNamer) name(l replicaLabels) string {
	for _, t := range n {
		if v := t.typeOf(l); v != "" {
			return v
		}
	}
	switch {
	case l.replicaType != "":
		return l.replicaType
	case l.jobRole != "":
		return l.jobRole
	case l.replicatedJob != "":
		return l.replicatedJob
	}
	return "pods"
}

// PodWorkload builds the workload of a single unbound pod; ok is false when
// the pod was not added or is bound.
func (b *Builder) PodWorkload(namespace, name string) (schedule.Workload, bool) {
	for i := range b.pods {
		r := &b.pods[i]
		if r.namespace == namespace && r.name == name {
			return b.podWorkload(r), true
		}
	}
	return schedule.Workload{}, false
}

func (b *Builder) podWorkload(r *podRecord) schedule.Workload {
	ps := schedule.PodSet{
		Name: r.name, Count: 1, Requests: r.requests, Constraints: r.constraints,
		Pods: []string{r.namespace + "/" + r.name}, SchedulerMessage: r.schedMsg, DRA: b.viaDRA(r),
	}
	w := schedule.Workload{Kind: "Pod", Namespace: r.namespace, Name: r.name, PodSets: []schedule.PodSet{ps}}
	b.judgeDRA(&w, [][]corev1.PodResourceClaim{r.claimRefs})
	return w
}

// viaDRA says how an unbound pod gets devices through DRA ("" if not).
func (b *Builder) viaDRA(r *podRecord) string { return b.classes.viaDRA(r.claims, r.requests) }

// devicePod: an unbound pod that asks for GPUs, or for devices through
// DRA; diagnose judges such pods.
func (b *Builder) devicePod(r *podRecord) bool { return r.gpu || b.viaDRA(r) != "" }
