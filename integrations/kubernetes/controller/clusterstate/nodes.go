// Package clusterstate is the cluster as the schedule engine judges it, on
// every replica of the controller: the nodes (Nodes: the engine's model,
// one node event at a time), the requests of every bound, unfinished pod
// summed per node (Usage), and the live snapshot that joins them (State),
// which the Pending watchdog judges on; the validating webhook judges on
// the nodes alone (capacity is not judged at admission). The informers
// feed it; nothing here reads the API server.
package clusterstate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/preflight/schedule"
)

// The engine's node model, kept current from the node informer. Each node
// event converts and prepares that node only (schedule.Model); the
// snapshot the engine judges against is laid out again only after a
// change, once, and shared by every judgement until the next change. A
// job's own bound pods are added to their nodes' usage per judgement
// (Cluster.WithUsed), as a full rebuild adds them, so that a judgement on
// the model is the judgement over the cached nodes.

// ErrNodesNotSynced: the node informer has not delivered its initial list.
var ErrNodesNotSynced = errors.New("the node model has not seen every node yet")

// Nodes is the engine's node model.
type Nodes struct {
	mu      sync.Mutex
	m       *schedule.Model
	refused map[string]error  // nodes the converter refused (judging stops)
	rv      map[string]string // resourceVersion of the object each node came from
	gpu     map[string]bool   // nodes whose allocatable has a GPU resource
	gen     uint64            // bumped by every change
	synced  func() bool       // the informer handler has seen the initial list
	// watchers are told of every change Handler applied (Watch).
	watchers []func(o, n *corev1.Node)

	// The node-event shortcut's judgements, by workload signature, for
	// generation memoGen.
	memoMu  sync.Mutex
	memoGen uint64
	memo    map[string]bool
}

// NewNodes is an empty model of e.
func NewNodes(e *schedule.Engine) *Nodes {
	return &Nodes{m: e.NewModel(), refused: map[string]error{}, rv: map[string]string{}, gpu: map[string]bool{}}
}

// SetSynced says how to tell that the informer feeding the model has
// delivered its initial list; until then the model judges nothing.
func (nm *Nodes) SetSynced(synced func() bool) {
	nm.mu.Lock()
	nm.synced = synced
	nm.mu.Unlock()
}

// Apply adds or replaces a node from its (cached) object.
func (nm *Nodes) Apply(n *corev1.Node) {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	if rv, ok := nm.rv[n.Name]; ok && rv == n.ResourceVersion && n.ResourceVersion != "" {
		return
	}
	nm.rv[n.Name] = n.ResourceVersion
	nm.gen++
	if cluster.AdvertisesGPU(n.Status.Allocatable) {
		nm.gpu[n.Name] = true
	} else {
		delete(nm.gpu, n.Name)
	}
	sn, err := cluster.NodeFromCore(n)
	if err != nil {
		nm.refused[n.Name] = fmt.Errorf("node %s: %w", n.Name, err)
		nm.m.Delete(n.Name)
		return
	}
	delete(nm.refused, n.Name)
	nm.m.Set(sn)
}

// Matters: a node change the model sees (labels, unschedulable, taints,
// allocatable, capacity, readiness); a heartbeat does not.
func Matters(o, n *corev1.Node) bool {
	return !maps.Equal(o.Labels, n.Labels) || o.Spec.Unschedulable != n.Spec.Unschedulable ||
		!slices.EqualFunc(o.Spec.Taints, n.Spec.Taints, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) && a.Value == b.Value }) ||
		!equalResources(o.Status.Allocatable, n.Status.Allocatable) || !equalResources(o.Status.Capacity, n.Status.Capacity) ||
		cluster.NodeReady(o) != cluster.NodeReady(n)
}

func equalResources(a, b corev1.ResourceList) bool {
	return maps.EqualFunc(a, b, func(x, y resource.Quantity) bool { return x.Equal(y) })
}

// Handler feeds the model from the node informer, its one writer: every
// node added or deleted, every change that Matters; then it tells the
// watchers (Watch), so that whoever re-judges on a node event judges on
// the model with that node in it.
func (nm *Nodes) Handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if n, ok := o.(*corev1.Node); ok {
				nm.Apply(n)
				nm.tell(nil, n)
			}
		},
		UpdateFunc: func(o, n any) {
			on, ok1 := o.(*corev1.Node)
			nn, ok2 := n.(*corev1.Node)
			if ok1 && ok2 && Matters(on, nn) {
				nm.Apply(nn)
				nm.tell(on, nn)
			}
		},
		DeleteFunc: func(o any) {
			if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if n, ok := o.(*corev1.Node); ok {
				nm.Remove(n.Name)
				nm.tell(n, nil)
			}
		},
	}
}

// Watch adds f, told after each node change Handler applied: o is nil for
// a node added, n nil for a node deleted.
func (nm *Nodes) Watch(f func(o, n *corev1.Node)) {
	nm.mu.Lock()
	nm.watchers = append(nm.watchers, f)
	nm.mu.Unlock()
}

func (nm *Nodes) tell(o, n *corev1.Node) {
	nm.mu.Lock()
	ws := nm.watchers
	nm.mu.Unlock()
	for _, f := range ws {
		f(o, n)
	}
}

// Remove drops a deleted node.
func (nm *Nodes) Remove(name string) {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	if _, ok := nm.rv[name]; !ok {
		return
	}
	delete(nm.rv, name)
	delete(nm.gpu, name)
	delete(nm.refused, name)
	nm.m.Delete(name)
	nm.gen++
}

// Cluster is the current snapshot and its generation; an error before the
// initial list, or while a node cannot be converted.
func (nm *Nodes) Cluster() (*schedule.Cluster, uint64, error) {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	return nm.clusterLocked()
}

// clusterLocked is Cluster, with nm.mu held.
func (nm *Nodes) clusterLocked() (*schedule.Cluster, uint64, error) {
	if nm.synced == nil || !nm.synced() {
		return nil, 0, ErrNodesNotSynced
	}
	if err := firstError(nm.refused); err != nil {
		return nil, 0, err
	}
	return nm.m.Cluster(), nm.gen, nil
}

// firstError is the error of errs with the first key, nil for none: the
// same error every time while the same ones stand.
func firstError(errs map[string]error) error {
	if len(errs) == 0 {
		return nil
	}
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return errs[keys[0]]
}

// Fleet is the validating webhook's view of the nodes: the current
// snapshot (the one the Pending watchdog judges on, without any pod's
// usage: capacity is not judged at admission) and how many nodes
// advertise a GPU resource.
func (nm *Nodes) Fleet(context.Context) (*schedule.Cluster, int, error) {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	cl, _, err := nm.clusterLocked()
	if err != nil {
		return nil, 0, err
	}
	return cl, len(nm.gpu), nil
}

// Hopeless memoizes judge per workload signature for generation gen (the
// watched jobs re-judged after a node event: equal workloads share one
// judgement).
func (nm *Nodes) Hopeless(gen uint64, sig string, judge func() bool) bool {
	nm.memoMu.Lock()
	defer nm.memoMu.Unlock()
	if nm.memoGen != gen || nm.memo == nil {
		nm.memoGen, nm.memo = gen, map[string]bool{}
	}
	h, ok := nm.memo[sig]
	if !ok {
		h = judge()
		nm.memo[sig] = h
	}
	return h
}
