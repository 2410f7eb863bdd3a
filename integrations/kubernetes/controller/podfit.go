package controller

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	mpiv2beta1 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
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
// spec's, and its name is the operator's name for that replica's pod:
// <job>-<type>-<index> (training-operator; mpi-operator's workers, whose
// index labels start at 1 with runLauncherAsWorker while their names
// start at 0), or <job>-launcher-<suffix> for the pod of the MPIJob
// launcher's batch Job <job>-launcher.
func podFits(j job, p *corev1.Pod) error {
	typ := kubeflow.ReplicaTypeOf(j, p)
	if typ == "" {
		return fmt.Errorf("its replica labels name none of the job's replica types")
	}
	if _, err := kubeflow.RankOf(j, p); err != nil && !errors.Is(err, kubeflow.ErrNoRank) {
		return err
	}
	lower := strings.ToLower(typ)
	if mj, ok := j.Object().(*mpiv2beta1.MPIJob); ok && typ == string(mpiv2beta1.MPIReplicaTypeLauncher) {
		prefix := mj.Name + "-launcher"
		ref := metav1.GetControllerOf(p)
		if !strings.HasPrefix(p.Name, prefix+"-") || ref == nil || ref.Kind != "Job" || ref.Name != prefix {
			return fmt.Errorf("mpi-operator's launcher pod is named %s-<suffix> and controlled by the Job %s", prefix, prefix)
		}
		return nil
	}
	idx, err := strconv.Atoi(p.Labels[LabelReplicaIndex])
	if err != nil {
		return fmt.Errorf("label %s=%q is not a replica index", LabelReplicaIndex, p.Labels[LabelReplicaIndex])
	}
	if mj, ok := j.Object().(*mpiv2beta1.MPIJob); ok && mj.Spec.RunLauncherAsWorker != nil && *mj.Spec.RunLauncherAsWorker {
		idx-- // mpi-operator labels Worker i with index i+1 when the launcher is rank 0
	}
	if want := fmt.Sprintf("%s-%s-%d", j.Name(), lower, idx); p.Name != want {
		return fmt.Errorf("the operator names the pod of %s %s %s, not %s", typ, p.Labels[LabelReplicaIndex], want, p.Name)
	}
	return nil
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
			c.log.Info("ignoring a pod that carries the job's labels and owner but is not one of its pods", "job", jobKey(j), "pod", p.Name, "podUID", string(p.UID), "why", err.Error())
			c.rec.Eventf(j.Object(), p, corev1.EventTypeWarning, contract.ReasonUnexpectedPod, "Gate",
				"pod %s carries the job's labels and controller owner reference but is not a pod its operator creates (%v): rankgate ignores it", p.Name, err)
		}
	}
	return out
}
