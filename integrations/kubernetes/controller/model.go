package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller/clusterstate"
	"github.com/rankgate/rankgate/preflight/schedule"
)

// The engine's node model and the pods' usage are package clusterstate's
// (c.state), fed here from the informers: a judgement on the model is the
// judgement of judgeJob over the cached nodes.
//
// A node event re-judges only the watched jobs it can affect: those past
// their grace whose pods have not changed since their last judgement are
// judged again on the new snapshot from the workload kept with them, one
// judgement per distinct workload (equal jobs share it; names only appear in
// messages), and only the jobs it finds hopeless are reconciled (and
// failed). Jobs still in their grace are judged when it ends; waiting ones
// are looked at again on their own schedule (watchdog.Recheck) and on changes
// of their own pods.

// signature is everything of w that the engine's hopeless verdict reads
// (with what the published DRA devices offer its DRA pod sets):
// not the names it only quotes, and not what the job's bound pods hold
// (hopelessness never depends on free capacity; TestModelMatchesFullRebuild
// checks it with bound pods on changing nodes).
func signature(w schedule.Workload) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%t|", w.Kind, w.Suspended)
	for _, ps := range w.PodSets {
		fmt.Fprintf(&b, "%s|%d|%d|%v|%+v|%d|%q|%q|%s;", ps.Name, ps.Count, ps.Bound, ps.Requests, ps.Constraints, len(ps.Pods), ps.SchedulerMessage, ps.DRA, draFactsKey(ps.DRAFacts))
	}
	return b.String()
}

// judge is judgeJob on the model, or over a fresh list of the cached
// nodes until the model has seen them all.
func (c *Controller) judge(ctx context.Context, j job, pods []*corev1.Pod, onlyUnbound bool) (schedule.Result, schedule.Workload, bool, error) {
	dra, err := c.draState(ctx)
	if err != nil {
		return schedule.Result{}, schedule.Workload{}, false, err
	}
	cl, _, err := c.state.Nodes.Cluster()
	if err == nil {
		res, w, _, ok, err := judgeOn(c.engine, cl, dra, j, pods, onlyUnbound)
		return res, w, ok, err
	}
	if !errors.Is(err, clusterstate.ErrNodesNotSynced) {
		return schedule.Result{}, schedule.Workload{}, false, err
	}
	nodes := &corev1.NodeList{}
	if err := c.client.List(ctx, nodes); err != nil {
		return schedule.Result{}, schedule.Workload{}, false, fmt.Errorf("listing nodes: %w", err)
	}
	return judgeJob(c.engine, nodes.Items, dra, j, pods, onlyUnbound)
}

// startModel feeds the model from the node informer (its handler tells
// the event router of each change, once applied).
func (c *Controller) startModel(ctx context.Context) error {
	ni, err := c.mgr.GetCache().GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return err
	}
	reg, err := ni.AddEventHandler(c.state.Nodes.Handler())
	if err != nil {
		return err
	}
	c.state.Nodes.SetSynced(reg.HasSynced)
	return nil
}
