package validate

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
)

// DeviceClassSource returns the cluster's DeviceClasses: the extended
// resources they map come through DRA, and a job asking for one is judged
// on the devices drivers publish (DRASource), never from node
// allocatable.
type DeviceClassSource func(ctx context.Context) ([]resourcev1.DeviceClass, error)

// ListDeviceClasses is a DeviceClassSource over a client: with the
// controller manager's client, the informer cache. A cluster that does not
// serve resource.k8s.io/v1 has none.
func ListDeviceClasses(c client.Reader) DeviceClassSource {
	return func(ctx context.Context) ([]resourcev1.DeviceClass, error) {
		l := &resourcev1.DeviceClassList{}
		if err := c.List(ctx, l); err != nil {
			if meta.IsNoMatchError(err) {
				return nil, nil
			}
			return nil, err
		}
		return l.Items, nil
	}
}

// DRAObjects are the cluster's ResourceSlices, ResourceClaims,
// ResourceClaimTemplates and DeviceTaintRules (resource.k8s.io/v1), as the controller's caches
// hold them (read only: never changed by the handler).
type DRAObjects struct {
	// Nodes are the cluster's nodes, where the source holds them (a
	// judged DRA job needs them, the nodes its devices are on); nil: the
	// handler lists them (Options.Nodes).
	Nodes     []*corev1.Node
	Slices    []*resourcev1.ResourceSlice
	Claims    []*resourcev1.ResourceClaim
	Templates []*resourcev1.ResourceClaimTemplate
	// TaintRules are the DeviceTaintRules: the devices they select carry
	// their taints, as the scheduler allocates them.
	TaintRules []*resourcev1.DeviceTaintRule
}

// DRAObjectSource returns the DRA objects; nil where they are not known
// (not served, or the caches have not synced): the claim checks then
// stand down, and the placement check does not judge DRA jobs.
type DRAObjectSource func(ctx context.Context) (*DRAObjects, error)

// ListDRAObjects is a DRAObjectSource over a client: with the controller
// manager's client, the informer caches. A cluster that does not serve
// resource.k8s.io/v1 has none known.
func ListDRAObjects(c client.Reader) DRAObjectSource {
	return func(ctx context.Context) (*DRAObjects, error) {
		sl, cl, tl := &resourcev1.ResourceSliceList{}, &resourcev1.ResourceClaimList{}, &resourcev1.ResourceClaimTemplateList{}
		for _, l := range []client.ObjectList{sl, cl, tl} {
			if err := c.List(ctx, l); err != nil {
				if meta.IsNoMatchError(err) {
					return nil, nil
				}
				return nil, err
			}
		}
		// DeviceTaintRules are served in v1 from Kubernetes 1.37: an
		// older API server has none that apply.
		rl := &resourcev1.DeviceTaintRuleList{}
		if err := c.List(ctx, rl); err != nil && !meta.IsNoMatchError(err) {
			return nil, err
		}
		o := &DRAObjects{}
		for i := range rl.Items {
			o.TaintRules = append(o.TaintRules, &rl.Items[i])
		}
		for i := range sl.Items {
			o.Slices = append(o.Slices, &sl.Items[i])
		}
		for i := range cl.Items {
			o.Claims = append(o.Claims, &cl.Items[i])
		}
		for i := range tl.Items {
			o.Templates = append(o.Templates, &tl.Items[i])
		}
		return o, nil
	}
}

// addTo adds o to b, as live diagnose adds what it lists: the nodes, if
// o has them, the claims, templates and device taint rules, then the
// slices in
// name order (the allocator tries pools in the order it is given them),
// as the controller adds its cached objects.
func (o *DRAObjects) addTo(b *cluster.Builder) error {
	for _, n := range o.Nodes {
		if err := b.AddNode(n); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	for _, c := range o.Claims {
		if err := b.AddResourceClaim(c); err != nil {
			return fmt.Errorf("resourceclaim %s/%s: %w", c.Namespace, c.Name, err)
		}
	}
	for _, t := range o.Templates {
		if err := b.AddResourceClaimTemplate(t); err != nil {
			return fmt.Errorf("resourceclaimtemplate %s/%s: %w", t.Namespace, t.Name, err)
		}
	}
	for _, r := range o.TaintRules {
		if err := b.AddDeviceTaintRule(r); err != nil {
			return fmt.Errorf("devicetaintrule %s: %w", r.Name, err)
		}
	}
	sorted := slices.Clone(o.Slices)
	slices.SortFunc(sorted, func(a, b *resourcev1.ResourceSlice) int { return strings.Compare(a.Name, b.Name) })
	for _, s := range sorted {
		if err := b.AddResourceSlice(s); err != nil {
			return fmt.Errorf("resourceslice %s: %w", s.Name, err)
		}
	}
	return nil
}
