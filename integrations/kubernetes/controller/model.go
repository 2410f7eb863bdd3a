package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/preflight/schedule"
)

// The engine's cluster model, kept current from the node informer. Each
// node event converts and prepares that node only (schedule.Model); the
// snapshot the engine judges against is laid out again only after a
// change, once, and shared by every judgement until the next change. A job's
// own bound pods are added to their nodes' usage per judgement
// (Cluster.WithUsed), as the full rebuild adds them, so that a judgement
// on the model is the judgement of judgeJob over the cached nodes.
//
// A node event re-judges only the watched jobs it can affect: those past
// their grace whose pods have not changed since their last judgement are
// judged again on the new snapshot from the workload kept with them, one
// judgement per distinct workload (equal jobs share it; names only appear in
// messages), and only the jobs it finds hopeless are reconciled (and
// failed). Jobs still in their grace are judged when it ends; waiting ones
// are looked at again on their own schedule (watchdog.Recheck) and on changes
// of their own pods.

var errModelNotSynced = errors.New("the node model has not seen every node yet")

type nodeModel struct {
	mu      sync.Mutex
	m       *schedule.Model
	refused map[string]error  // nodes the converter refused (judging stops)
	rv      map[string]string // resourceVersion of the object each node came from
	gpu     map[string]bool   // nodes whose allocatable has a GPU resource
	gen     uint64            // bumped by every change
	synced  func() bool       // the informer handler has seen the initial list

	// liveMu serialises liveCluster (usage.go); live is its last result:
	// the model with every bound pod's usage.
	liveMu sync.Mutex
	live   *liveSnapshot

	// The node-event shortcut's judgements, by workload signature, for
	// generation memoGen.
	memoMu  sync.Mutex
	memoGen uint64
	memo    map[string]bool
}

func newNodeModel(e *schedule.Engine) *nodeModel {
	return &nodeModel{m: e.NewModel(), refused: map[string]error{}, rv: map[string]string{}, gpu: map[string]bool{}}
}

// apply adds or replaces a node from its (cached) object.
func (nm *nodeModel) apply(n *corev1.Node) {
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

// remove drops a deleted node.
func (nm *nodeModel) remove(name string) {
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

// cluster is the current snapshot and its generation.
func (nm *nodeModel) cluster() (*schedule.Cluster, uint64, error) {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	return nm.clusterLocked()
}

// clusterLocked is cluster, with nm.mu held.
func (nm *nodeModel) clusterLocked() (*schedule.Cluster, uint64, error) {
	if nm.synced == nil || !nm.synced() {
		return nil, 0, errModelNotSynced
	}
	if len(nm.refused) > 0 {
		names := make([]string, 0, len(nm.refused))
		for n := range nm.refused {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, 0, nm.refused[names[0]]
	}
	return nm.m.Cluster(), nm.gen, nil
}

// fleet is the validating webhook's view of the nodes: the current
// snapshot (the one the Pending watchdog judges on, without any pod's
// usage: capacity is not judged at admission) and how many nodes
// advertise a GPU resource.
func (nm *nodeModel) fleet(context.Context) (*schedule.Cluster, int, error) {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	cl, _, err := nm.clusterLocked()
	if err != nil {
		return nil, 0, err
	}
	return cl, len(nm.gpu), nil
}

// hopeless memoizes judge per workload signature for generation gen.
func (nm *nodeModel) hopeless(gen uint64, sig string, judge func() bool) bool {
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

// signature is everything of w that the engine's hopeless verdict reads
// (with what the published DRA devices offer its DRA pod sets):
// not the names it only quotes, and not what the job's bound pods hold
// (hopelessness never depends on free capacity; TestModelMatchesFullRebuild
// checks it with bound pods on changing nodes).
func signature(w schedule.Workload) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%t|", w.Kind, w.Suspended)
	for _, ps := range w.PodSets {
		fmt.Fprintf(&b, "%s|%d|%d|%v|%+v|%d|%q|%q|%s;", ps.Name, ps.Count, ps.Bound, ps.Requests, ps.Constraints, len(ps.Pods), ps.SchedulerMessage, ps.DRA, draFactsKey(ps.DRAFacts))
	}
	return b.String()
}

// judge is judgeJob on the model, or over a fresh list of the cached
// nodes until the model has seen them all.
func (c *Controller) judge(ctx context.Context, j job, pods []*corev1.Pod, onlyUnbound bool) (schedule.Result, schedule.Workload, bool, error) {
	dra, err := c.draState(ctx)
	if err != nil {
		return schedule.Result{}, schedule.Workload{}, false, err
	}
	cl, _, err := c.model.cluster()
	if err == nil {
		res, w, _, ok, err := judgeOn(c.engine, cl, dra, j, pods, onlyUnbound)
		return res, w, ok, err
	}
	if !errors.Is(err, errModelNotSynced) {
		return schedule.Result{}, schedule.Workload{}, false, err
	}
	nodes := &corev1.NodeList{}
	if err := c.client.List(ctx, nodes); err != nil {
		return schedule.Result{}, schedule.Workload{}, false, fmt.Errorf("listing nodes: %w", err)
	}
	return judgeJob(c.engine, nodes.Items, dra, j, pods, onlyUnbound)
}

// startModel feeds the model from the node informer and marks the
// watched jobs' workloads stale on their pods' events.
func (c *Controller) startModel(ctx context.Context) error {
	ni, err := c.mgr.GetCache().GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return err
	}
	reg, err := ni.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if n, ok := o.(*corev1.Node); ok {
				c.model.apply(n)
			}
		},
		UpdateFunc: func(o, n any) {
			on, ok1 := o.(*corev1.Node)
			nn, ok2 := n.(*corev1.Node)
			if ok1 && ok2 && nodeMatters(on, nn) {
				c.model.apply(nn)
			}
		},
		DeleteFunc: func(o any) {
			if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if n, ok := o.(*corev1.Node); ok {
				c.model.remove(n.Name)
			}
		},
	})
	if err != nil {
		return err
	}
	c.model.mu.Lock()
	c.model.synced = reg.HasSynced
	c.model.mu.Unlock()
	pi, err := c.mgr.GetCache().GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	stale := func(o any) {
		if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		if p, ok := o.(*corev1.Pod); ok && p.Labels[LabelJobName] != "" {
			c.wd.PodsChanged(p.Namespace, p.Labels[LabelJobName])
		}
	}
	_, err = pi.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: stale, UpdateFunc: func(_, n any) { stale(n) }, DeleteFunc: stale})
	return err
}
