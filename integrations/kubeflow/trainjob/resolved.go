package trainjob

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	jobsetapi "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobkind"
	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
)

// RuntimeOf names the runtime that j's pods come from: ok is false when
// j is not a TrainJob, or is one already resolved (Resolve).
func RuntimeOf(j jobkind.Job) (key RuntimeKey, ok bool, err error) {
	tj, isJob := j.(*job)
	if !isJob {
		return RuntimeKey{}, false, nil
	}
	key, err = tj.o.Spec.RuntimeRef.Key(tj.o.Namespace)
	return key, true, err
}

// Resolve is the TrainJob j seen with its runtime rt: its replica specs
// are the pods the Trainer would create (Derive), so that a TrainJob
// whose JobSet does not exist yet (suspended, or queued by Kueue) is
// judged by its real pods: the runtime's node template, node selectors
// and tolerations, the runtime's node count when the TrainJob sets none.
// The dataset and model initializers are left out (the trainer step
// starts after they complete); an MPI launcher is kept, as a pod that
// runs no rank. j stays what it is for everything else.
func Resolve(j jobkind.Job, rt *Runtime) (jobkind.Job, error) {
	tj, ok := j.(*job)
	if !ok {
		return nil, fmt.Errorf("%s %s/%s is not an unresolved TrainJob", j.Kind(), j.Namespace(), j.Name())
	}
	spec, err := Derive(tj.o, rt)
	if err != nil {
		return nil, fmt.Errorf("its pods from %s: %w", rt.Key(), err)
	}
	r := &resolved{job: tj, spec: spec}
	if r.rj(Node) == nil {
		return nil, fmt.Errorf("%s has no ReplicatedJob %q (the trainer's node step)", rt.Key(), Node)
	}
	return r, nil
}

type resolved struct {
	*job
	spec *jobsetapi.JobSetSpec
}

var _ jobkind.Job = (*resolved)(nil)

func (r *resolved) rj(name string) *jobsetapi.ReplicatedJob {
	for i := range r.spec.ReplicatedJobs {
		if r.spec.ReplicatedJobs[i].Name == name {
			return &r.spec.ReplicatedJobs[i]
		}
	}
	return nil
}

func initializer(rj *jobsetapi.ReplicatedJob) bool {
	switch rj.Template.Labels[jobset.LabelTrainJobAncestor] {
	case DatasetInitializer, ModelInitializer:
		return true
	}
	return false
}

func pods(rj *jobsetapi.ReplicatedJob) int32 {
	return rj.Replicas * ptr.Deref(rj.Template.Spec.Parallelism, 1)
}

func (r *resolved) ReplicaSpecs() []jobkind.ReplicaSpec {
	var out []jobkind.ReplicaSpec
	for i := range r.spec.ReplicatedJobs {
		rj := &r.spec.ReplicatedJobs[i]
		if initializer(rj) {
			continue
		}
		out = append(out, jobkind.ReplicaSpec{Type: rj.Name, Replicas: pods(rj), Template: &rj.Template.Spec.Template, RunsRanks: rj.Name == Node})
	}
	return out
}

// Templates: the node step's, whose containers run the ranks.
func (r *resolved) Templates() map[string]*corev1.PodTemplateSpec {
	return map[string]*corev1.PodTemplateSpec{Node: &r.rj(Node).Template.Spec.Template}
}

func (r *resolved) RankSlots() ([]jobkind.RankSlot, error) {
	return rankSlots(ptr.To(pods(r.rj(Node))))
}

func (r *resolved) Validate() error {
	for i := range r.spec.ReplicatedJobs {
		rj := &r.spec.ReplicatedJobs[i]
		if n := int64(rj.Replicas) * int64(ptr.Deref(rj.Template.Spec.Parallelism, 1)); n < 0 || n > jobkind.MaxReplicas {
			return fmt.Errorf("ReplicatedJob %s would run %d pods: want 0..%d", rj.Name, n, jobkind.MaxReplicas)
		}
	}
	_, err := r.RankSlots()
	return err
}
