package validate

import (
	"context"

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

// DRASource adds the cluster's ResourceSlices, ResourceClaims and
// ResourceClaimTemplates (resource.k8s.io/v1) to b, as live diagnose adds
// what it lists; known is false where they are not known (not served, or
// the caches have not synced): a job whose devices come through DRA is
// then not judged (DRA_NOT_JUDGED, never refused).
type DRASource func(ctx context.Context, b *cluster.Builder) (known bool, err error)
