package controller

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

// Whether a missing rank's pod can ever be placed (GANG_RANK_UNPLACEABLE) is
// decided by the schedule engine that `rankgate diagnose` uses, over the
// controller's informer caches: every cached node (labels, taints,
// allocatable, GPU capacity, Ready, cordon; cache.go keeps them) and the
// job's cached pods (an unbound pod keeps its requests and placement
// rules). The job is judged as a whole, as diagnose judges it; a pod is
// unplaceable exactly when a finding of the engine's hopeless verdict
// (severity fail: SHAPE_MISMATCH, STRATEGY_MISMATCH, NODE_CONSTRAINTS,
// MIG_LAYOUT_INVALID, ... about its pod set, or GANG_TOO_LARGE about the
// whole job) applies to it. Waiting verdicts (WAIT_CAPACITY, a pending MIG
// change, cordoned or NotReady nodes) never are.
//
// Only the job's unbound pods are judged (GANG_TOO_LARGE: even they alone
// do not fit an empty cluster), and the caches keep no requests of bound
// pods, so nodes count as empty: both can only make a job look easier to
// place, never unplaceable. Nothing the engine decides hopeless depends on
// free capacity.

// unplaceablePods judges job j with its cached pods and returns, for each
// pod ("namespace/name") that can never be placed, the engine's reason.
func (c *Controller) unplaceablePods(ctx context.Context, j job, pods []*corev1.Pod) map[string]string {
	pods, err := c.judgedPods(ctx, j, pods)
	var res schedule.Result
	var w schedule.Workload
	ok := false
	if err == nil {
		res, w, ok, err = c.judge(ctx, j, pods, true)
	}
	if err != nil {
		c.log.Info("cannot judge whether the missing ranks can ever be placed; the gang deadline still applies", "job", decision.JobKey(j), "error", err.Error())
	}
	if err != nil || !ok {
		return nil
	}
	if _, settling := c.wd.Settling(res.Report); settling {
		return nil // a node just lost devices or changed readiness: the deadline still applies
	}
	return hopelessPods(res, w)
}

// judgePlacement is unplaceablePods over given nodes and pods. A node the
// engine's model refuses, or GPU labels it cannot read, leave nothing
// judged (an error): without them a pod could look unplaceable that is
// not. A pod it refuses is left out (its pod set only gets smaller).
func judgePlacement(e *schedule.Engine, nodes []corev1.Node, dra *draState, j job, pods []*corev1.Pod) (map[string]string, error) {
	res, w, ok, err := judgeJob(e, nodes, dra, j, pods, true)
	if err != nil || !ok {
		return nil, err
	}
	return hopelessPods(res, w), nil
}

// judgeJob is the one entry point of the schedule engine in the
// controller (the GANG_RANK_UNPLACEABLE rule and the Pending watchdog,
// pending.go): it models nodes and the job's pods as diagnose does and
// judges the job. With onlyUnbound only the pod sets that have unbound
// pods are judged, each as if all its pods were those (ok is false when
// there are none). dra is the DRA part of the cluster state (dra.go): a
// job whose devices come through DRA is judged on the published devices,
// or, where they are not known, not judged (DRA_NOT_JUDGED, never
// hopeless).
func judgeJob(e *schedule.Engine, nodes []corev1.Node, dra *draState, j job, pods []*corev1.Pod, onlyUnbound bool) (res schedule.Result, w schedule.Workload, ok bool, err error) {
	b := dra.builder()
	for i := range nodes {
		if err := b.AddNode(&nodes[i]); err != nil {
			return res, w, false, fmt.Errorf("node %s: %w", nodes[i].Name, err)
		}
	}
	w, ok, err = jobWorkload(b, dra, false, j, pods, onlyUnbound)
	if err != nil || !ok {
		return res, w, false, err
	}
	// Nodes whose GPU labels cannot be read: the engine's one policy.
	return e.Diagnose(e.NewCluster(b.Nodes()), w), w, true, nil
}

// judgeOn is judgeJob against a prepared cluster (the controller's
// incremental model, model.go): the job's bound pods are added to their
// nodes' usage as the full rebuild adds them. It returns that usage too.
func judgeOn(e *schedule.Engine, base *schedule.Cluster, dra *draState, j job, pods []*corev1.Pod, onlyUnbound bool) (res schedule.Result, w schedule.Workload, used map[string]schedule.Resources, ok bool, err error) {
	b := dra.builder()
	w, ok, err = jobWorkload(b, dra, true, j, pods, onlyUnbound)
	if err != nil || !ok {
		return res, w, nil, false, err
	}
	used = b.Usage()
	return e.Diagnose(base.WithUsed(used), w), w, used, true, nil
}

// jobWorkload adds the job's pods to b and builds its workload (see
// judgeJob for onlyUnbound). A workload with DRA pod sets is built again
// with the DRA objects (and the nodes, withNodes: b has none) where they
// are known, which judges those sets on the published devices.
func jobWorkload(b *cluster.Builder, dra *draState, withNodes bool, j job, pods []*corev1.Pod, onlyUnbound bool) (w schedule.Workload, ok bool, err error) {
	for _, p := range pods {
		_ = b.AddPod(p) // one it refuses is left out: its pod set only gets smaller
	}
	w, err = b.WorkloadFor(j)
	if err != nil {
		return w, false, err
	}
	if dra.judges(w) {
		known, err := dra.addTo(b, withNodes)
		if err != nil {
			return w, false, fmt.Errorf("DRA objects: %w", err)
		}
		if known {
			if w, err = b.WorkloadFor(j); err != nil {
				return w, false, err
			}
		}
	}
	if onlyUnbound {
		// Pod sets without an unbound pod would be judged from the pod
		// template, which the cache strips; bound pods stay where they are
		// even on nodes their pod set could no longer use (a taint added
		// since), so placing them again could only be wrong. The
		// scheduler's message is already in each rank's state.
		sets := w.PodSets[:0]
		for _, ps := range w.PodSets {
			if len(ps.Pods) > 0 {
				ps.Count, ps.Bound, ps.SchedulerMessage = len(ps.Pods), 0, ""
				sets = append(sets, ps)
			}
		}
		w.PodSets = sets
		if len(w.PodSets) == 0 {
			return w, false, nil
		}
	}
	return w, true, nil
}

// hopelessPods maps each pod of w that a fail finding of a hopeless result
// applies to onto the findings' rules and messages. A finding applies to a
// pod set when it names one of its pods (findings name at most 50) or one of
// an equal pod set's (the engine judges equal sets as one), and to every
// pod set when it names none (GANG_TOO_LARGE: the whole job).
func hopelessPods(res schedule.Result, w schedule.Workload) map[string]string {
	if !res.Hopeless {
		return nil
	}
	why := make([][]string, len(w.PodSets))
	for _, f := range res.Report.Findings {
		if f.Severity != verdict.SeverityFail {
			continue
		}
		named := map[string]bool{}
		for _, p := range f.Pods {
			named[p] = true
		}
		for i, ps := range w.PodSets {
			applies := len(f.Pods) == 0
			for _, p := range ps.Pods {
				if applies = applies || named[p]; applies {
					break
				}
			}
			if !applies {
				continue
			}
			for k := range w.PodSets {
				if k == i || sameShape(&w.PodSets[k], &ps) {
					why[k] = appendOnce(why[k], f.Rule+": "+f.Message)
				}
			}
		}
	}
	out := map[string]string{}
	for i, ps := range w.PodSets {
		if len(why[i]) == 0 {
			continue
		}
		reason := strings.Join(why[i], " ")
		for _, p := range ps.Pods {
			out[p] = reason
		}
	}
	return out
}

// sameShape: equal requests and placement rules, which the engine judges
// as one class.
func sameShape(a, b *schedule.PodSet) bool {
	return maps.Equal(a.Requests, b.Requests) && reflect.DeepEqual(a.Constraints, b.Constraints)
}

func appendOnce(xs []string, x string) []string {
	if slices.Contains(xs, x) {
		return xs
	}
	return append(xs, x)
}
