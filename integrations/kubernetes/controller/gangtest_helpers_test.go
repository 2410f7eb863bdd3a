package controller

import (
	"time"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
	"github.com/rankgate/rankgate/preflight"
)

// newTestGang is job j's gang in a store of its own.
func newTestGang(j job, timeout time.Duration, multiNodeNVLink bool) *gang {
	spec := gangSpec(j, timeout)
	spec.MultiNodeNVLink = multiNodeNVLink
	g, _ := gangstore.New[decision.Decision](gangstore.Gauges{}).Ensure(spec)
	return g
}

// addRank adds rr to g as the gate does, and says why g is to be decided.
func addRank(g *gang, rr preflight.RankReport, podUID string, now time.Time) (isNew, decide bool, why decision.Trigger, h *gangstore.Holder) {
	isNew, ready, h := g.Add(rr, podUID, now)
	why, decide = decision.ReadyTrigger(ready)
	return isNew, decide, why, h
}
