package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller/clusterstate"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource/dra"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/validate"
	"github.com/rankgate/rankgate/preflight/schedule"
)

// A job whose pods get devices through DRA (resource claims, or an
// extended resource a DeviceClass maps: its spec.extendedResourceName) is
// judged by the validating webhook, the Pending watchdog and
// GANG_RANK_UNPLACEABLE on the devices drivers publish, as `rankgate
// diagnose` judges it: the same cluster.Builder, given the cached
// DeviceClasses, ResourceSlices, ResourceClaims, ResourceClaimTemplates
// and DeviceTaintRules and the cached nodes, allocates the job's claims with the scheduler's
// own allocator (cluster/dra_judge.go). Until those caches have synced,
// or where resource.k8s.io/v1 is not served, such a job is not judged
// (DRA_NOT_JUDGED, never hopeless).

var (
	deviceClassGK     = schema.GroupKind{Group: resourcev1.GroupName, Kind: "DeviceClass"}
	deviceTaintRuleGK = schema.GroupKind{Group: resourcev1.GroupName, Kind: "DeviceTaintRule"}
)

// draCaches are the controller's DRA informers (served only where the
// API server serves resource.k8s.io/v1).
type draCaches struct {
	served bool
	// The informers' stores, read without copies (cached objects are
	// read only), and whether each has seen its initial list. rules is
	// nil where the API server serves no v1 DeviceTaintRules (before
	// Kubernetes 1.37): there are none then.
	nodes, slices, claims, templates, rules toolscache.Store
	// reader reads the cached DeviceClasses.
	reader      client.Reader
	synced      []func() bool
	rulesServed bool
	// pools is the memo of the pools' inventories that the DRA device
	// sources share: the ranks of a node, resolved by any allocations
	// reconciler and again when each reports itself (againstAllocation),
	// share the node's inventory, built once per version of its pool's
	// slices in slices.
	pools dra.Pools
}

// startDRA starts the DeviceClass, ResourceSlice, ResourceClaim,
// ResourceClaimTemplate and DeviceTaintRule informers with the manager
// where the API server serves resource.k8s.io/v1; elsewhere nothing comes
// through DRA.
func (c *Controller) startDRA(ctx context.Context) error {
	if _, err := c.mgr.GetRESTMapper().RESTMapping(deviceClassGK, resourcev1.SchemeGroupVersion.Version); err != nil {
		if meta.IsNoMatchError(err) {
			c.log.Info("resource.k8s.io/v1 not served: no device comes through DRA")
			return nil
		}
		return fmt.Errorf("controller: discovering DeviceClasses: %w", err)
	}
	d := &c.dra
	d.reader = c.client
	type informed struct {
		obj   client.Object
		store *toolscache.Store
	}
	all := []informed{{&resourcev1.DeviceClass{}, nil}, {&corev1.Node{}, &d.nodes}, {&resourcev1.ResourceSlice{}, &d.slices},
		{&resourcev1.ResourceClaim{}, &d.claims}, {&resourcev1.ResourceClaimTemplate{}, &d.templates}}
	switch _, err := c.mgr.GetRESTMapper().RESTMapping(deviceTaintRuleGK, resourcev1.SchemeGroupVersion.Version); {
	case err == nil:
		all = append(all, informed{&resourcev1.DeviceTaintRule{}, &d.rules})
		d.rulesServed = true
	case !meta.IsNoMatchError(err):
		return fmt.Errorf("controller: discovering DeviceTaintRules: %w", err)
	default:
		c.log.Info("resource.k8s.io/v1 DeviceTaintRules not served (before Kubernetes 1.37): none apply")
	}
	for _, o := range all {
		inf, err := c.mgr.GetCache().GetInformer(ctx, o.obj)
		if err != nil {
			return fmt.Errorf("controller: %T informer: %w", o.obj, err)
		}
		if o.store == nil {
			continue
		}
		if o.store == &d.slices {
			// The DRA device source reads a pool's slices (allocations.go).
			if err := inf.AddIndexers(toolscache.Indexers{poolIndex: slicePool}); err != nil {
				return fmt.Errorf("controller: indexing ResourceSlices by pool: %w", err)
			}
		}
		d.synced = append(d.synced, inf.HasSynced)
		if s, ok := inf.(interface{ GetStore() toolscache.Store }); ok {
			*o.store = s.GetStore()
		}
	}
	d.served = true
	return nil
}

// deviceClasses are the cached DeviceClasses (none where the API server
// does not serve them).
func (d *draCaches) deviceClasses(ctx context.Context) ([]resourcev1.DeviceClass, error) {
	if !d.served {
		return nil, nil
	}
	classes, err := validate.ListDeviceClasses(d.reader)(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing DeviceClasses: %w", err)
	}
	return classes, nil
}

// draState is the DRA part of one judgement's cluster state.
type draState struct {
	classes []resourcev1.DeviceClass
	// objects lists the cluster's DRA objects; nil where they are not
	// known (not served, not synced): DRA jobs stay unjudged.
	objects func() (*draObjects, error)
}

// draObjects are the cached objects a DRA job is judged on. nodes are
// for a builder that has none (the allocator tries each node with its
// labels; a resource nodes advertise is not judged on DRA devices alone).
type draObjects struct {
	nodes     []*corev1.Node
	slices    []*resourcev1.ResourceSlice
	claims    []*resourcev1.ResourceClaim
	templates []*resourcev1.ResourceClaimTemplate
	rules     []*resourcev1.DeviceTaintRule
}

// draState is the DRA part of the cached cluster state.
func (c *Controller) draState(ctx context.Context) (*draState, error) {
	classes, err := c.dra.deviceClasses(ctx)
	if err != nil {
		return nil, err
	}
	s := &draState{classes: classes}
	if c.dra.served {
		s.objects = c.dra.objects
	}
	return s, nil
}

// objects lists the cached DRA objects and nodes; nil until every
// informer has its initial list.
func (d *draCaches) objects() (*draObjects, error) {
	if !d.served || !clusterstate.AllSynced(d.synced) || d.nodes == nil || d.slices == nil || d.claims == nil || d.templates == nil || (d.rulesServed && d.rules == nil) {
		return nil, nil
	}
	// Nodes and slices in name order, as a live read lists them (the
	// allocator tries nodes in that order); claims and templates are
	// looked up by name.
	return &draObjects{nodes: listed[corev1.Node](d.nodes, true), slices: listed[resourcev1.ResourceSlice](d.slices, true),
		claims: listed[resourcev1.ResourceClaim](d.claims, false), templates: listed[resourcev1.ResourceClaimTemplate](d.templates, false),
		rules: d.taintRules()}, nil
}

// taintRules are the cached DeviceTaintRules in name order (none where
// they are not served).
func (d *draCaches) taintRules() []*resourcev1.DeviceTaintRule {
	if d.rules == nil {
		return nil
	}
	return listed[resourcev1.DeviceTaintRule](d.rules, true)
}

// TaintRules serves the cached DeviceTaintRules to the DRA device source.
func (o draCacheObjects) TaintRules() []*resourcev1.DeviceTaintRule { return o.d.taintRules() }

// listed are a store's objects of type T, in name order if sorted.
func listed[T any, P interface {
	*T
	client.Object
}](s toolscache.Store, sorted bool) []*T {
	items := s.List()
	out := make([]*T, 0, len(items))
	for _, o := range items {
		if p, ok := o.(P); ok {
			out = append(out, (*T)(p))
		}
	}
	if !sorted {
		return out
	}
	slices.SortFunc(out, func(a, b *T) int {
		pa, pb := P(a), P(b)
		if d := strings.Compare(pa.GetNamespace(), pb.GetNamespace()); d != 0 {
			return d
		}
		return strings.Compare(pa.GetName(), pb.GetName())
	})
	return out
}

// builder is a cluster.Builder that knows the DeviceClasses.
func (s *draState) builder() *cluster.Builder {
	b := cluster.NewBuilder()
	if s == nil {
		return b
	}
	for i := range s.classes {
		// Only a class without a name is refused; the API server has none.
		_ = b.AddDeviceClass(&s.classes[i])
	}
	return b
}

// judges: w has a DRA pod set with pods to place, and the DRA objects are
// known.
func (s *draState) judges(w schedule.Workload) bool {
	if s == nil || s.objects == nil {
		return false
	}
	return slices.ContainsFunc(w.PodSets, func(ps schedule.PodSet) bool { return ps.DRA != "" && ps.Count > 0 })
}

// addTo adds the DRA objects to b (and the nodes, withNodes), as live
// diagnose adds what it lists; false when they are not known.
func (s *draState) addTo(b *cluster.Builder, withNodes bool) (bool, error) {
	o, err := s.objects()
	if err != nil || o == nil {
		return false, err
	}
	return true, o.addTo(b, withNodes)
}

func (o *draObjects) addTo(b *cluster.Builder, withNodes bool) error {
	if withNodes {
		for _, n := range o.nodes {
			if err := b.AddNode(n); err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
		}
	}
	for _, c := range o.claims {
		if err := b.AddResourceClaim(c); err != nil {
			return fmt.Errorf("resourceclaim %s/%s: %w", c.Namespace, c.Name, err)
		}
	}
	for _, t := range o.templates {
		if err := b.AddResourceClaimTemplate(t); err != nil {
			return fmt.Errorf("resourceclaimtemplate %s/%s: %w", t.Namespace, t.Name, err)
		}
	}
	for _, r := range o.rules {
		if err := b.AddDeviceTaintRule(r); err != nil {
			return fmt.Errorf("devicetaintrule %s: %w", r.Name, err)
		}
	}
	for _, sl := range o.slices {
		if err := b.AddResourceSlice(sl); err != nil {
			return fmt.Errorf("resourceslice %s: %w", sl.Name, err)
		}
	}
	return nil
}

// validateObjects is the validating webhook's DRA source: the cached
// nodes, slices, claims, claim templates and device taint rules (listed
// from the caches, not copied); nil until the caches have synced.
func (d *draCaches) validateObjects(context.Context) (*validate.DRAObjects, error) {
	o, err := d.objects()
	if err != nil || o == nil {
		return nil, err
	}
	return &validate.DRAObjects{Nodes: o.nodes, Slices: o.slices, Claims: o.claims, Templates: o.templates, TaintRules: o.rules}, nil
}

// workloadKey tells workloads apart by everything the engine reads of
// them, their DRA facts by value.
func workloadKey(w schedule.Workload) string {
	sets := make([]schedule.PodSet, len(w.PodSets))
	var facts strings.Builder
	for i, ps := range w.PodSets {
		facts.WriteString(draFactsKey(ps.DRAFacts))
		facts.WriteByte(';')
		ps.DRAFacts = nil
		sets[i] = ps
	}
	w.PodSets = sets
	return fmt.Sprintf("%+v|%s", w, facts.String())
}

// draFactsKey is f by value ("-" for none).
func draFactsKey(f *schedule.DRAFacts) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%+v", *f)
}
