package controller

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
)

// warnGateBound warns, once per gang, when the job has more rank pods than
// the gate's connection bound: a rank holds a connection while it waits
// for the verdict, and the ranks beyond the bound wait in the listen
// backlog instead, where they may reach the gang timeout before they can
// report. The bound is per replica, and the leader answers every rank.
func (c *Controller) warnGateBound(j job, ranks int) {
	bound := c.opts.GateMaxConnections
	if ranks <= bound {
		return
	}
	key := decision.JobKey(j)
	c.log.Info("the job has more rank pods than the gate serves connections at once; raise --gate-max-connections",
		"job", key, "ranks", ranks, "gateMaxConnections", bound)
	c.rec.Eventf(j.Object(), nil, corev1.EventTypeWarning, contract.ReasonGateConnectionsTooFew, "Gate",
		"%s has %d rank pods, but the gate serves at most %d connections at once and every waiting rank holds one: ranks beyond %d cannot wait for the verdict together and may miss the gang timeout; run the controller with --gate-max-connections=%d or more",
		key, ranks, bound, bound, ranks)
}
