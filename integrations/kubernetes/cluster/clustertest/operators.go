package clustertest

import (
	"fmt"
	"strconv"
	"strings"

	mpiv2 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	kftraining "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rankgate/rankgate/integrations/kubeflow"
)

// Pod labels of the operators, spelled out here rather than taken from
// the code under test.
const (
	labelOperatorName = "training.kubeflow.org/operator-name"
	labelJobName      = "training.kubeflow.org/job-name"
	labelReplicaType  = "training.kubeflow.org/replica-type"
	labelReplicaIndex = "training.kubeflow.org/replica-index"
	labelJobRole      = "training.kubeflow.org/job-role"
)

// OperatorPods returns the pods the job's operator creates for it, pending
// and unbound, named, labelled and owned exactly as the pinned operators
// do:
//
//   - PyTorchJob, training-operator v1.9.4 (pkg/controller.v1/common,
//     ReconcilePods, createNewPod, GenLabels, GenGeneralName;
//     pytorch IsMasterRole): pod <job>-<type>-<i> owned by the
//     PyTorchJob, labelled operator-name=pytorchjob-controller, job-name,
//     replica-type=<type in lower case>, replica-index=i, and
//     job-role=master on the Master (on Worker 0 when there is no Master).
//   - MPIJob, mpi-operator v0.8.0 (pkg/controller/mpi_job_controller.go,
//     newWorker, newLauncherJob, newLauncherPodTemplate, defaultLabels,
//     workerReplicaIndexLabel): worker pod <job>-worker-i owned by the
//     MPIJob, labelled operator-name=mpi-operator, job-name,
//     job-role=worker and replica-index=i, or i+1 with
//     runLauncherAsWorker; no replica-type. The launcher pod is created by
//     the Job controller from the batch/v1 Job <job>-launcher that the
//     MPIJob owns: it is owned by that Job (generated name
//     <job>-launcher-<suffix>, the Job controller's labels), labelled
//     job-role=launcher, and replica-index=0 only with
//     runLauncherAsWorker.
//
// Template labels are kept; the operator's labels win over them.
func OperatorPods(j kubeflow.Job) []*PodWrapper {
	switch o := j.Object().(type) {
	case *kftraining.PyTorchJob:
		return pytorchPods(o)
	case *mpiv2.MPIJob:
		return mpiPods(o)
	}
	panic(fmt.Sprintf("OperatorPods: %T is not a supported job", j.Object()))
}

func controllerRef(apiVersion, kind, name string, uid types.UID) metav1.OwnerReference {
	t := true
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: &t, BlockOwnerDeletion: &t}
}

func uidOf(o metav1.Object) types.UID {
	if o.GetUID() != "" {
		return o.GetUID()
	}
	return types.UID("uid-" + o.GetName())
}

func podFrom(name, ns string, tmpl *corev1.PodTemplateSpec, labels map[string]string, ref metav1.OwnerReference) *PodWrapper {
	w := MakePod(name, ns)
	w.Spec = *tmpl.Spec.DeepCopy()
	for k, v := range tmpl.Labels {
		w.ObjectMeta.Labels[k] = v
	}
	for k, v := range labels {
		w.ObjectMeta.Labels[k] = v
	}
	w.OwnerReferences = []metav1.OwnerReference{ref}
	return w
}

func pytorchPods(o *kftraining.PyTorchJob) []*PodWrapper {
	var out []*PodWrapper
	ref := controllerRef(kftraining.GroupVersion.String(), kftraining.PyTorchJobKind, o.Name, uidOf(o))
	_, hasMaster := o.Spec.PyTorchReplicaSpecs[kftraining.PyTorchJobReplicaTypeMaster]
	for _, t := range []kftraining.ReplicaType{kftraining.PyTorchJobReplicaTypeMaster, kftraining.PyTorchJobReplicaTypeWorker} {
		rs := o.Spec.PyTorchReplicaSpecs[t]
		if rs == nil {
			continue
		}
		n := int32(1)
		if rs.Replicas != nil {
			n = *rs.Replicas
		}
		rt := strings.ToLower(string(t))
		for i := 0; i < int(n); i++ {
			labels := map[string]string{
				labelOperatorName: "pytorchjob-controller", labelJobName: o.Name,
				labelReplicaType: rt, labelReplicaIndex: strconv.Itoa(i),
			}
			if (hasMaster && t == kftraining.PyTorchJobReplicaTypeMaster) || (!hasMaster && t == kftraining.PyTorchJobReplicaTypeWorker && i == 0) {
				labels[labelJobRole] = "master"
			}
			out = append(out, podFrom(fmt.Sprintf("%s-%s-%d", o.Name, rt, i), o.Namespace, &rs.Template, labels, ref))
		}
	}
	return out
}

func mpiPods(o *mpiv2.MPIJob) []*PodWrapper {
	var out []*PodWrapper
	asWorker := o.Spec.RunLauncherAsWorker != nil && *o.Spec.RunLauncherAsWorker
	defaults := func(role string) map[string]string {
		return map[string]string{labelOperatorName: "mpi-operator", labelJobName: o.Name, labelJobRole: role}
	}
	if l := o.Spec.MPIReplicaSpecs[mpiv2.MPIReplicaTypeLauncher]; l != nil {
		launcherJob := o.Name + "-launcher"
		jobUID := types.UID("uid-" + launcherJob)
		labels := defaults("launcher")
		if asWorker {
			labels[labelReplicaIndex] = "0"
		}
		// The Job controller's labels (batch/v1 Job defaulting).
		labels["batch.kubernetes.io/controller-uid"] = string(jobUID)
		labels["batch.kubernetes.io/job-name"] = launcherJob
		labels["controller-uid"] = string(jobUID)
		labels["job-name"] = launcherJob
		p := podFrom(launcherJob+"-x7k2p", o.Namespace, &l.Template, labels, controllerRef("batch/v1", "Job", launcherJob, jobUID))
		p.Spec.Hostname, p.Spec.Subdomain = launcherJob, o.Name
		out = append(out, p)
	}
	if w := o.Spec.MPIReplicaSpecs[mpiv2.MPIReplicaTypeWorker]; w != nil {
		ref := controllerRef(mpiv2.SchemeGroupVersion.String(), mpiv2.Kind, o.Name, uidOf(o))
		n := int32(0)
		if w.Replicas != nil {
			n = *w.Replicas
		}
		for i := 0; i < int(n); i++ {
			labels := defaults("worker")
			idx := i
			if asWorker {
				idx = i + 1
			}
			labels[labelReplicaIndex] = strconv.Itoa(idx)
			name := fmt.Sprintf("%s-worker-%d", o.Name, i)
			p := podFrom(name, o.Namespace, &w.Template, labels, ref)
			p.Spec.Hostname, p.Spec.Subdomain = name, o.Name
			out = append(out, p)
		}
	}
	return out
}
