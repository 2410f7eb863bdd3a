package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/watchdog"
	"github.com/rankgate/rankgate/preflight"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// missingRanks describes the pods of the ranks that have not reported. With
// onlyUnplaceable it returns only ranks whose pods can never be placed.
func (c *Controller) missingRanks(ctx context.Context, g *gang, reported []preflight.RankReport, onlyUnplaceable bool) map[int]preflight.MissingRank {
	k, _ := kubeflow.ByName(g.Kind())
	obj := k.New()
	if err := c.client.Get(ctx, types.NamespacedName{Namespace: g.Namespace(), Name: g.Name()}, obj); err != nil || obj.GetUID() != g.UID() {
		return nil
	}
	j := kubeflow.MustFromObject(obj)
	have := map[int]bool{}
	for _, r := range reported {
		have[r.Rank] = true
	}
	pods := &corev1.PodList{}
	if err := c.listJobPods(ctx, pods, g.Namespace(), g.Name()); err != nil {
		c.log.Error(err, "listing pods of missing ranks", "job", g.Key())
	}
	out := map[int]preflight.MissingRank{}
	var jobPods, waiting []*corev1.Pod
	waitingRank := map[*corev1.Pod]int{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if ref, ok, err := c.jobOf(ctx, p); err != nil || !ok || ref.uid != g.UID() || podFits(j, p) != nil {
			continue
		}
		jobPods = append(jobPods, p)
		rank, err := kubeflow.RankOf(j, p)
		if err != nil || have[rank] {
			continue
		}
		out[rank] = preflight.MissingRank{Pod: p.Name, Node: p.Spec.NodeName, State: c.podState(ctx, p)}
		if watchdog.Unschedulable(p) {
			waiting = append(waiting, p)
			waitingRank[p] = rank
		}
	}
	if len(waiting) > 0 {
		// Only when the scheduler has given up on a pod is it worth asking
		// whether it ever could be placed (placement.go).
		why := c.unplaceablePods(ctx, j, jobPods)
		for _, p := range waiting {
			if reason, ok := why[p.Namespace+"/"+p.Name]; ok {
				m := out[waitingRank[p]]
				m.Unplaceable = true
				m.State += "; " + reason
				out[waitingRank[p]] = m
			}
		}
	}
	if onlyUnplaceable {
		for r, m := range out {
			if !m.Unplaceable {
				delete(out, r)
			}
		}
		return out
	}
	for i := 0; i < g.Expected(); i++ {
		if _, ok := out[i]; !ok && !have[i] {
			out[i] = preflight.MissingRank{State: "no pod: the operator has not created it (quota, admission, or the job is suspended)"}
		}
	}
	return out
}

// podState says in words what a rank's pod is doing.
func (c *Controller) podState(ctx context.Context, p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "terminating"
	}
	if p.Spec.NodeName == "" {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
				return fmt.Sprintf("Pending, not scheduled (%s): %s", cond.Reason, cond.Message)
			}
		}
		return "Pending, not scheduled yet"
	}
	var s string
	for _, st := range p.Status.InitContainerStatuses {
		switch {
		case st.State.Waiting != nil:
			s = fmt.Sprintf("%s, init container %s waiting (%s)", p.Status.Phase, st.Name, st.State.Waiting.Reason)
			if st.State.Waiting.Message != "" {
				s += ": " + st.State.Waiting.Message
			}
		case st.State.Terminated != nil && st.State.Terminated.ExitCode != 0:
			s = fmt.Sprintf("%s, init container %s exited %d (%s)", p.Status.Phase, st.Name, st.State.Terminated.ExitCode, st.State.Terminated.Reason)
		case st.State.Running != nil:
			s = fmt.Sprintf("%s, init container %s running but has not reported (can it reach the gate? see its log)", p.Status.Phase, st.Name)
		}
		if s != "" {
			break
		}
	}
	if s == "" {
		phase := p.Status.Phase
		if phase == "" {
			phase = corev1.PodPending
		}
		s = fmt.Sprintf("%s on its node, has not reported", phase)
	}
	n := &corev1.Node{}
	if err := c.client.Get(ctx, types.NamespacedName{Name: p.Spec.NodeName}, n); apierrors.IsNotFound(err) {
		s += " (its node does not exist)"
	} else if err == nil && !cluster.NodeReady(n) {
		s += " (its node is NotReady)"
	}
	return s
}
