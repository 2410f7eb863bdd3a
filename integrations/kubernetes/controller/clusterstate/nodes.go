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
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"

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
