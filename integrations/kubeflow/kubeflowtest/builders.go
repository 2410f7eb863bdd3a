// Package kubeflowtest builds PyTorchJob and MPIJob objects for tests:
//
//	job := kubeflowtest.MakePyTorchJob("train", "ml").Master().Workers(3).
//		Request(corev1.ResourceName("nvidia.com/mig-1g.10gb"), "1").Obj()
package kubeflowtest

import (
	mpiv2 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	kftraining "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func container(name, image string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{
			Name: name, Image: image,
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}},
		}},
	}}
}

func setRequest(t *corev1.PodTemplateSpec, name corev1.ResourceName, qty string) {
	q := resource.MustParse(qty)
	c := &t.Spec.Containers[0]
	c.Resources.Requests[name] = q
	// Extended resources need limits equal to requests.
	if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
		c.Resources.Limits[name] = q
	}
}

// PyTorchJobWrapper builds a PyTorchJob.
type PyTorchJobWrapper struct{ kftraining.PyTorchJob }

// MakePyTorchJob returns a PyTorchJob with one Worker running a pytorch
// container and no requests.
func MakePyTorchJob(name, ns string) *PyTorchJobWrapper {
	w := &PyTorchJobWrapper{kftraining.PyTorchJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "kubeflow.org/v1", Kind: kftraining.PyTorchJobKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
		Spec: kftraining.PyTorchJobSpec{PyTorchReplicaSpecs: map[kftraining.ReplicaType]*kftraining.ReplicaSpec{
			kftraining.PyTorchJobReplicaTypeWorker: {Replicas: ptr(int32(1)), Template: container("pytorch", "pytorch/pytorch:2.7")},
		}},
	}}
	return w
}

// Master adds a Master replica with the Worker's template.
func (w *PyTorchJobWrapper) Master() *PyTorchJobWrapper {
	worker := w.Spec.PyTorchReplicaSpecs[kftraining.PyTorchJobReplicaTypeWorker]
	w.Spec.PyTorchReplicaSpecs[kftraining.PyTorchJobReplicaTypeMaster] = &kftraining.ReplicaSpec{
		Replicas: ptr(int32(1)), Template: *worker.Template.DeepCopy(),
	}
	return w
}

// Workers sets the Worker replica count.
func (w *PyTorchJobWrapper) Workers(n int32) *PyTorchJobWrapper {
	w.Spec.PyTorchReplicaSpecs[kftraining.PyTorchJobReplicaTypeWorker].Replicas = ptr(n)
	return w
}

// Request sets a request (and limit) on the first container of every
// replica type.
func (w *PyTorchJobWrapper) Request(name corev1.ResourceName, qty string) *PyTorchJobWrapper {
	for _, r := range w.Spec.PyTorchReplicaSpecs {
		setRequest(&r.Template, name, qty)
	}
	return w
}

// PodSpec edits the pod template of every replica type.
func (w *PyTorchJobWrapper) PodSpec(f func(*corev1.PodSpec)) *PyTorchJobWrapper {
	for _, r := range w.Spec.PyTorchReplicaSpecs {
		f(&r.Template.Spec)
	}
	return w
}

// Suspend sets spec.runPolicy.suspend.
func (w *PyTorchJobWrapper) Suspend(v bool) *PyTorchJobWrapper {
	w.Spec.RunPolicy.Suspend = ptr(v)
	return w
}

// Obj returns the job.
func (w *PyTorchJobWrapper) Obj() *kftraining.PyTorchJob { return &w.PyTorchJob }

// MPIJobWrapper builds an MPIJob.
type MPIJobWrapper struct{ mpiv2.MPIJob }

// MakeMPIJob returns an MPIJob with one Launcher (no requests) and one
// Worker.
func MakeMPIJob(name, ns string) *MPIJobWrapper {
	return &MPIJobWrapper{mpiv2.MPIJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "kubeflow.org/v2beta1", Kind: mpiv2.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
		Spec: mpiv2.MPIJobSpec{
			SlotsPerWorker: ptr(int32(1)),
			MPIReplicaSpecs: map[mpiv2.MPIReplicaType]*mpiv2.ReplicaSpec{
				mpiv2.MPIReplicaTypeLauncher: {Replicas: ptr(int32(1)), Template: container("launcher", "mpioperator/openmpi:0.8.0")},
				mpiv2.MPIReplicaTypeWorker:   {Replicas: ptr(int32(1)), Template: container("worker", "mpioperator/openmpi:0.8.0")},
			},
		},
	}}
}

// Workers sets the Worker replica count.
func (w *MPIJobWrapper) Workers(n int32) *MPIJobWrapper {
	w.Spec.MPIReplicaSpecs[mpiv2.MPIReplicaTypeWorker].Replicas = ptr(n)
	return w
}

// SlotsPerWorker sets spec.slotsPerWorker.
func (w *MPIJobWrapper) SlotsPerWorker(n int32) *MPIJobWrapper {
	w.Spec.SlotsPerWorker = ptr(n)
	return w
}

// RunLauncherAsWorker sets spec.runLauncherAsWorker.
func (w *MPIJobWrapper) RunLauncherAsWorker() *MPIJobWrapper {
	w.Spec.RunLauncherAsWorker = ptr(true)
	return w
}

// WorkerRequest sets a request (and limit) on the Worker container.
func (w *MPIJobWrapper) WorkerRequest(name corev1.ResourceName, qty string) *MPIJobWrapper {
	setRequest(&w.Spec.MPIReplicaSpecs[mpiv2.MPIReplicaTypeWorker].Template, name, qty)
	return w
}

// LauncherRequest sets a request (and limit) on the Launcher container.
func (w *MPIJobWrapper) LauncherRequest(name corev1.ResourceName, qty string) *MPIJobWrapper {
	setRequest(&w.Spec.MPIReplicaSpecs[mpiv2.MPIReplicaTypeLauncher].Template, name, qty)
	return w
}

// Suspend sets spec.runPolicy.suspend.
func (w *MPIJobWrapper) Suspend(v bool) *MPIJobWrapper {
	w.Spec.RunPolicy.Suspend = ptr(v)
	return w
}

// Obj returns the job.
func (w *MPIJobWrapper) Obj() *mpiv2.MPIJob { return &w.MPIJob }

func ptr[T any](v T) *T { return &v }
