// Package router is the event router of rankgate controller's job
// reconcilers: one handler on each informer, however many job kinds are
// installed, doing the shared work of an event once and handing the
// requests to the queue of the reconciler they are for.
package router

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource/dra"
)

// A pod event is
// mapped to its job once (jobOf: the pod's controller, or the job behind
// its batch Job, read the first time) and goes to that job's kind only; a
// node change, once the node model applied it (the model's own handler),
// re-judges the Pending jobs of every kind it may fail; an allocated claim is mapped to the jobs of
// the pods it is reserved for once. The reconcilers' queues are
// controller-runtime's; each kind's reconcilers take the router's sources
// (Router.Source) instead of watching pods, nodes, namespaces and DRA
// objects themselves.

// Destination is which reconciler of a kind a request is for.
type Destination int

const (
	ToJob         Destination = iota // the kind's job reconciler
	ToAllocations                    // the kind's allocations reconciler (DRA)
)

func (d Destination) String() string {
	if d == ToAllocations {
		return "allocations"
	}
	return "job"
}

type route struct {
	kind string
	to   Destination
}

// Deps is what the router asks of the controller, each owned elsewhere:
// the job of a pod, the node model's changes and the Pending watchdog's
// jobs.
type Deps struct {
	// JobOf maps a pod to its job (its kind and name).
	JobOf func(context.Context, *corev1.Pod) (kind, name string, ok bool, err error)
	// PodWakes: a pod update that the job reconciler acts on (a pod
	// becoming schedulable or unschedulable).
	PodWakes func(o, n *corev1.Pod) bool
	// PodChanged is told of every pod added, updated or deleted (the
	// Pending watchdog's last judgement of its job is stale).
	PodChanged func(*corev1.Pod)
	// Pod reads a cached pod (the claims' consumers).
	Pod func(context.Context, types.NamespacedName) (*corev1.Pod, error)
	// WatchNodes registers a func the node model calls after each node
	// change it applied (o nil: added; n nil: deleted): the jobs a node
	// event affects are judged on the model with the node in it.
	// NodeChanged records what a node update tells the Pending watchdog.
	WatchNodes  func(func(o, n *corev1.Node))
	NodeChanged func(o, n *corev1.Node)
	// AffectedByNode and AffectedByDevices: the watched Pending jobs of a
	// kind that a node event, or a change of the published devices or
	// their taint rules, may fail.
	AffectedByNode    func(kind string) []reconcile.Request
	AffectedByDevices func(kind string) []reconcile.Request
	// JobsIn: the jobs of a kind in a namespace whose opt-in changed.
	JobsIn func(ctx context.Context, kind, ns string) []reconcile.Request
	// Informer: the manager's informer of an object's type.
	Informer func(context.Context, client.Object) (crcache.Informer, error)
	// DRA, Rules: DRA objects, DeviceTaintRules are served.
	DRA, Rules bool
	Log        func(err error, msg string, kv ...any)
}

// Router owns the informer handlers of the job reconcilers and the table
// of their queues.
type Router struct {
	deps Deps

	mu     sync.RWMutex
	queues map[route]workqueue.TypedRateLimitingInterface[reconcile.Request]
	kinds  []string // the kinds with a job queue, in registration order

	startOnce sync.Once
	startErr  error
	synced    []toolscache.InformerSynced
	ctx       context.Context
}

// New is a router with deps.
func New(deps Deps) *Router {
	return &Router{deps: deps, queues: map[route]workqueue.TypedRateLimitingInterface[reconcile.Request]{}}
}

// Source is the router's source for kind's reconciler to.
func (r *Router) Source(kind string, to Destination) source.TypedSyncingSource[reconcile.Request] {
	return routedSource{r: r, route: route{kind: kind, to: to}}
}

// routedSource is one reconciler's share of the router's events.
type routedSource struct {
	r     *Router
	route route
}

func (s routedSource) String() string {
	return fmt.Sprintf("routed %s events of %s", s.route.to, s.route.kind)
}

// Start registers the reconciler's queue; the first Start adds the
// router's handlers to the informers.
func (s routedSource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	s.r.register(s.route, q)
	return s.r.start(ctx)
}

// WaitForSync: the router's handlers have seen every informer's initial
// list.
func (s routedSource) WaitForSync(ctx context.Context) error {
	s.r.mu.RLock()
	synced := s.r.synced
	s.r.mu.RUnlock()
	if !toolscache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("%s: informers not synced: %w", s, ctx.Err())
	}
	return nil
}

func (r *Router) register(rt route, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.queues[rt]; !ok && rt.to == ToJob {
		r.kinds = append(r.kinds, rt.kind)
	}
	r.queues[rt] = q
}

// send adds reqs to rt's queue, if its reconciler runs.
func (r *Router) send(rt route, reqs ...reconcile.Request) {
	if len(reqs) == 0 {
		return
	}
	r.mu.RLock()
	q := r.queues[rt]
	r.mu.RUnlock()
	if q == nil {
		return
	}
	for _, req := range reqs {
		q.Add(req)
	}
}

// eachKind sends each kind's requests to its job reconciler.
func (r *Router) eachKind(reqs func(kind string) []reconcile.Request) {
	r.mu.RLock()
	kinds := r.kinds
	r.mu.RUnlock()
	for _, k := range kinds {
		r.send(route{kind: k, to: ToJob}, reqs(k)...)
	}
}

func (r *Router) start(ctx context.Context) error {
	r.startOnce.Do(func() {
		r.ctx = ctx
		r.startErr = r.addHandlers(ctx)
	})
	return r.startErr
}

func (r *Router) addHandlers(ctx context.Context) error {
	handlers := []struct {
		obj client.Object
		h   toolscache.ResourceEventHandler
		on  bool
	}{
		{&corev1.Pod{}, toolscache.ResourceEventHandlerFuncs{AddFunc: r.podAdded, UpdateFunc: r.podUpdated, DeleteFunc: r.podDeleted}, true},
		{&corev1.Namespace{}, toolscache.ResourceEventHandlerFuncs{UpdateFunc: r.namespaceUpdated}, true},
		{&resourcev1.ResourceClaim{}, toolscache.ResourceEventHandlerFuncs{AddFunc: r.claimAdded, UpdateFunc: r.claimUpdated}, r.deps.DRA},
		{&resourcev1.ResourceSlice{}, devicesChanged(r), r.deps.DRA},
		{&resourcev1.DeviceTaintRule{}, devicesChanged(r), r.deps.DRA && r.deps.Rules},
	}
	if r.deps.WatchNodes != nil {
		r.deps.WatchNodes(r.nodeEvent)
	}
	var synced []toolscache.InformerSynced
	for _, h := range handlers {
		if !h.on {
			continue
		}
		inf, err := r.deps.Informer(ctx, h.obj)
		if err != nil {
			return fmt.Errorf("controller: the event router's %T informer: %w", h.obj, err)
		}
		reg, err := inf.AddEventHandler(h.h)
		if err != nil {
			return fmt.Errorf("controller: the event router's %T handler: %w", h.obj, err)
		}
		synced = append(synced, reg.HasSynced)
	}
	r.mu.Lock()
	r.synced = synced
	r.mu.Unlock()
	return nil
}

// informed is the T in an informer's object, a tombstone's included.
func informed[T any](o any) (T, bool) {
	if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	v, ok := o.(T)
	return v, ok
}

func toPod(o any) (*corev1.Pod, bool) { return informed[*corev1.Pod](o) }

// podAdded: a pod created bound with claims (the scheduler allocated
// them) brings its job to the allocations reconciler.
func (r *Router) podAdded(o any) {
	p, ok := toPod(o)
	if !ok {
		return
	}
	r.deps.PodChanged(p)
	if r.deps.DRA && p.Spec.NodeName != "" && dra.UsesClaims(p) {
		r.routePod(p, ToAllocations)
	}
}

func (r *Router) podDeleted(o any) {
	if p, ok := toPod(o); ok {
		r.deps.PodChanged(p)
	}
}

// podUpdated: a pod becoming (un)schedulable wakes its job's watchdog; a
// pod just bound with claims, its job's allocations.
func (r *Router) podUpdated(o, n any) {
	op, ok1 := toPod(o)
	np, ok2 := toPod(n)
	if !ok1 || !ok2 {
		return
	}
	r.deps.PodChanged(np)
	var to []Destination
	if r.deps.PodWakes(op, np) {
		to = append(to, ToJob)
	}
	if r.deps.DRA && op.Spec.NodeName == "" && np.Spec.NodeName != "" && dra.UsesClaims(np) {
		to = append(to, ToAllocations)
	}
	if len(to) > 0 {
		r.routePod(np, to...)
	}
}

// routePod sends the job of p, mapped once, to its kind's reconcilers to.
func (r *Router) routePod(p *corev1.Pod, to ...Destination) {
	kind, name, ok, err := r.deps.JobOf(r.ctx, p)
	if err != nil {
		r.deps.Log(err, "mapping a pod event to its job", "pod", p.Namespace+"/"+p.Name)
		return
	}
	if !ok {
		return
	}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: name}}
	for _, d := range to {
		r.send(route{kind: kind, to: d}, req)
	}
}

// nodeEvent re-judges each kind's Pending jobs a node change the model
// just applied may fail (o nil: the node was added; n nil: deleted).
func (r *Router) nodeEvent(o, n *corev1.Node) {
	if o != nil && n != nil {
		r.deps.NodeChanged(o, n)
	}
	r.eachKind(r.deps.AffectedByNode)
}

// namespaceUpdated: a namespace opted in (or out) later has its jobs
// looked at (the Pending watchdog judges jobs that predate the opt-in).
func (r *Router) namespaceUpdated(o, n any) {
	on, ok1 := o.(*corev1.Namespace)
	nn, ok2 := n.(*corev1.Namespace)
	if !ok1 || !ok2 || on.Labels[contract.KeyGate] == nn.Labels[contract.KeyGate] {
		return
	}
	r.eachKind(func(kind string) []reconcile.Request { return r.deps.JobsIn(r.ctx, kind, nn.Name) })
}

// devicesChanged re-judges the Pending DRA jobs of every kind when a
// ResourceSlice or DeviceTaintRule is added, deleted or changes its spec.
func devicesChanged(r *Router) toolscache.ResourceEventHandler {
	all := func(any) { r.eachKind(r.deps.AffectedByDevices) }
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    all,
		DeleteFunc: all,
		UpdateFunc: func(o, n any) {
			om, ok1 := o.(client.Object)
			nm, ok2 := n.(client.Object)
			if ok1 && ok2 && om.GetGeneration() == nm.GetGeneration() {
				return
			}
			all(n)
		},
	}
}

// claimAdded and claimUpdated: a claim's allocation may reach the cache
// after its pod's binding (two informers): its allocation brings the jobs
// of the bound pods it is reserved for to their allocations reconcilers.
func (r *Router) claimAdded(o any) {
	if cl, ok := o.(*resourcev1.ResourceClaim); ok && cl.Status.Allocation != nil {
		r.claimAllocated(cl)
	}
}

func (r *Router) claimUpdated(o, n any) {
	oc, ok1 := o.(*resourcev1.ResourceClaim)
	nc, ok2 := n.(*resourcev1.ResourceClaim)
	if ok1 && ok2 && oc.Status.Allocation == nil && nc.Status.Allocation != nil {
		r.claimAllocated(nc)
	}
}

func (r *Router) claimAllocated(cl *resourcev1.ResourceClaim) {
	for _, ref := range cl.Status.ReservedFor {
		if ref.Resource != "pods" || ref.APIGroup != "" {
			continue
		}
		p, err := r.deps.Pod(r.ctx, types.NamespacedName{Namespace: cl.Namespace, Name: ref.Name})
		if err != nil || p.UID != ref.UID || p.Spec.NodeName == "" {
			continue
		}
		r.routePod(p, ToAllocations)
	}
}
