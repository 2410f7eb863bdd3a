package controller

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

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource/dra"
)

// The cluster events the job reconcilers act on reach them through one
// router: one handler on each informer, however many job kinds are
// installed, doing the shared work of an event once and handing the
// requests to the queue of the reconciler they are for. A pod event is
// mapped to its job once (jobOf: the pod's controller, or the job behind
// its batch Job, read the first time) and goes to that job's kind only; a
// node event updates the node model once and re-judges the Pending jobs
// of every kind it may fail; an allocated claim is mapped to the jobs of
// the pods it is reserved for once. The reconcilers' queues are
// controller-runtime's; each kind's reconcilers take the router's sources
// (routed) instead of watching pods, nodes, namespaces and DRA objects
// themselves.

// destination is which reconciler of a kind a request is for.
type destination int

const (
	toJob         destination = iota // the kind's job reconciler (reconcile.go)
	toAllocations                    // the kind's allocations reconciler (allocations.go)
)

func (d destination) String() string {
	if d == toAllocations {
		return "allocations"
	}
	return "job"
}

type route struct {
	kind string
	to   destination
}

// routeDeps is what the router asks of the controller, each owned
// elsewhere: the job of a pod, the node model and the Pending watchdog's
// jobs.
type routeDeps struct {
	// jobOf maps a pod to its job (job.go).
	jobOf func(context.Context, *corev1.Pod) (jobRef, bool, error)
	// pod reads a cached pod (the claims' consumers).
	pod func(context.Context, types.NamespacedName) (*corev1.Pod, error)
	// nodeChanged records what a node update tells the watchdog
	// (noteNodeChange), and nodeApplied puts the node (nil: gone) into the
	// model before the jobs it affects are judged.
	nodeChanged func(o, n *corev1.Node)
	nodeApplied func(name string, n *corev1.Node)
	// affectedByNode and affectedByDevices: the watched Pending jobs of a
	// kind that a node event, or a change of the published devices or
	// their taint rules, may fail (model.go, dra.go).
	affectedByNode    func(kind string) []reconcile.Request
	affectedByDevices func(kind string) []reconcile.Request
	// jobsIn: the jobs of a kind in a namespace whose opt-in changed.
	jobsIn func(ctx context.Context, kind, ns string) []reconcile.Request
	// informer: the manager's informer of an object's type.
	informer func(context.Context, client.Object) (crcache.Informer, error)
	// dra, rules: DRA objects, DeviceTaintRules are served.
	dra, rules bool
	log        func(err error, msg string, kv ...any)
}

// eventRouter owns the informer handlers of the job reconcilers and the
// table of their queues.
type eventRouter struct {
	deps routeDeps

	mu     sync.RWMutex
	queues map[route]workqueue.TypedRateLimitingInterface[reconcile.Request]
	kinds  []string // the kinds with a job queue, in registration order

	startOnce sync.Once
	startErr  error
	synced    []toolscache.InformerSynced
	ctx       context.Context
}

func newEventRouter(deps routeDeps) *eventRouter {
	return &eventRouter{deps: deps, queues: map[route]workqueue.TypedRateLimitingInterface[reconcile.Request]{}}
}

// source is the router's source for kind's reconciler to.
func (r *eventRouter) source(kind string, to destination) routedSource {
	return routedSource{r: r, route: route{kind: kind, to: to}}
}

// routedSource is one reconciler's share of the router's events.
type routedSource struct {
	r     *eventRouter
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

func (r *eventRouter) register(rt route, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.queues[rt]; !ok && rt.to == toJob {
		r.kinds = append(r.kinds, rt.kind)
	}
	r.queues[rt] = q
}

// send adds reqs to rt's queue, if its reconciler runs.
func (r *eventRouter) send(rt route, reqs ...reconcile.Request) {
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
func (r *eventRouter) eachKind(reqs func(kind string) []reconcile.Request) {
	r.mu.RLock()
	kinds := r.kinds
	r.mu.RUnlock()
	for _, k := range kinds {
		r.send(route{kind: k, to: toJob}, reqs(k)...)
	}
}

func (r *eventRouter) start(ctx context.Context) error {
	r.startOnce.Do(func() {
		r.ctx = ctx
		r.startErr = r.addHandlers(ctx)
	})
	return r.startErr
}

func (r *eventRouter) addHandlers(ctx context.Context) error {
	handlers := []struct {
		obj client.Object
		h   toolscache.ResourceEventHandler
		on  bool
	}{
		{&corev1.Pod{}, toolscache.ResourceEventHandlerFuncs{AddFunc: r.podAdded, UpdateFunc: r.podUpdated}, true},
		{&corev1.Node{}, toolscache.ResourceEventHandlerFuncs{AddFunc: r.nodeAdded, UpdateFunc: r.nodeUpdated, DeleteFunc: r.nodeDeleted}, true},
		{&corev1.Namespace{}, toolscache.ResourceEventHandlerFuncs{UpdateFunc: r.namespaceUpdated}, true},
		{&resourcev1.ResourceClaim{}, toolscache.ResourceEventHandlerFuncs{AddFunc: r.claimAdded, UpdateFunc: r.claimUpdated}, r.deps.dra},
		{&resourcev1.ResourceSlice{}, devicesChanged(r), r.deps.dra},
		{&resourcev1.DeviceTaintRule{}, devicesChanged(r), r.deps.dra && r.deps.rules},
	}
	var synced []toolscache.InformerSynced
	for _, h := range handlers {
		if !h.on {
			continue
		}
		inf, err := r.deps.informer(ctx, h.obj)
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

func toPod(o any) (*corev1.Pod, bool)   { return informed[*corev1.Pod](o) }
func toNode(o any) (*corev1.Node, bool) { return informed[*corev1.Node](o) }

// podAdded: a pod created bound with claims (the scheduler allocated
// them) brings its job to the allocations reconciler.
func (r *eventRouter) podAdded(o any) {
	if p, ok := toPod(o); ok && r.deps.dra && p.Spec.NodeName != "" && dra.UsesClaims(p) {
		r.routePod(p, toAllocations)
	}
}

// podUpdated: a pod becoming (un)schedulable wakes its job's watchdog; a
// pod just bound with claims, its job's allocations.
func (r *eventRouter) podUpdated(o, n any) {
	op, ok1 := toPod(o)
	np, ok2 := toPod(n)
	if !ok1 || !ok2 {
		return
	}
	var to []destination
	if unschedulable(np) != unschedulable(op) {
		to = append(to, toJob)
	}
	if r.deps.dra && op.Spec.NodeName == "" && np.Spec.NodeName != "" && dra.UsesClaims(np) {
		to = append(to, toAllocations)
	}
	if len(to) > 0 {
		r.routePod(np, to...)
	}
}

// routePod sends the job of p, mapped once, to its kind's reconcilers to.
func (r *eventRouter) routePod(p *corev1.Pod, to ...destination) {
	ref, ok, err := r.deps.jobOf(r.ctx, p)
	if err != nil {
		r.deps.log(err, "mapping a pod event to its job", "pod", p.Namespace+"/"+p.Name)
		return
	}
	if !ok {
		return
	}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: ref.name}}
	for _, d := range to {
		r.send(route{kind: ref.kind, to: d}, req)
	}
}

func (r *eventRouter) nodeAdded(o any) {
	if n, ok := toNode(o); ok {
		r.nodeEvent(n.Name, n)
	}
}

func (r *eventRouter) nodeUpdated(o, n any) {
	on, ok1 := toNode(o)
	nn, ok2 := toNode(n)
	if !ok1 || !ok2 {
		return
	}
	r.deps.nodeChanged(on, nn)
	if nodeMatters(on, nn) {
		r.nodeEvent(nn.Name, nn)
	}
}

func (r *eventRouter) nodeDeleted(o any) {
	if n, ok := toNode(o); ok {
		r.nodeEvent(n.Name, nil)
	}
}

// nodeEvent applies the node to the model once, then re-judges each
// kind's Pending jobs it may fail.
func (r *eventRouter) nodeEvent(name string, n *corev1.Node) {
	r.deps.nodeApplied(name, n)
	r.eachKind(r.deps.affectedByNode)
}

// namespaceUpdated: a namespace opted in (or out) later has its jobs
// looked at (the Pending watchdog judges jobs that predate the opt-in).
func (r *eventRouter) namespaceUpdated(o, n any) {
	on, ok1 := o.(*corev1.Namespace)
	nn, ok2 := n.(*corev1.Namespace)
	if !ok1 || !ok2 || on.Labels[contract.KeyGate] == nn.Labels[contract.KeyGate] {
		return
	}
	r.eachKind(func(kind string) []reconcile.Request { return r.deps.jobsIn(r.ctx, kind, nn.Name) })
}

// devicesChanged re-judges the Pending DRA jobs of every kind when a
// ResourceSlice or DeviceTaintRule is added, deleted or changes its spec.
func devicesChanged(r *eventRouter) toolscache.ResourceEventHandler {
	all := func(any) { r.eachKind(r.deps.affectedByDevices) }
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
func (r *eventRouter) claimAdded(o any) {
	if cl, ok := o.(*resourcev1.ResourceClaim); ok && cl.Status.Allocation != nil {
		r.claimAllocated(cl)
	}
}

func (r *eventRouter) claimUpdated(o, n any) {
	oc, ok1 := o.(*resourcev1.ResourceClaim)
	nc, ok2 := n.(*resourcev1.ResourceClaim)
	if ok1 && ok2 && oc.Status.Allocation == nil && nc.Status.Allocation != nil {
		r.claimAllocated(nc)
	}
}

func (r *eventRouter) claimAllocated(cl *resourcev1.ResourceClaim) {
	for _, ref := range cl.Status.ReservedFor {
		if ref.Resource != "pods" || ref.APIGroup != "" {
			continue
		}
		p, err := r.deps.pod(r.ctx, types.NamespacedName{Namespace: cl.Namespace, Name: ref.Name})
		if err != nil || p.UID != ref.UID || p.Spec.NodeName == "" {
			continue
		}
		r.routePod(p, toAllocations)
	}
}

// newRouter is the router of c's job reconcilers.
func (c *Controller) newRouter() *eventRouter {
	return newEventRouter(routeDeps{
		jobOf: c.jobOf,
		pod: func(ctx context.Context, key types.NamespacedName) (*corev1.Pod, error) {
			p := &corev1.Pod{}
			return p, c.client.Get(ctx, key, p)
		},
		nodeChanged: c.wd.noteNodeChange,
		nodeApplied: func(name string, n *corev1.Node) {
			if n == nil {
				c.model.remove(name)
				return
			}
			c.model.apply(n)
		},
		affectedByNode:    c.wd.affectedByNode,
		affectedByDevices: c.wd.affectedByDevices,
		jobsIn:            c.jobsIn,
		informer: func(ctx context.Context, o client.Object) (crcache.Informer, error) {
			return c.mgr.GetCache().GetInformer(ctx, o)
		},
		dra:   c.dra.served,
		rules: c.dra.rulesServed,
		log:   func(err error, msg string, kv ...any) { c.log.Error(err, msg, kv...) },
	})
}
