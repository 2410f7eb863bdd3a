package controller

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unique"
	"unsafe"
	"weak"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	interntable "github.com/rankgate/rankgate/internal/intern"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/topology"
)

// The informer caches keep only what the controller reads: with 20,000 pods
// and 5,000 nodes, full objects would cost hundreds of MB. Objects from the
// cache are therefore incomplete and must never be written back with
// Update; the controller only Patches, computing the patch from two copies
// of the same trimmed object.

// cacheOptions returns the trimmed cache configuration for the kinds in use.
// Without trim only the pod label selector applies.
func cacheOptions(kinds []kubeflow.Kind, trim bool) cache.Options {
	hasJob, _ := labels.NewRequirement(LabelJobName, selection.Exists, nil)
	if !trim {
		return cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: labels.NewSelector().Add(*hasJob)}}}
	}
	by := map[client.Object]cache.ByObject{
		// Only Kubeflow replica pods: those carry the job-name label.
		&corev1.Pod{}:       {Label: labels.NewSelector().Add(*hasJob), Transform: trimPod},
		&corev1.Node{}:      {Transform: trimNode},
		&corev1.Namespace{}: {Transform: trimNamespace},
		// DRA objects (cache_dra.go); informers start only where
		// resource.k8s.io/v1 is served (dra.go).
		&resourcev1.ResourceSlice{}:         {Transform: trimResourceSlice},
		&resourcev1.ResourceClaim{}:         {Transform: trimResourceClaim},
		&resourcev1.ResourceClaimTemplate{}: {Transform: trimResourceClaimTemplate},
	}
	for _, k := range kinds {
		strip := k.Strip
		by[k.New()] = cache.ByObject{Transform: func(i any) (any, error) {
			if o, ok := i.(client.Object); ok {
				o.SetManagedFields(nil)
				strip(o)
			}
			return i, nil
		}}
	}
	return cache.Options{ByObject: by, DefaultTransform: cache.TransformStripManagedFields()}
}

// podsByJob indexes the cached pods by their job-name label: a job's pods
// are listed from the index, not by scanning every pod of its namespace
// (20,000 in one namespace took a copy of 20,000 pointers per list).
const podsByJob = contract.IndexPodsByJob

func indexPodsByJob(ctx context.Context, idx client.FieldIndexer) error {
	return idx.IndexField(ctx, &corev1.Pod{}, podsByJob, func(o client.Object) []string {
		if v := o.GetLabels()[LabelJobName]; v != "" {
			return []string{v}
		}
		return nil
	})
}

// listJobPods lists the cached pods labelled with job name in ns.
func (c *Controller) listJobPods(ctx context.Context, pods *corev1.PodList, ns, name string) error {
	return c.client.List(ctx, pods, client.InNamespace(ns), client.MatchingFields{podsByJob: name})
}

func keepPrefixed(m map[string]string, prefixes ...string) map[string]string {
	var out map[string]string
	for k, v := range m {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				if out == nil {
					out = make(map[string]string, 4)
				}
				out[intern(k)] = intern(v)
				break
			}
		}
	}
	return out
}

func trimMeta(m metav1.ObjectMeta, labelPrefixes ...string) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name: m.Name, Namespace: intern(m.Namespace), UID: m.UID, ResourceVersion: m.ResourceVersion,
		CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp,
		Labels: keepPrefixed(m.Labels, labelPrefixes...),
	}
	out.OwnerReferences = internOwners(m.OwnerReferences)
	return out
}

// owners shares equal owner lists between cached objects (a job's
// replicas have the same owner). Entries are weak: a list no cached
// object holds any more is collected.
var owners struct {
	sync.Mutex
	m     map[string]ownerList
	sweep int
}

// ownerList is a weak reference to a shared owner list: its first element
// is the start of the list's array.
type ownerList struct {
	first weak.Pointer[metav1.OwnerReference]
	n     int
}

func internOwners(refs []metav1.OwnerReference) []metav1.OwnerReference {
	if len(refs) == 0 {
		return nil
	}
	var key strings.Builder
	for _, r := range refs {
		key.WriteString(r.APIVersion)
		key.WriteByte(0)
		key.WriteString(r.Kind)
		key.WriteByte(0)
		key.WriteString(r.Name)
		key.WriteByte(0)
		key.WriteString(string(r.UID))
		key.WriteByte(0)
		for _, b := range []*bool{r.Controller, r.BlockOwnerDeletion} {
			switch {
			case b == nil:
				key.WriteByte('-')
			case *b:
				key.WriteByte('t')
			default:
				key.WriteByte('f')
			}
		}
		key.WriteByte(0)
	}
	k := key.String()
	owners.Lock()
	defer owners.Unlock()
	if e, ok := owners.m[k]; ok {
		if p := e.first.Value(); p != nil {
			return unsafe.Slice(p, e.n)
		}
	}
	out := make([]metav1.OwnerReference, len(refs))
	for i, r := range refs {
		r.APIVersion, r.Kind, r.Name = intern(r.APIVersion), intern(r.Kind), intern(r.Name)
		out[i] = r
	}
	if owners.m == nil {
		owners.m = map[string]ownerList{}
	}
	owners.m[k] = ownerList{first: weak.Make(&out[0]), n: len(out)}
	if len(owners.m) > owners.sweep {
		for k, p := range owners.m {
			if p.first.Value() == nil {
				delete(owners.m, k)
			}
		}
		owners.sweep = 2*len(owners.m) + 64
	}
	return out
}

// intern shares equal strings between cached objects (namespaces, label
// keys and values, job and node names repeat across thousands of pods).
func intern(s string) string { return unique.Make(s).Value() }

// gpuList keeps the GPU resources of rl.
func gpuList(rl corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for k, v := range rl {
		if topology.IsGPUResource(string(k)) {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[k] = v
		}
	}
	return out
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Bounds of a cached pod: whatever a pod carries (any user who may create
// pods can give one 20,000 containers, labels, gates and owners), its
// cached record stays a few KiB.
const (
	maxPodLabels      = 8  // training.kubeflow.org/ and rankgate.io/ labels
	maxInitStatuses   = 8  // init container states (podState reads the first that says something)
	maxSchedGates     = 4  // scheduling gates named in the scheduler message
	maxRequestNames   = 32 // resource names of the effective request
	maxCachedGateName = 63
	maxPodClaims      = 8   // resource claims and their statuses (the DRA device source: allocations.go)
	maxClaimName      = 253 // a claim's or template's name (an object name)
)

// Annotations only the cached copy of a pod carries (never written).
const (
	// annoPlacement is the fingerprint of an unbound pod's placement rules
	// (placementFingerprint): the rules themselves are read when the
	// watchdog needs them (podfacts.go).
	annoPlacement = contract.CachedAnnotationPlacement
	// annoUnreadable is why the pod's effective request cannot be read.
	annoUnreadable = contract.CachedAnnotationUnreadableRequest
	// annoClaimsCut: the pod has more claims than the cache keeps.
	annoClaimsCut = contract.CachedAnnotationClaimsCut
)

// podLabels are the labels a cached pod keeps first (the rank labels the
// kinds read); others under the kept prefixes follow, in key order, up to
// maxPodLabels.
var podLabels = kubeflow.PodLabels()

// trimPod keeps identity, rank labels, the controller owner, node, phase,
// the PodScheduled condition, the first init container states and the
// pod's effective request; for a pod not yet bound to a node, also its
// scheduling gates and a fingerprint of its placement rules, never the
// rules or containers themselves (podfacts.go reads them when the Pending
// watchdog judges the job). Every part is bounded (see maxPodLabels).
func trimPod(i any) (any, error) {
	p, ok := i.(*corev1.Pod)
	if !ok {
		return unwrapTombstone(i, trimPod)
	}
	out := &corev1.Pod{
		ObjectMeta: trimPodMeta(&p.ObjectMeta),
		Spec: corev1.PodSpec{
			NodeName: intern(p.Spec.NodeName), ServiceAccountName: intern(p.Spec.ServiceAccountName),
		},
		Status: corev1.PodStatus{Phase: p.Status.Phase, Reason: clip(p.Status.Reason, 128), Message: clip(p.Status.Message, 256)},
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status, Reason: clip(c.Reason, 128), Message: clip(c.Message, 512), LastTransitionTime: c.LastTransitionTime}}
			break
		}
	}
	for _, s := range p.Status.InitContainerStatuses[:min(len(p.Status.InitContainerStatuses), maxInitStatuses)] {
		t := corev1.ContainerStatus{Name: clip(s.Name, maxCachedGateName), Ready: s.Ready, RestartCount: s.RestartCount}
		switch {
		case s.State.Waiting != nil:
			t.State.Waiting = &corev1.ContainerStateWaiting{Reason: clip(s.State.Waiting.Reason, 128), Message: clip(s.State.Waiting.Message, 256)}
		case s.State.Running != nil:
			t.State.Running = &corev1.ContainerStateRunning{StartedAt: s.State.Running.StartedAt}
		case s.State.Terminated != nil:
			t.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: s.State.Terminated.ExitCode, Reason: clip(s.State.Terminated.Reason, 128), Message: clip(s.State.Terminated.Message, 256)}
		}
		out.Status.InitContainerStatuses = append(out.Status.InitContainerStatuses, t)
	}
	keepRequest(out, &p.Spec)
	keepClaims(out, p)
	if p.Spec.NodeName == "" {
		for _, g := range p.Spec.SchedulingGates[:min(len(p.Spec.SchedulingGates), maxSchedGates)] {
			out.Spec.SchedulingGates = append(out.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: intern(clip(g.Name, maxCachedGateName))})
		}
		setCachedAnnotation(out, annoPlacement, placementFingerprint(&p.Spec))
	}
	return out, nil
}

// keepClaims keeps the names of p's resource claims, of the claims made
// for it from templates and of the one the scheduler made for its
// DRA-served extended resources: what the DRA device source reads of a
// rank's pod. A pod with more than maxPodClaims keeps none and is marked
// (annoClaimsCut): it is not judged from its allocations.
func keepClaims(out, p *corev1.Pod) {
	if len(p.Spec.ResourceClaims) > maxPodClaims || len(p.Status.ResourceClaimStatuses) > maxPodClaims {
		setCachedAnnotation(out, annoClaimsCut, "true")
		return
	}
	ptr := func(s *string) *string {
		if s == nil {
			return nil
		}
		v := intern(clip(*s, maxClaimName))
		return &v
	}
	for _, c := range p.Spec.ResourceClaims {
		out.Spec.ResourceClaims = append(out.Spec.ResourceClaims, corev1.PodResourceClaim{Name: intern(clip(c.Name, maxClaimName)),
			ResourceClaimName: ptr(c.ResourceClaimName), ResourceClaimTemplateName: ptr(c.ResourceClaimTemplateName)})
	}
	for _, st := range p.Status.ResourceClaimStatuses {
		out.Status.ResourceClaimStatuses = append(out.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: intern(clip(st.Name, maxClaimName)), ResourceClaimName: ptr(st.ResourceClaimName)})
	}
	if e := p.Status.ExtendedResourceClaimStatus; e != nil {
		out.Status.ExtendedResourceClaimStatus = &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: clip(e.ResourceClaimName, maxClaimName)}
	}
}

// trimPodMeta keeps a pod's identity, at most maxPodLabels of its rank
// labels, and its controller owner reference (the only one read).
func trimPodMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name: m.Name, Namespace: intern(m.Namespace), UID: m.UID, ResourceVersion: m.ResourceVersion,
		CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp,
	}
	keep := func(k, v string) {
		if out.Labels == nil {
			out.Labels = make(map[string]string, 4)
		}
		out.Labels[intern(k)] = intern(v)
	}
	for _, k := range podLabels {
		if v, ok := m.Labels[k]; ok {
			keep(k, v)
		}
	}
	if len(m.Labels) > len(out.Labels) {
		var more []string
		for k := range m.Labels {
			if _, kept := out.Labels[k]; !kept && (strings.HasPrefix(k, "training.kubeflow.org/") || strings.HasPrefix(k, contract.Prefix)) {
				more = append(more, k)
			}
		}
		slices.Sort(more)
		for _, k := range more[:min(len(more), maxPodLabels-len(out.Labels))] {
			keep(k, m.Labels[k])
		}
	}
	for i := range m.OwnerReferences {
		if r := &m.OwnerReferences[i]; r.Controller != nil && *r.Controller {
			out.OwnerReferences = internOwners(m.OwnerReferences[i : i+1])
			break
		}
	}
	return out
}

// setCachedAnnotation sets an annotation on a cached copy.
func setCachedAnnotation(p *corev1.Pod, k, v string) {
	if p.Annotations == nil {
		p.Annotations = make(map[string]string, 1)
	}
	p.Annotations[k] = v
}

// slimPod keeps of a pod outside any Kubeflow job what the nodes' usage
// reads (usage.go): identity, node, phase and effective request.
func slimPod(i any) (any, error) {
	p, ok := i.(*corev1.Pod)
	if !ok {
		return unwrapTombstone(i, slimPod)
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: intern(p.Namespace), UID: p.UID, ResourceVersion: p.ResourceVersion},
		Spec:       corev1.PodSpec{NodeName: intern(p.Spec.NodeName)},
		Status:     corev1.PodStatus{Phase: p.Status.Phase},
	}
	keepRequest(out, &p.Spec)
	return out, nil
}

// keepRequest puts the effective request of in (cluster.PodRequests, as
// the scheduler sums it) into out as a pod-level request, which
// cluster.PodRequests reads back unchanged; equal requests share one
// read-only copy. Of a request naming more than maxRequestNames
// resources, the node resources every kubelet advertises and the GPU
// resources come first. A request that cannot be read keeps why
// (annoUnreadable), so that summing it fails again (usage.go).
func keepRequest(out *corev1.Pod, in *corev1.PodSpec) {
	req, err := cluster.PodRequests(in)
	if err != nil {
		setCachedAnnotation(out, annoUnreadable, clip(err.Error(), 512))
		return
	}
	out.Spec.Resources = internRequest(boundNames(req))
}

// boundNames keeps at most maxRequestNames resources of req.
func boundNames(req schedule.Resources) schedule.Resources {
	if len(req) <= maxRequestNames {
		return req
	}
	names := make([]string, 0, len(req))
	for n := range req {
		names = append(names, n)
	}
	rank := func(n string) int {
		switch {
		case n == string(corev1.ResourceCPU) || n == string(corev1.ResourceMemory) || n == string(corev1.ResourceEphemeralStorage) || n == schedule.ResourcePods:
			return 0
		case topology.IsGPUResource(n):
			return 1
		}
		return 2
	}
	slices.SortFunc(names, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	out := make(schedule.Resources, maxRequestNames)
	for _, n := range names[:maxRequestNames] {
		out[n] = req[n]
	}
	return out
}

// lists shares equal resource lists between cached objects (the nodes of
// one kind advertise the same allocatable, a job's pending replicas ask
// the same); shared lists are read only, as every cached object is.
var lists = boundedShares[corev1.ResourceList]{max: 4096}

func internList(rl corev1.ResourceList) corev1.ResourceList {
	if len(rl) == 0 {
		return rl
	}
	k := quantityMapKey(rl, func(q resource.Quantity) resource.Quantity { return q })
	return lists.share(k, func() corev1.ResourceList {
		out := make(corev1.ResourceList, len(rl))
		for n, q := range rl {
			out[corev1.ResourceName(intern(string(n)))] = q
		}
		return out
	})
}

// boundedShares shares equal values by a key that says what they hold.
// The table forgets everything when it is full: holders keep their values.
type boundedShares[V any] struct {
	mu  sync.Mutex
	m   map[string]V
	max int
}

// share returns the value shared under key, made by build the first time.
func (b *boundedShares[V]) share(key string, build func() V) V {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v, ok := b.m[key]; ok {
		return v
	}
	if b.m == nil || len(b.m) >= b.max {
		b.m = make(map[string]V, 64)
	}
	v := build()
	b.m[key] = v
	return v
}

// quantityMapKey is a key of m that equal maps share: its names, sorted,
// each with its quantity (q reads it from a value).
func quantityMapKey[K ~string, V any](m map[K]V, q func(V) resource.Quantity) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, string(n))
	}
	slices.Sort(names)
	var key strings.Builder
	for _, n := range names {
		v := q(m[K(n)])
		key.WriteString(n)
		key.WriteByte('=')
		key.WriteString(v.String())
		key.WriteByte(';')
	}
	return key.String()
}

// requests shares equal pod-level requests between cached pods (the
// replicas of a job, the pods of a DaemonSet ask the same). Entries are
// weak: a request no cached pod holds any more is collected.
var requests interntable.Table[corev1.ResourceRequirements]

func internRequest(req schedule.Resources) *corev1.ResourceRequirements {
	names := make([]string, 0, len(req))
	for n := range req {
		if n != schedule.ResourcePods {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var key strings.Builder
	for _, n := range names {
		key.WriteString(n)
		key.WriteByte('=')
		key.WriteString(strconv.FormatInt(req[n], 10))
		key.WriteByte(';')
	}
	return requests.ShareFunc(key.String(), func() *corev1.ResourceRequirements {
		rl := make(corev1.ResourceList, len(names))
		for _, n := range names {
			if n == string(corev1.ResourceCPU) {
				rl[corev1.ResourceName(intern(n))] = *resource.NewMilliQuantity(req[n], resource.DecimalSI)
			} else {
				rl[corev1.ResourceName(intern(n))] = *resource.NewQuantity(req[n], resource.DecimalSI)
			}
		}
		return &corev1.ResourceRequirements{Requests: rl}
	})
}

// trimNode keeps what the schedule engine reads (cluster.NodeFromCore):
// labels (GPU feature discovery's, and any a pod may select on; keys and
// values interned: they repeat across a fleet), taints, schedulability,
// allocatable, GPU capacity (stale MIG resources) and Ready.
func trimNode(i any) (any, error) {
	n, ok := i.(*corev1.Node)
	if !ok {
		return unwrapTombstone(i, trimNode)
	}
	out := &corev1.Node{
		ObjectMeta: trimMeta(n.ObjectMeta, ""),
		Spec:       corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable, Taints: n.Spec.Taints},
		Status:     corev1.NodeStatus{Allocatable: internList(n.Status.Allocatable), Capacity: internList(gpuList(n.Status.Capacity))},
	}
	out.OwnerReferences = nil
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status, Reason: c.Reason}}
		}
	}
	return out, nil
}

// trimNamespace keeps the opt-in label.
func trimNamespace(i any) (any, error) {
	ns, ok := i.(*corev1.Namespace)
	if !ok {
		return unwrapTombstone(i, trimNamespace)
	}
	out := &corev1.Namespace{ObjectMeta: trimMeta(ns.ObjectMeta, contract.Prefix)}
	out.OwnerReferences = nil
	return out, nil
}

func unwrapTombstone(i any, f func(any) (any, error)) (any, error) {
	if t, ok := i.(toolscache.DeletedFinalStateUnknown); ok {
		o, err := f(t.Obj)
		if err != nil {
			return nil, err
		}
		t.Obj = o
		return t, nil
	}
	return i, nil
}
