package clusterstate

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"unique"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/preflight/schedule"
)

// What a waiting job waits for depends on who holds the devices: the
// requests of every bound, unfinished pod, summed per node, as `rankgate
// diagnose` sums them from a full read (cluster.Builder.AddPod). Usage
// keeps those sums current, one pod event at a time, from the informers
// its caller registers (Handler, AddSource). A cached pod whose request
// could not be kept carries why in contract.CachedAnnotationUnreadableRequest:
// summing fails on it, as a full read would.

// ErrUsageNotSynced: an informer feeding the usage has not delivered its
// initial list.
var ErrUsageNotSynced = errors.New("the pods' usage has not seen every pod yet")

// Usage sums the requests of bound, unfinished pods per node.
type Usage struct {
	mu    sync.Mutex
	names []string           // resource names, by index
	nodes map[string][]int64 // node name -> sums by resource index
	bad   map[string]error   // pods whose request cannot be read, by source/namespace/name
	gen   uint64             // bumped by every change
	// synced: each source's handler has seen its informer's initial list.
	synced []func() bool
}

// NewUsage is an empty usage with no source.
func NewUsage() *Usage {
	return &Usage{nodes: map[string][]int64{}, bad: map[string]error{}}
}

// counts: a pod that holds resources on a node (cluster.Builder.AddPod).
func counts(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// add adds (sign 1) or removes (sign -1) what pod p holds. source tells
// the informers apart (a pod whose job-name label changes moves between
// them, in no fixed order).
func (u *Usage) add(source string, p *corev1.Pod, sign int64) {
	if p == nil || !counts(p) {
		return
	}
	req, err := cluster.PodRequests(&p.Spec)
	if why := p.Annotations[contract.CachedAnnotationUnreadableRequest]; why != "" {
		err = errors.New(why) // the cache keeps why, not the pod's containers
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.gen++
	if err != nil {
		key := source + "/" + p.Namespace + "/" + p.Name
		if sign > 0 {
			u.bad[key] = fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
		} else {
			delete(u.bad, key)
		}
		return
	}
	v := u.nodes[p.Spec.NodeName]
	for name, q := range req {
		i := slices.Index(u.names, name)
		if i < 0 {
			i = len(u.names)
			u.names = append(u.names, unique.Make(name).Value())
		}
		if i >= len(v) {
			v = append(v, make([]int64, i+1-len(v))...)
		}
		v[i] += sign * q
	}
	if slices.ContainsFunc(v, func(x int64) bool { return x != 0 }) {
		u.nodes[p.Spec.NodeName] = v
	} else {
		delete(u.nodes, p.Spec.NodeName)
	}
}

// Handler feeds u from one informer, named source.
func (u *Usage) Handler(source string) toolscache.ResourceEventHandler {
	pod := func(o any) *corev1.Pod {
		if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		p, _ := o.(*corev1.Pod)
		return p
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { u.add(source, pod(o), 1) },
		UpdateFunc: func(o, n any) {
			u.add(source, pod(o), -1)
			u.add(source, pod(n), 1)
		},
		DeleteFunc: func(o any) { u.add(source, pod(o), -1) },
	}
}

// AddSource registers how to tell that one of the informers feeding u
// has delivered its initial list.
func (u *Usage) AddSource(synced func() bool) {
	u.mu.Lock()
	u.synced = append(u.synced, synced)
	u.mu.Unlock()
}

// Used is the sums as the engine's Cluster.WithUsed takes them, with the
// generation they are of; an error where a pod's request cannot be read
// (diagnose's full read fails on it too), or before every source synced.
func (u *Usage) Used() (map[string]schedule.Resources, uint64, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.synced) == 0 || !AllSynced(u.synced) {
		return nil, 0, ErrUsageNotSynced
	}
	if err := firstError(u.bad); err != nil {
		return nil, 0, err
	}
	out := make(map[string]schedule.Resources, len(u.nodes))
	for node, v := range u.nodes {
		out[node] = cluster.NamedSums(u.names, v)
	}
	return out, u.gen, nil
}

// Generation is the generation of the sums, or Used's error.
func (u *Usage) Generation() (uint64, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.synced) == 0 || !AllSynced(u.synced) {
		return 0, ErrUsageNotSynced
	}
	if len(u.bad) > 0 {
		return 0, errors.New("a pod's request cannot be read")
	}
	return u.gen, nil
}

// AllSynced: every one of fs says its informer synced.
func AllSynced(fs []func() bool) bool {
	for _, f := range fs {
		if !f() {
			return false
		}
	}
	return true
}
