package preflight

import (
	"github.com/rankgate/rankgate/preflight/ncclenv"
	"github.com/rankgate/rankgate/verdict"
)

// gangNCCLSettings judges the NCCL settings each rank runs with against
// the devices every rank reported (preflight/ncclenv, ScopeGang): MIG
// ranks of one pod on one GPU without NCCL_MULTI_RANK_GPU_ENABLE=1,
// NCCL_NVLS_ENABLE=1 on MIG, NCCL_MNNVL_ENABLE=1 across NVLink domains,
// CUDA_VISIBLE_DEVICES naming devices a rank was not given, settings
// that differ between ranks, NCCL_SOCKET_IFNAME or NCCL_IB_HCA naming
// what a rank's node lacks, NCCL_IGNORE_NET_MISMATCH=1 with NIC sets that
// differ, ... Ranks that have not reported are not judged; a rank whose
// settings are unknown is judged on its devices alone; the network rules
// judge only the ranks that reported their network.
func gangNCCLSettings(g *gang) []verdict.Finding {
	if g.in.NCCL == nil {
		return nil
	}
	in := ncclenv.Input{Scope: ncclenv.ScopeGang, Ranks: make([]ncclenv.Rank, 0, len(g.ranks))}
	for _, r := range g.ranks {
		nr, ok := g.in.NCCL[r.Rank]
		if !ok {
			nr = ncclenv.Rank{}
		}
		nr.Rank, nr.Name, nr.Pod, nr.Node, nr.Replicas = r.Rank, "", r.Pod, r.Node, 1
		nr.DevicesKnown = true
		nr.Net = r.Net
		if r.NCCLVersion != "" {
			nr.NCCLVersion = r.NCCLVersion
		}
		nr.Devices = ncclenv.ReportDevices(r.Report)
		in.Ranks = append(in.Ranks, nr)
	}
	return ncclenv.Check(in)
}
