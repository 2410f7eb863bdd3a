// Package kubeflow puts the Kubeflow training jobs rankgate supports behind
// one small interface (integrations/kubeflow/jobkind), so that diagnose,
// the webhooks and the controller handle them alike. Each kind is its own
// package, listed once in the registry (kinds.go):
//
//   - PyTorchJob, kubeflow.org/v1 (integrations/kubeflow/pytorchjob).
//   - MPIJob, kubeflow.org/v2beta1 (integrations/kubeflow/mpijob).
//   - TrainJob, trainer.kubeflow.org/v1alpha1 (integrations/kubeflow/trainjob).
//   - JobSet, jobset.x-k8s.io/v1alpha2 (integrations/kubeflow/jobset).
//
// Wrap a typed object with FromObject (or an unstructured one with
// FromUnstructured); the adapter reads and writes the object it wraps.
// RankPods counts a job's rank pods and RankOf maps a pod to its rank, the
// way the operators number them.
package kubeflow

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobkind"
	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
	"github.com/rankgate/rankgate/integrations/kubeflow/mpijob"
	"github.com/rankgate/rankgate/integrations/kubeflow/pytorchjob"
)

// GroupVersionKinds and resources of the supported jobs, for tests and
// callers that name one kind; code that handles every kind asks the
// registry (All, ByGVK, ByName).
var (
	PyTorchJobGVK = pytorchjob.GVK
	MPIJobGVK     = mpijob.GVK
	PyTorchJobGVR = pytorchjob.GVR
	MPIJobGVR     = mpijob.GVR
)

// Pod labels the operators put on the pods they create (see jobkind).
const (
	LabelJobName      = jobkind.LabelJobName
	LabelReplicaType  = jobkind.LabelReplicaType
	LabelReplicaIdx   = jobkind.LabelReplicaIdx
	LabelJobRole      = jobkind.LabelJobRole
	LabelOperatorName = jobkind.LabelOperatorName
	// The JobSet controller's labels: the JobSet's name and the pod's
	// ReplicatedJob (a TrainJob's JobSet has the TrainJob's name).
	LabelJobSetName    = jobset.LabelJobSetName
	LabelReplicatedJob = jobset.LabelReplicatedJob
)

// MaxReplicas bounds a replica count read from outside input: beyond it a
// value is taken for a typo, not a job.
const MaxReplicas = jobkind.MaxReplicas

// Object is a Kubernetes object with metadata (the same method set as
// controller-runtime's client.Object).
type Object = jobkind.Object

// Job is a Kubeflow training job: one object of a Kind.
type Job = jobkind.Job

// Kind is one supported job kind.
type Kind = jobkind.Kind

// ReplicaSpec is one replica type of a job.
type ReplicaSpec = jobkind.ReplicaSpec

// RankPods is the number of pods of a job that run ranks: the count the
// controller waits for. RankOf maps those pods onto 0..RankPods-1, and
// returns an error rather than a rank outside that range.
func RankPods(j Job) int {
	n := 0
	for _, r := range j.ReplicaSpecs() {
		if r.RunsRanks {
			n += int(r.Replicas)
		}
	}
	return n
}

// ReplicaTypeOf returns the pod's replica type as the job spells it
// (labels carry it in lower case), or "" if the job has no such type. It
// reads the label the job's operator sets: LabelReplicaType for a
// PyTorchJob; LabelJobRole for an MPIJob (LabelReplicaType if the pod has
// no LabelJobRole).
func ReplicaTypeOf(j Job, pod *corev1.Pod) string {
	return ReplicaTypeOfLabels(j, pod.Labels)
}

// ReplicaTypeOfLabels is ReplicaTypeOf for a pod's labels alone.
func ReplicaTypeOfLabels(j Job, labels map[string]string) string {
	v, _, _ := j.ReplicaTypeLabel(labels)
	if v == "" {
		return ""
	}
	for _, r := range j.ReplicaSpecs() {
		if strings.EqualFold(r.Type, v) {
			return r.Type
		}
	}
	return ""
}

// ErrNoRank is wrapped by the error RankOf and Rank return for a pod that
// exists by design but runs no rank: the launcher of an MPIJob without
// runLauncherAsWorker. Any other error means a pod or a spec that does not
// match what the operator creates.
var ErrNoRank = jobkind.ErrNoRank

// RankOf returns the rank of one of the job's pods, read from the labels
// its operator put on it (replica type and replica index), or an error
// that says what is wrong with the pod or the spec. A rank is the pod's
// place among the job's rank pods, 0..RankPods(j)-1 (for a PyTorchJob the
// RANK the training-operator gives it; for an MPIJob its line in the
// hostfile, so MPI ranks rank*slotsPerWorker and up). RankOf does not
// check that the pod belongs to j: see OwnsPod.
//
//   - PyTorchJob: Master 0 is rank 0; Worker i is rank i+1 when the spec
//     has a Master, else rank i.
//   - MPIJob: Worker i is rank i. With runLauncherAsWorker the launcher,
//     labelled index 0, is rank 0, and mpi-operator labels Worker i with
//     index i+1, which is its rank. Without it the launcher is no rank:
//     the error wraps ErrNoRank.
func RankOf(j Job, pod *corev1.Pod) (int, error) {
	if pod == nil {
		return 0, fmt.Errorf("%s: no pod", jobRef(j))
	}
	fail := func(format string, args ...any) (int, error) {
		return 0, fmt.Errorf("pod %s/%s of %s: %w", pod.Namespace, pod.Name, jobRef(j), fmt.Errorf(format, args...))
	}
	rt, key, missing := j.ReplicaTypeLabel(pod.Labels)
	if rt == "" {
		return fail("%w", missing)
	}
	slot, err := rankSlotOf(j, rt, key)
	if err != nil {
		return fail("%w", err)
	}
	i, err := j.ReplicaIndex(pod.Labels)
	if errors.Is(err, jobkind.ErrNoIndex) {
		return fail("the %s pod %w", slot.Type, err)
	}
	if err != nil {
		return fail("%w", err)
	}
	r, err := rankOfIndex(slot, i)
	if err != nil {
		return fail("%w", err)
	}
	return r, nil
}

// Rank returns the rank of the pod of the job with the given replica type
// (any case: pods carry it in lower case) and replica-index label value,
// by the rules of RankOf.
func Rank(j Job, replicaType string, index int) (int, error) {
	slot, err := rankSlotOf(j, replicaType, "")
	if err == nil {
		var r int
		if r, err = rankOfIndex(slot, index); err == nil {
			return r, nil
		}
	}
	return 0, fmt.Errorf("%s: %w", jobRef(j), err)
}

// rankOfIndex is the rank of the pod labelled index i in slot s.
func rankOfIndex(s jobkind.RankSlot, i int) (int, error) {
	if i < 0 {
		return 0, fmt.Errorf("%s index %d is negative", s.Type, i)
	}
	if i < s.First || i-s.First >= s.Count {
		if s.Count == 0 {
			return 0, fmt.Errorf("%s index %d, but the spec has 0 %s replicas", s.Type, i, s.Type)
		}
		return 0, fmt.Errorf("%s index %d is outside the spec's %d %s replica(s), indexes %d..%d%s: a pod left from an earlier, larger spec, or one not created by the operator",
			s.Type, i, s.Count, s.Type, s.First, s.First+s.Count-1, s.Note)
	}
	return s.Base + i - s.First, nil
}

// rankSlotOf finds the slot of a replica type (any case) read from the
// pod label key ("" if not from a pod), or says why there is none.
func rankSlotOf(j Job, replicaType, key string) (jobkind.RankSlot, error) {
	slots, err := j.RankSlots()
	if err != nil {
		return jobkind.RankSlot{}, err
	}
	for _, s := range slots {
		if strings.EqualFold(s.Type, replicaType) {
			if s.NoRank != nil {
				return jobkind.RankSlot{}, s.NoRank
			}
			return s, nil
		}
	}
	what := fmt.Sprintf("replica type %q", replicaType)
	if key != "" {
		what = fmt.Sprintf("label %s=%q", key, replicaType)
	}
	types := j.ReplicaTypes()
	for _, t := range types {
		if strings.EqualFold(t, replicaType) {
			return jobkind.RankSlot{}, fmt.Errorf("%s, but the spec has no %s replicas", what, t)
		}
	}
	return jobkind.RankSlot{}, fmt.Errorf("%s is not one of the %s replica types (%s)", what, j.Kind(), strings.Join(types, ", "))
}

func jobRef(j Job) string {
	return j.Kind() + " " + j.Namespace() + "/" + j.Name()
}
