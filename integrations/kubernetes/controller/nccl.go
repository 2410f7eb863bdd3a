package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/types"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/ncclsettings"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/preflight/ncclenv"
)

// ncclSettings reads the NCCL settings each rank runs with from the job's
// pod templates, for the gang verdict's NCCL settings rules, from the
// controller's cache: its copy of each template keeps the rank
// container's launch settings (jobkind.StripTemplate), so deciding makes
// no API call. nil when it cannot be read or is another job
// of the same name: the rules are then not run.
func (c *Controller) ncclSettings(ctx context.Context, g *gang) map[int]ncclenv.Rank {
	k, ok := kubeflow.ByName(g.Kind())
	if !ok {
		return nil
	}
	obj := k.New()
	if err := c.client.Get(ctx, types.NamespacedName{Namespace: g.Namespace(), Name: g.Name()}, obj); err != nil || obj.GetUID() != g.UID() {
		if err != nil {
			c.log.V(1).Info("job not read: NCCL settings not judged", "job", g.Key(), "error", err.Error())
		}
		return nil
	}
	return ncclsettings.ByRank(kubeflow.MustFromObject(obj))
}

// rankNet is the network a rank reported, for the gang verdict's NIC
// rules; nil (unknown) when it reported none.
func rankNet(n *gate.RankNet) *ncclenv.Net {
	if n == nil {
		return nil
	}
	return &ncclenv.Net{Interfaces: n.Interfaces, HCAs: n.HCAs, HCAsKnown: n.HCAsKnown || len(n.HCAs) > 0}
}
