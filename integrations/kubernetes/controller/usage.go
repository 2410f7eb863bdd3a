package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/preflight/schedule"
)

// What a waiting job waits for depends on who holds the devices: the
// requests of every bound, unfinished pod, summed per node, as `rankgate
// diagnose` sums them from a full read (cluster.Builder.AddPod). The
// controller keeps those sums current, one pod event at a time, from two
// informers: the pod cache (the Kubeflow replica pods; cache.go keeps a
// bound pod's effective request) and a slim informer over every other
// bound, unfinished pod (label selector: no job-name label), which keeps
// only identity, node, phase and request. Nothing re-reads the cluster.

// podUsage sums the requests of bound, unfinished pods per node.
type podUsage struct {
	mu    sync.Mutex
	names []string           // resource names, by index
	nodes map[string][]int64 // node name -> sums by resource index
	bad   map[string]error   // pods whose request cannot be read, by source/namespace/name
	gen   uint64             // bumped by every change
	// synced: each source's handler has seen its informer's initial list.
	synced []func() bool
}

func newPodUsage() *podUsage {
	return &podUsage{nodes: map[string][]int64{}, bad: map[string]error{}}
}

// counts: a pod that holds resources on a node (cluster.Builder.AddPod).
func counts(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// add adds (sign 1) or removes (sign -1) what pod p holds. source tells
// the informers apart (a pod whose job-name label changes moves between
// them, in no fixed order).
func (u *podUsage) add(source string, p *corev1.Pod, sign int64) {
	if p == nil || !counts(p) {
		return
	}
	req, err := cluster.PodRequests(&p.Spec)
	if why := p.Annotations[annoUnreadable]; why != "" {
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
			u.names = append(u.names, intern(name))
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

// handler feeds u from one informer.
func (u *podUsage) handler(source string) toolscache.ResourceEventHandler {
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

// used is the sums as the engine's Cluster.WithUsed takes them, with the
// generation they are of; an error where a pod's request cannot be read
// (diagnose's full read fails on it too), or before every source synced.
func (u *podUsage) used() (map[string]schedule.Resources, uint64, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.synced) == 0 || !allSynced(u.synced) {
		return nil, 0, errUsageNotSynced
	}
	if len(u.bad) > 0 {
		keys := make([]string, 0, len(u.bad))
		for k := range u.bad {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return nil, 0, u.bad[keys[0]]
	}
	out := make(map[string]schedule.Resources, len(u.nodes))
	for node, v := range u.nodes {
		rs := make(schedule.Resources, len(v))
		for i, q := range v {
			if q != 0 {
				rs[u.names[i]] = q
			}
		}
		out[node] = rs
	}
	return out, u.gen, nil
}

// generation is the generation of the sums, or used's error.
func (u *podUsage) generation() (uint64, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.synced) == 0 || !allSynced(u.synced) {
		return 0, errUsageNotSynced
	}
	if len(u.bad) > 0 {
		return 0, errors.New("a pod's request cannot be read")
	}
	return u.gen, nil
}

var errUsageNotSynced = errors.New("the pods' usage has not seen every pod yet")

func allSynced(fs []func() bool) bool {
	for _, f := range fs {
		if !f() {
			return false
		}
	}
	return true
}

func (u *podUsage) addSource(synced func() bool) {
	u.mu.Lock()
	u.synced = append(u.synced, synced)
	u.mu.Unlock()
}

// otherPodsInformer watches every bound, unfinished pod without the
// job-name label (the pod cache holds the others), keeping slim copies.
func otherPodsInformer(cs kubernetes.Interface) toolscache.SharedIndexInformer {
	opts := func(o *metav1.ListOptions) {
		o.LabelSelector = "!" + LabelJobName
		o.FieldSelector = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
	}
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			opts(&o)
			return cs.CoreV1().Pods("").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			opts(&o)
			return cs.CoreV1().Pods("").Watch(ctx, o)
		},
	}
	inf := toolscache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, toolscache.SharedIndexInformerOptions{})
	_ = inf.SetTransform(slimPod)
	return inf
}

// startUsage feeds c.usage from the pod cache and from a slim informer over
// the other pods, which runs on every replica (as the caches do).
func (c *Controller) startUsage(ctx context.Context, cs kubernetes.Interface) error {
	pi, err := c.mgr.GetCache().GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	reg, err := pi.AddEventHandler(c.usage.handler("jobs"))
	if err != nil {
		return err
	}
	c.usage.addSource(reg.HasSynced)
	inf := otherPodsInformer(cs)
	oreg, err := inf.AddEventHandler(c.usage.handler("other"))
	if err != nil {
		return err
	}
	c.usage.addSource(oreg.HasSynced)
	return c.mgr.Add(everyReplica(func(ctx context.Context) error {
		inf.RunWithContext(ctx)
		return nil
	}))
}

// liveCluster is the engine's model with every bound pod's usage, as a full
// read would give it. It is laid out again after a node change, and after
// a pod change once it is liveFresh old; until then every judgement shares
// it. It waits for the informers' initial lists. Read it only.
func (c *Controller) liveCluster(ctx context.Context) (*liveSnapshot, error) {
	c.model.liveMu.Lock()
	defer c.model.liveMu.Unlock()
	deadline := c.now().Add(time.Minute)
	for {
		base, gen, err := c.model.cluster()
		var ugen uint64
		if err == nil {
			ugen, err = c.usage.generation()
		}
		if err == nil {
			if s := c.model.live; s != nil && s.gen == gen && (s.ugen == ugen || c.since(s.at) < liveFresh) {
				return s, nil
			}
			used, ugen, err := c.usage.used()
			if err != nil {
				return nil, err
			}
			seq := uint64(1)
			if c.model.live != nil {
				seq = c.model.live.seq + 1
			}
			c.model.live = &liveSnapshot{cl: base.WithUsed(used), seq: seq, gen: gen, ugen: ugen, at: c.now()}
			return c.model.live, nil
		}
		if !errors.Is(err, errModelNotSynced) && !errors.Is(err, errUsageNotSynced) || c.now().After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-c.clock().After(100 * time.Millisecond):
		}
	}
}

// liveSnapshot is the model with the pods' usage (liveCluster).
type liveSnapshot struct {
	cl        *schedule.Cluster
	seq       uint64 // numbers the snapshots
	gen, ugen uint64 // of the model and of the usage
	at        time.Time
}
