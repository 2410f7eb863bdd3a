package controller

import (
	"context"
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/validate"
)

// DeviceClasses say which extended resources come through DRA (a class's
// spec.extendedResourceName). A job whose pods use DRA, by resource claims
// or by such a resource, is not judged from node allocatable by the
// validating webhook, the Pending watchdog or GANG_RANK_UNPLACEABLE: the
// engine answers DRA_NOT_JUDGED, never hopeless (cluster/dra.go decides).

var deviceClassGK = schema.GroupKind{Group: resourcev1.GroupName, Kind: "DeviceClass"}

// startDeviceClasses starts the DeviceClass informer with the manager
// where the API server serves resource.k8s.io/v1; elsewhere no extended
// resource comes through DRA.
func (c *Controller) startDeviceClasses(ctx context.Context) error {
	if _, err := c.mgr.GetRESTMapper().RESTMapping(deviceClassGK, resourcev1.SchemeGroupVersion.Version); err != nil {
		if meta.IsNoMatchError(err) {
			c.log.Info("resource.k8s.io/v1 DeviceClass not served: no extended resource comes through DRA")
			return nil
		}
		return fmt.Errorf("controller: discovering DeviceClasses: %w", err)
	}
	if _, err := c.mgr.GetCache().GetInformer(ctx, &resourcev1.DeviceClass{}); err != nil {
		return fmt.Errorf("controller: DeviceClass informer: %w", err)
	}
	c.draServed = true
	return nil
}

// deviceClasses are the cached DeviceClasses (none where the API server
// does not serve them).
func (c *Controller) deviceClasses(ctx context.Context) ([]resourcev1.DeviceClass, error) {
	if !c.draServed {
		return nil, nil
	}
	classes, err := validate.ListDeviceClasses(c.client)(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing DeviceClasses: %w", err)
	}
	return classes, nil
}

// newBuilder is a cluster.Builder that knows the DeviceClasses.
func newBuilder(classes []resourcev1.DeviceClass) *cluster.Builder {
	b := cluster.NewBuilder()
	for i := range classes {
		// Only a class without a name is refused; the API server has none.
		_ = b.AddDeviceClass(&classes[i])
	}
	return b
}
