package controller

import (
	"fmt"
	"time"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/jobkind"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/leader"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
)

// restartOf is pod p's restart attempt, when j's kind restarts that way.
func restartOf(j job, labels map[string]string) (int32, bool) {
	k, _ := kubeflow.ByName(j.Kind())
	rs, ok := k.(jobkind.Restarter)
	if !ok {
		return 0, false
	}
	return rs.RestartAttempt(labels)
}

// checkRestart lets rank r through when its pod is of the restart the
// job's gated attempt judges; see above for the others.
func (c *Controller) checkRestart(r rankOf) error {
	got, ok := restartOf(r.job, r.pod.Labels)
	if !ok {
		return nil
	}
	o := r.job.Object()
	cur := leader.RestartAttempt(o)
	switch {
	case got < cur:
		return gate.Errorf(gate.CodeNotARank, "pod %s/%s is of restart attempt %d of %s %s, which restarted since (restart attempt %d): its ranks are the new pods",
			r.pod.Namespace, r.pod.Name, got, r.job.Kind(), o.GetName(), cur)
	case got > cur:
		c.w.AskRestart(r.job, got)
		return &gate.Error{HTTPStatus: 503, Code: gate.CodeUnavailable, RetryAfter: time.Second,
			Message: fmt.Sprintf("%s %s/%s restarted (restart attempt %d; the gate judged %d): its new pods are gated as a new attempt; retry",
				r.job.Kind(), o.GetNamespace(), o.GetName(), got, cur)}
	}
	return nil
}
