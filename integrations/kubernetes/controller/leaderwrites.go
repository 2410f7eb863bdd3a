package controller

import (
	"context"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/leader"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/preflight/ncclenv"
	"github.com/rankgate/rankgate/verdict"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// newWrites are c's writes (package leader), on qs.
func (c *Controller) newWrites(qs *leader.Queues) *leader.Writes {
	return leader.New(leader.Config{Host: reconcilerHost{c}, GangTimeout: c.opts.GangTimeout, OnFail: c.opts.OnFail, AppliedDelay: *c.opts.AppliedDelay,
		Identity: c.opts.Identity, Clock: c.clock(), Log: c.log, Client: c.client, API: c.api, GangAPI: c.gangAPI, Recorder: c.rec, Gangs: c.gangs}, qs)
}

// reconcilerHost (hosts.go) is also what the leader's writes ask of c
// (leader.Host).

func (h reconcilerHost) MissingRanks(ctx context.Context, g *gang, reported []preflight.RankReport, onlyUnplaceable bool) map[int]preflight.MissingRank {
	return h.c.missingRanks(ctx, g, reported, onlyUnplaceable)
}

func (h reconcilerHost) NCCLSettings(ctx context.Context, g *gang) map[int]ncclenv.Rank {
	return h.c.ncclSettings(ctx, g)
}

func (h reconcilerHost) Watches(k kubeflow.Kind) bool { return h.c.watches(k) }

func (c *Controller) askDecide(g *gang, a decision.Ask) { c.w.AskDecide(g, a) }

func (c *Controller) touchProgress(uid types.UID, soon bool) { c.w.TouchProgress(uid, soon) }

func (c *Controller) wantWaitingFor(obj client.Object, kind string, cause *verdict.Finding) {
	c.w.WantWaitingFor(obj, kind, cause)
}

func (c *Controller) askRegate(obj client.Object, kind string) { c.w.AskRegate(obj, kind) }
