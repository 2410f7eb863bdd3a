package controller

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/apicalls"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The gate Service (configs/deploy/service.yaml) selects no pods: the leader
// publishes itself as its only endpoint, in an EndpointSlice it owns, so
// that kube-proxy sends every new connection of a rank to the replica that
// can decide its gang. A new leader overwrites the slice; a leader that
// stops withdraws its endpoint if the slice still names it. Standbys keep
// answering NotLeader, for connections opened before a switch
// (docs/controller.md, "Two replicas").

// Labels of the leader's EndpointSlice. kube-proxy finds a Service's slices
// by LabelServiceName; LabelManagedBy keeps the EndpointSlice controller
// (which manages the slices of Services with a selector) away from it.
const (
	LabelServiceName         = discoveryv1.LabelServiceName // kubernetes.io/service-name
	LabelEndpointManagedBy   = discoveryv1.LabelManagedBy   // endpointslice.kubernetes.io/managed-by
	EndpointSliceManager     = "controller.rankgate.io"
	GateEndpointSliceSuffix  = "-leader"
	GateEndpointPortName     = "gate" // the gate Service's port name
	DefaultGateService       = "rankgate-gate"
	gateEndpointCheckEvery   = 30 * time.Second
	gateEndpointWriteTimeout = 10 * time.Second
)

// GateEndpointSliceName is the name of the EndpointSlice the leader writes
// for the gate Service svc.
func GateEndpointSliceName(svc string) string { return svc + GateEndpointSliceSuffix }

var (
	metricEndpointReady = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rankgate_gate_endpoint_ready",
		Help: "1 while this replica is the gate Service's ready endpoint (it leads, its caches are synced and its recorded verdicts loaded).",
	})
	registerEndpointOnce sync.Once
)

// leaderEndpoint is the leader's EndpointSlice for the gate Service.
type leaderEndpoint struct {
	c        *Controller
	ns, svc  string
	ip       string
	port     int32
	family   discoveryv1.AddressType
	interval time.Duration
}

// publishGateEndpoint, on taking the lead, makes this replica the gate
// Service's only endpoint: at once as not ready (kube-proxy then refuses new
// connections instead of sending them to the previous leader), ready as
// soon as it can decide (caches synced, recorded verdicts loaded). It keeps
// the slice so while leading and withdraws the endpoint when ctx ends. The
// returned function waits for the withdrawal: call it before the lease is
// released. Off without Options.GateService or a pod IP.
func (c *Controller) publishGateEndpoint(ctx context.Context) (wait func()) {
	registerEndpointOnce.Do(func() { crmetrics.Registry.MustRegister(metricEndpointReady) })
	le, err := c.newLeaderEndpoint()
	if le == nil {
		if err != nil {
			c.log.Error(err, "not publishing this replica as the gate Service's endpoint: ranks that reach a standby retry")
		}
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		le.run(ctx)
	}()
	return func() { <-done }
}

func (c *Controller) newLeaderEndpoint() (*leaderEndpoint, error) {
	if c.opts.GateService == "" {
		return nil, nil
	}
	ip := net.ParseIP(c.opts.GateEndpointIP)
	if ip == nil {
		return nil, fmt.Errorf("this replica's pod IP is unknown or invalid (%q): set env POD_IP from the downward API (status.podIP), or --gate-service= to turn publishing off", c.opts.GateEndpointIP)
	}
	addr, err := c.gate.Listen()
	if err != nil {
		return nil, err
	}
	_, p, err := net.SplitHostPort(addr.String())
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("gate port %q: %w", p, err)
	}
	family := discoveryv1.AddressTypeIPv6
	if ip.To4() != nil {
		family = discoveryv1.AddressTypeIPv4
	}
	return &leaderEndpoint{c: c, ns: c.opts.Namespace, svc: c.opts.GateService, ip: ip.String(), port: int32(port),
		family: family, interval: gateEndpointCheckEvery}, nil
}

// canDecide: this replica leads, its caches are synced and the verdicts an
// earlier leader recorded are loaded (what the gate's resolve requires).
func (c *Controller) canDecide() bool {
	return c.leader.Load() && c.synced.Load() && c.w.Recovered()
}

func (le *leaderEndpoint) run(ctx context.Context) {
	log := le.c.log.WithValues("endpointSlice", le.ns+"/"+GateEndpointSliceName(le.svc), "address", net.JoinHostPort(le.ip, strconv.Itoa(int(le.port))))
	defer le.withdraw(log)
	ready := le.c.canDecide()
	if !le.writeUntilDone(ctx, log, ready) {
		return
	}
	if !ready {
		// Polled: the sweep that loads recorded verdicts is the leader's writes' (leader.Writes.Sweep).
		t := le.c.clock().NewTicker(10 * time.Millisecond)
		for !le.c.canDecide() {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
		}
		t.Stop()
		if !le.writeUntilDone(ctx, log, true) {
			return
		}
	}
	metricEndpointReady.Set(1)
	log.Info("this replica is the gate Service's endpoint: new connections of ranks reach it")
	// Keep it so: recreate a deleted slice, repair our own entry, but never
	// overwrite another replica's (a newer leader's).
	t := le.c.clock().NewTicker(le.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if err := le.check(ctx, log); err != nil && ctx.Err() == nil {
			log.Error(err, "checking the gate Service's endpoint")
		}
	}
}

// writeUntilDone writes the slice, retrying with backoff until it succeeds
// or ctx ends (false).
func (le *leaderEndpoint) writeUntilDone(ctx context.Context, log logr.Logger, ready bool) bool {
	backoff := apicalls.RetryBackoff(50*time.Millisecond, 5*time.Second)
	for {
		err := le.write(ctx, ready, false)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		msg := "publishing this replica as the gate Service's endpoint; retrying"
		if apierrors.IsForbidden(err) {
			msg += " (the controller needs get, create, update and delete on endpointslices.discovery.k8s.io named " + GateEndpointSliceName(le.svc) + " in " + le.ns + ": configs/deploy/rbac.yaml)"
		}
		delay := backoff.Step()
		log.Error(err, msg, "in", delay.String())
		select {
		case <-ctx.Done():
			return false
		case <-le.c.clock().After(delay):
		}
	}
}

// write makes the slice name this replica only (ready or not). With
// onlyOurs, a slice that names another replica is left alone.
func (le *leaderEndpoint) write(ctx context.Context, ready, onlyOurs bool) error {
	ctx, cancel := context.WithTimeout(ctx, gateEndpointWriteTimeout)
	defer cancel()
	key := types.NamespacedName{Namespace: le.ns, Name: GateEndpointSliceName(le.svc)}
	cur := &discoveryv1.EndpointSlice{}
	err := le.c.api.Get(ctx, key, cur)
	if apierrors.IsNotFound(err) {
		return le.c.client.Create(ctx, le.desired(ctx, nil, ready))
	}
	if err != nil {
		return err
	}
	if onlyOurs && le.namesOther(cur) {
		return nil
	}
	if cur.AddressType != le.family {
		// The address type cannot change: replace the slice.
		if err := le.c.client.Delete(ctx, cur, client.Preconditions{ResourceVersion: ptr.To(cur.ResourceVersion)}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return le.c.client.Create(ctx, le.desired(ctx, nil, ready))
	}
	// Update with the read resourceVersion: a conflict retries on a fresh read.
	return le.c.client.Update(ctx, le.desired(ctx, cur, ready))
}

// desired is the slice naming this replica, based on cur (its metadata,
// resourceVersion) when it exists.
func (le *leaderEndpoint) desired(ctx context.Context, cur *discoveryv1.EndpointSlice, ready bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{}
	if cur != nil {
		s = cur.DeepCopy()
	}
	s.Name, s.Namespace = GateEndpointSliceName(le.svc), le.ns
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[LabelServiceName] = le.svc
	s.Labels[LabelEndpointManagedBy] = EndpointSliceManager
	s.Labels["app.kubernetes.io/name"] = "rankgate-controller"
	s.AddressType = le.family
	s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To(GateEndpointPortName), Port: ptr.To(le.port), Protocol: ptr.To(corev1.ProtocolTCP)}}
	s.Endpoints = []discoveryv1.Endpoint{{
		Addresses:  []string{le.ip},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(false)},
		// Identity is the pod's name in a pod (POD_NAME).
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: le.ns, Name: le.c.opts.Identity},
	}}
	if len(s.OwnerReferences) == 0 {
		s.OwnerReferences = le.serviceOwner(ctx)
	}
	return s
}

// serviceOwner makes the Service the slice's owner, so that deleting the
// Service deletes it; none if the Service cannot be read.
func (le *leaderEndpoint) serviceOwner(ctx context.Context) []metav1.OwnerReference {
	svc := &corev1.Service{}
	if err := le.c.api.Get(ctx, types.NamespacedName{Namespace: le.ns, Name: le.svc}, svc); err != nil {
		le.c.log.Error(err, "reading the gate Service (the EndpointSlice is written without an owner; kube-proxy routes only to a Service that exists)", "service", le.ns+"/"+le.svc)
		return nil
	}
	if len(svc.Spec.Selector) > 0 {
		le.c.log.Info("the gate Service selects pods: kube-proxy sends ranks to every replica it selects besides the leader; remove its selector (configs/deploy/service.yaml)", "service", le.ns+"/"+le.svc)
	}
	return []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID}}
}

// namesOnly reports whether the slice's endpoints are this replica's
// address alone (and ready, with wantReady).
func (le *leaderEndpoint) namesOnly(s *discoveryv1.EndpointSlice, wantReady bool) bool {
	if len(s.Endpoints) != 1 || len(s.Endpoints[0].Addresses) != 1 || s.Endpoints[0].Addresses[0] != le.ip {
		return false
	}
	if len(s.Ports) != 1 || s.Ports[0].Port == nil || *s.Ports[0].Port != le.port {
		return false
	}
	r := s.Endpoints[0].Conditions.Ready
	return !wantReady || (r != nil && *r)
}

// namesOther: the slice has endpoints, and not this replica's alone.
func (le *leaderEndpoint) namesOther(s *discoveryv1.EndpointSlice) bool {
	return len(s.Endpoints) > 0 && !le.namesOnly(s, false)
}

// check recreates a deleted slice and repairs this replica's entry; a slice
// naming another replica is left to it.
func (le *leaderEndpoint) check(ctx context.Context, log logr.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, gateEndpointWriteTimeout)
	defer cancel()
	cur := &discoveryv1.EndpointSlice{}
	err := le.c.api.Get(ctx, types.NamespacedName{Namespace: le.ns, Name: GateEndpointSliceName(le.svc)}, cur)
	switch {
	case apierrors.IsNotFound(err):
		log.Info("the gate Service's EndpointSlice is gone; writing it again")
		return le.write(ctx, true, false)
	case err != nil:
		return err
	case le.namesOnly(cur, true) && cur.Labels[LabelServiceName] == le.svc:
		return nil
	case le.namesOther(cur):
		log.Info("the gate Service's EndpointSlice names another replica; leaving it")
		return nil
	}
	return le.write(ctx, true, true)
}

// withdraw removes this replica's endpoint when it stops leading, unless a
// newer leader has written the slice since (resourceVersion precondition),
// so that new connections are refused at once rather than sent to a
// replica that is going away.
func (le *leaderEndpoint) withdraw(log logr.Logger) {
	metricEndpointReady.Set(0)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cur := &discoveryv1.EndpointSlice{}
	err := le.c.api.Get(ctx, types.NamespacedName{Namespace: le.ns, Name: GateEndpointSliceName(le.svc)}, cur)
	if err != nil {
		if !apierrors.IsNotFound(err) {
			log.Error(err, "withdrawing this replica from the gate Service's endpoints")
		}
		return
	}
	if !le.namesOnly(cur, false) {
		return
	}
	cur.Endpoints = []discoveryv1.Endpoint{}
	if err := le.c.client.Update(ctx, cur); err != nil {
		if !apierrors.IsConflict(err) {
			log.Error(err, "withdrawing this replica from the gate Service's endpoints")
		}
		return
	}
	log.Info("withdrew this replica from the gate Service's endpoints")
}
