package controller

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
)

// Anyone who may create pods in a namespace can create one with a job's
// labels and controller owner reference. Such a pod is not one of the
// job's: the operators name each replica's pod after the job, the replica
// type and the replica index, and create only the indexes the spec has.
// The Pending watchdog and the gang's missing ranks ignore a pod whose
// name and index do not fit (an unschedulable impostor would otherwise
// fail someone else's job), and the gate refuses its report.

// podFits says why p is not the pod j's operator creates for the replica
// its labels name (nil when it is): its replica index is within the
// spec's, and its name is the operator's name for that replica's pod
// (the job's kind says which: jobkind.Job.PodNameFits).
func podFits(j job, p *corev1.Pod) error {
	typ := kubeflow.ReplicaTypeOf(j, p)
	if typ == "" {
		return fmt.Errorf("its replica labels name none of the job's replica types")
	}
	if _, err := kubeflow.RankOf(j, p); err != nil && !errors.Is(err, kubeflow.ErrNoRank) {
		return err
	}
	return j.PodNameFits(p, typ)
}

// maxMisfits bounds the pods remembered as reported unexpected (by UID),
// so that each gets one log line and one Event.
const maxMisfits = 4096

// fittingPods keeps of pods those that fit j (podFits); each other one is
// logged and noted in a Warning Event on the job, once.
func (c *Controller) fittingPods(j job, pods []*corev1.Pod) []*corev1.Pod {
	out := pods[:0:0]
	for _, p := range pods {
		err := podFits(j, p)
		if err == nil {
			out = append(out, p)
			continue
		}
		if c.unexpected.first(p.UID) {
			c.log.Info("ignoring a pod that carries the job's labels and owner but is not one of its pods", "job", decision.JobKey(j), "pod", p.Name, "podUID", string(p.UID), "why", err.Error())
			c.rec.Eventf(j.Object(), p, corev1.EventTypeWarning, contract.ReasonUnexpectedPod, "Gate",
				"pod %s carries the job's labels and controller owner reference but is not a pod its operator creates (%v): rankgate ignores it", p.Name, err)
		}
	}
	return out
}
