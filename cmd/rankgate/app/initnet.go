package app

import (
	"go.uber.org/zap"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/preflight/ncclenv"
)

// rankNet is this pod's network as NCCL sees it, for the gang verdict's
// NIC rules (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_IGNORE_NET_MISMATCH):
// the pod's interfaces (its containers share one network namespace) and
// the node's RDMA devices under sysfs. nil when the interfaces cannot be
// read or exceed what the gate accepts: the controller then judges this
// rank's network as unknown, which is never a reason to fail it.
func rankNet(sysfs string, log *zap.Logger) *gate.RankNet {
	n, err := ncclenv.ReadLocalNet(sysfs)
	if err != nil {
		log.Warn("network not fully read; the gang's NIC rules judge what was read", zap.Error(err))
	}
	if n == nil {
		return nil
	}
	out := &gate.RankNet{Interfaces: n.Interfaces, HCAs: n.HCAs, HCAsKnown: n.HCAsKnown}
	if err := out.Check(); err != nil {
		log.Warn("network not reported; the gang's NIC rules do not judge this rank", zap.Error(err))
		return nil
	}
	return out
}
