package router

import (
	"context"
	"errors"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
)

type routerFixture struct {
	r       *Router
	queues  map[route]workqueue.TypedRateLimitingInterface[reconcile.Request]
	jobOfs  int      // jobOf calls
	nodes   []string // NodeChanged calls
	changed []string // PodChanged calls
	watch   func(o, n *corev1.Node)
	pods    map[types.NamespacedName]*corev1.Pod
}

var routerKinds = []string{"PyTorchJob", "MPIJob", "JobSet", "TrainJob"}

// newRouterFixture registers a job and an allocations queue for every
// kind of routerKinds; pods named "<kind>-..." belong to a job of that
// kind named "job".
func newRouterFixture(t *testing.T) *routerFixture {
	f := &routerFixture{queues: map[route]workqueue.TypedRateLimitingInterface[reconcile.Request]{}, pods: map[types.NamespacedName]*corev1.Pod{}}
	f.r = New(Deps{
		JobOf: func(_ context.Context, p *corev1.Pod) (string, string, bool, error) {
			f.jobOfs++
			for _, k := range routerKinds {
				if len(p.Name) > len(k) && p.Name[:len(k)] == k {
					return k, "job", true, nil
				}
			}
			if p.Name == "broken" {
				return "", "", false, errors.New("read failed")
			}
			return "", "", false, nil
		},
		PodWakes:   func(o, n *corev1.Pod) bool { return unschedulable(o) != unschedulable(n) },
		PodChanged: func(p *corev1.Pod) { f.changed = append(f.changed, p.Name) },
		Pod: func(_ context.Context, key types.NamespacedName) (*corev1.Pod, error) {
			if p := f.pods[key]; p != nil {
				return p, nil
			}
			return nil, errors.New("not found")
		},
		NodeChanged: func(o, n *corev1.Node) { f.nodes = append(f.nodes, n.Name) },
		WatchNodes:  func(w func(o, n *corev1.Node)) { f.watch = w },
		AffectedByNode: func(kind string) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "node", Name: kind}}}
		},
		AffectedByDevices: func(kind string) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "devices", Name: kind}}}
		},
		JobsIn: func(_ context.Context, kind, ns string) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: kind}}}
		},
		DRA: true, Rules: true,
		Log: func(error, string, ...any) {},
	})
	f.r.ctx = context.Background()
	for _, k := range routerKinds {
		for _, to := range []Destination{ToJob, ToAllocations} {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			t.Cleanup(q.ShutDown)
			f.queues[route{kind: k, to: to}] = q
			f.r.register(route{kind: k, to: to}, q)
		}
	}
	return f
}

// drain is every queue's requests, by route.
func (f *routerFixture) drain() map[string][]string {
	out := map[string][]string{}
	for rt, q := range f.queues {
		for q.Len() > 0 {
			req, _ := q.Get()
			q.Done(req)
			out[rt.kind+"/"+rt.to.String()] = append(out[rt.kind+"/"+rt.to.String()], req.String())
		}
	}
	for _, v := range out {
		sort.Strings(v)
	}
	return out
}

func routedPod(name string, unschedulable bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)}}
	if unschedulable {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	}
	return p
}

func routedClaimPod(name, node string) *corev1.Pod {
	p := routedPod(name, false)
	p.Spec.NodeName = node
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu")}}
	return p
}

func TestRouterPodEventGoesToItsKindOnly(t *testing.T) {
	f := newRouterFixture(t)
	f.r.podUpdated(routedPod("JobSet-0", false), routedPod("JobSet-0", true))
	assert.Equal(t, 1, f.jobOfs, "one mapping per event, whatever the number of kinds")
	assert.Equal(t, map[string][]string{"JobSet/job": {"ns/job"}}, f.drain())

	// Nothing that changes schedulability or binding: not mapped at all.
	f.r.podUpdated(routedPod("MPIJob-0", true), routedPod("MPIJob-0", true))
	f.r.podUpdated(routedPod("nobody", false), routedPod("nobody", true))
	f.r.podUpdated(routedPod("broken", false), routedPod("broken", true))
	assert.Equal(t, 3, f.jobOfs)
	assert.Empty(t, f.drain(), "a pod of no job, and one whose job could not be read, go nowhere")

	// Every pod event, a delete's tombstone too, tells PodChanged (the
	// watchdog's judgement of its job is stale), routed or not.
	f.r.podAdded(routedPod("JobSet-1", false))
	f.r.podDeleted(toolscache.DeletedFinalStateUnknown{Key: "ns/JobSet-1", Obj: routedPod("JobSet-1", false)})
	assert.Equal(t, []string{"JobSet-0", "MPIJob-0", "nobody", "broken", "JobSet-1", "JobSet-1"}, f.changed)
	assert.Empty(t, f.drain(), "an unbound pod added or deleted is routed nowhere")
}

func TestRouterBoundDRAPodGoesToAllocations(t *testing.T) {
	f := newRouterFixture(t)
	f.r.podAdded(routedClaimPod("TrainJob-node-0", "n1"))
	f.r.podAdded(routedClaimPod("TrainJob-node-1", ""))   // not bound
	f.r.podAdded(routedPod("PyTorchJob-worker-0", false)) // no claims
	f.r.podUpdated(routedClaimPod("MPIJob-worker-0", ""), routedClaimPod("MPIJob-worker-0", "n1"))
	f.r.podUpdated(routedClaimPod("PyTorchJob-worker-1", "n1"), routedClaimPod("PyTorchJob-worker-1", "n1")) // bound before
	assert.Equal(t, map[string][]string{"TrainJob/allocations": {"ns/job"}, "MPIJob/allocations": {"ns/job"}}, f.drain())
	assert.Equal(t, 2, f.jobOfs)

	// Both at once: one mapping, two queues.
	o := routedClaimPod("JobSet-1", "")
	o.Status.Conditions = routedPod("x", true).Status.Conditions
	f.r.podUpdated(o, routedClaimPod("JobSet-1", "n2"))
	assert.Equal(t, 3, f.jobOfs)
	assert.Equal(t, map[string][]string{"JobSet/allocations": {"ns/job"}, "JobSet/job": {"ns/job"}}, f.drain())

	// Without DRA served, a bound pod with claims is not mapped.
	f.r.deps.DRA = false
	f.r.podAdded(routedClaimPod("TrainJob-node-2", "n1"))
	assert.Equal(t, 3, f.jobOfs)
	assert.Empty(t, f.drain())
}

// A node change the model applied reaches every kind's job reconciler
// (its Pending jobs it may fail), once per kind; an update tells the
// watchdog, an add or a delete does not. The router watches the model
// from its start.
func TestRouterNodeEventReachesEveryKind(t *testing.T) {
	f := newRouterFixture(t)
	informers := &informertest.FakeInformers{Scheme: scheme.Scheme}
	f.r.deps.Informer = func(ctx context.Context, o client.Object) (crcache.Informer, error) {
		return informers.GetInformer(ctx, o)
	}
	require.NoError(t, f.r.addHandlers(context.Background()))
	require.NotNil(t, f.watch, "the router watches the node model")
	gpu := func(rv, n string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: rv},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n)}}}
	}
	f.watch(gpu("1", "8"), gpu("2", "7"))
	assert.Equal(t, []string{"n1"}, f.nodes)
	got := f.drain()
	for _, k := range routerKinds {
		assert.Equal(t, []string{"node/" + k}, got[k+"/job"], k)
	}
	assert.Len(t, got, len(routerKinds), "no allocations queue gets node events")

	f.watch(gpu("2", "7"), nil)
	f.watch(nil, gpu("4", "8"))
	assert.Equal(t, []string{"n1"}, f.nodes, "a node deleted or added is no update")
	assert.Len(t, f.drain()["MPIJob/job"], 1, "equal requests collapse in the queue")
}

func TestRouterNamespaceOptIn(t *testing.T) {
	f := newRouterFixture(t)
	ns := func(gate string) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}
		if gate != "" {
			n.Labels = map[string]string{contract.KeyGate: gate}
		}
		return n
	}
	f.r.namespaceUpdated(ns(""), ns(""))
	assert.Empty(t, f.drain())
	f.r.namespaceUpdated(ns(""), ns("enabled"))
	got := f.drain()
	require.Len(t, got, len(routerKinds))
	assert.Equal(t, []string{"team/TrainJob"}, got["TrainJob/job"])
}

func TestRouterDevicesAndClaims(t *testing.T) {
	f := newRouterFixture(t)
	h := devicesChanged(f.r).(toolscache.ResourceEventHandlerFuncs)
	slice := func(gen int64) *resourcev1.ResourceSlice {
		return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s", Generation: gen}}
	}
	h.UpdateFunc(slice(1), slice(1))
	assert.Empty(t, f.drain(), "a status-only change of a slice re-judges nothing")
	h.UpdateFunc(slice(1), slice(2))
	assert.Len(t, f.drain(), len(routerKinds))
	h.DeleteFunc(slice(2))
	assert.Equal(t, []string{"devices/JobSet"}, f.drain()["JobSet/job"])

	// An allocated claim brings the jobs of the bound pods it is reserved for.
	bound := routedClaimPod("PyTorchJob-worker-0", "n1")
	f.pods[types.NamespacedName{Namespace: "ns", Name: bound.Name}] = bound
	unbound := routedClaimPod("MPIJob-worker-0", "")
	f.pods[types.NamespacedName{Namespace: "ns", Name: unbound.Name}] = unbound
	claim := func(allocated bool, reserved ...resourcev1.ResourceClaimConsumerReference) *resourcev1.ResourceClaim {
		c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
		if allocated {
			c.Status.Allocation = &resourcev1.AllocationResult{}
		}
		c.Status.ReservedFor = reserved
		return c
	}
	ref := func(p *corev1.Pod) resourcev1.ResourceClaimConsumerReference {
		return resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID}
	}
	stale := resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: bound.Name, UID: "an-older-pod"}
	other := resourcev1.ResourceClaimConsumerReference{APIGroup: "example.com", Resource: "pods", Name: bound.Name, UID: bound.UID}
	f.r.claimUpdated(claim(false, ref(bound)), claim(false, ref(bound)))
	f.r.claimUpdated(claim(true, ref(bound)), claim(true, ref(bound))) // allocated before
	f.r.claimAdded(claim(true, ref(unbound), stale, other, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: "gone", UID: "x"}))
	assert.Empty(t, f.drain())
	f.r.claimUpdated(claim(false, ref(bound)), claim(true, ref(bound)))
	assert.Equal(t, map[string][]string{"PyTorchJob/allocations": {"ns/job"}}, f.drain())
}

// unschedulable: the scheduler marked p unschedulable (as the
// controller's job reconciler asks, PodWakes).
func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return p.Spec.NodeName == ""
		}
	}
	return false
}
