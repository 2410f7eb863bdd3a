// Package clustertest builds Node and Pod objects for tests, labelled the
// way NVIDIA GPU feature discovery and mig-manager label real nodes.
//
//	n := clustertest.MakeNode("gpu-1").Labels(fixtureLabels).
//		Allocatable("nvidia.com/mig-1g.10gb", "2").Obj()
//	p := clustertest.MakePod("w-0", "ml").Request("nvidia.com/gpu", "1").
//		Unschedulable("0/3 nodes are available: ...").Obj()
package clustertest

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// NodeWrapper builds a Node.
type NodeWrapper struct{ corev1.Node }

// MakeNode returns a Ready node with cpu, memory and pod capacity.
func MakeNode(name string) *NodeWrapper {
	w := &NodeWrapper{corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{},
			Allocatable: corev1.ResourceList{},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}}
	return w.Allocatable("cpu", "96").Allocatable("memory", "1Ti").Allocatable("pods", "110")
}

// Labels merges labels (e.g. a GFD label fixture).
func (w *NodeWrapper) Labels(m map[string]string) *NodeWrapper {
	for k, v := range m {
		w.ObjectMeta.Labels[k] = v
	}
	return w
}

// Label sets one label.
func (w *NodeWrapper) Label(k, v string) *NodeWrapper {
	w.ObjectMeta.Labels[k] = v
	return w
}

// Allocatable sets capacity and allocatable of a resource.
func (w *NodeWrapper) Allocatable(name, qty string) *NodeWrapper {
	q := resource.MustParse(qty)
	w.Status.Capacity[corev1.ResourceName(name)] = q
	w.Status.Allocatable[corev1.ResourceName(name)] = q
	return w
}

// Resources sets capacity and allocatable from `kubectl describe node`
// text (Capacity: and Allocatable: sections), as people post it.
func (w *NodeWrapper) Resources(r io.Reader) (*NodeWrapper, error) {
	var into corev1.ResourceList
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch line {
		case "Capacity:":
			into = w.Status.Capacity
			continue
		case "Allocatable:":
			into = w.Status.Allocatable
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok || into == nil {
			continue
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(v))
		if err != nil {
			return w, fmt.Errorf("%s: %w", line, err)
		}
		into[corev1.ResourceName(strings.TrimSpace(k))] = q
	}
	return w, sc.Err()
}

// Taint adds a taint.
func (w *NodeWrapper) Taint(key, value string, effect corev1.TaintEffect) *NodeWrapper {
	w.Spec.Taints = append(w.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	return w
}

// Cordon marks the node unschedulable.
func (w *NodeWrapper) Cordon() *NodeWrapper {
	w.Spec.Unschedulable = true
	return w
}

// NotReady sets the Ready condition to False.
func (w *NodeWrapper) NotReady() *NodeWrapper {
	w.Status.Conditions[0].Status = corev1.ConditionFalse
	return w
}

// Obj returns the node.
func (w *NodeWrapper) Obj() *corev1.Node { return &w.Node }

// PodWrapper builds a Pod.
type PodWrapper struct{ corev1.Pod }

// MakePod returns a pending, unbound pod with one container.
func MakePod(name, ns string) *PodWrapper {
	return &PodWrapper{corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "main", Image: "busybox",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}}
}

// Request sets a request (and, for extended resources, the limit).
func (w *PodWrapper) Request(name, qty string) *PodWrapper {
	q := resource.MustParse(qty)
	c := &w.Spec.Containers[0]
	c.Resources.Requests[corev1.ResourceName(name)] = q
	if name != "cpu" && name != "memory" {
		c.Resources.Limits[corev1.ResourceName(name)] = q
	}
	return w
}

// Node binds the pod to a node and marks it Running.
func (w *PodWrapper) Node(name string) *PodWrapper {
	w.Spec.NodeName = name
	w.Status.Phase = corev1.PodRunning
	return w
}

// Phase sets the pod phase.
func (w *PodWrapper) Phase(p corev1.PodPhase) *PodWrapper {
	w.Status.Phase = p
	return w
}

// Unschedulable sets PodScheduled=False with the scheduler's message.
func (w *PodWrapper) Unschedulable(msg string) *PodWrapper {
	w.Status.Conditions = append(w.Status.Conditions, corev1.PodCondition{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: msg,
	})
	return w
}

// OwnedBy sets a controller owner reference and the job-name and
// replica-type labels (the type in lower case). That is how the
// training-operator labels a PyTorchJob pod, less replica-index,
// operator-name and job-role; mpi-operator sets no replica-type on MPIJob
// pods: use OperatorPods for pods exactly as the operators create them.
func (w *PodWrapper) OwnedBy(apiVersion, kind, name, replicaType string) *PodWrapper {
	t := true
	w.OwnerReferences = append(w.OwnerReferences, metav1.OwnerReference{
		APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: &t,
	})
	w.ObjectMeta.Labels["training.kubeflow.org/job-name"] = name
	w.ObjectMeta.Labels["training.kubeflow.org/replica-type"] = strings.ToLower(replicaType)
	return w
}

// EditSpec edits the pod spec.
func (w *PodWrapper) EditSpec(f func(*corev1.PodSpec)) *PodWrapper {
	f(&w.Pod.Spec)
	return w
}

// Obj returns the pod.
func (w *PodWrapper) Obj() *corev1.Pod { return &w.Pod }
