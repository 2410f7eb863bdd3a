package controller

import (
	"encoding/json"
	"sync"
	"weak"

	mpiv2beta1 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	corev1 "k8s.io/api/core/v1"
)

// sharedTable keeps one read-only copy of equal values for the objects in
// the informer caches (cached objects are never written; reads get deep
// copies). Entries are weak: a value no cached object holds any more is
// collected.
type sharedTable[T any] struct {
	mu    sync.Mutex
	m     map[string]weak.Pointer[T]
	sweep int
}

// share returns the copy held for key, or v, which becomes that copy.
func (s *sharedTable[T]) share(key string, v *T) *T {
	return s.shareFunc(key, func() *T { return v })
}

// shareFunc returns the copy held for key, or makes it (only then).
func (s *sharedTable[T]) shareFunc(key string, build func() *T) *T {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.m[key].Value(); p != nil {
		return p
	}
	v := build()
	if s.m == nil {
		s.m = map[string]weak.Pointer[T]{}
	}
	s.m[key] = weak.Make(v)
	if len(s.m) > s.sweep {
		for k, p := range s.m {
			if p.Value() == nil {
				delete(s.m, k)
			}
		}
		s.sweep = 2*len(s.m) + 64
	}
	return v
}

// A job's replica spec keeps, once its pod template is stripped, its
// replicas and restart policy; its type still has room for a template (896
// bytes): equal specs are shared (most jobs' Masters are alike, as are
// Workers of one size).
var (
	pytorchSpecs sharedTable[kubeflowv1.ReplicaSpec]
	mpiSpecs     sharedTable[mpiv2beta1.ReplicaSpec]
)

func stripPyTorchJob(j *kubeflowv1.PyTorchJob) {
	for t, s := range j.Spec.PyTorchReplicaSpecs {
		if s != nil {
			s.Template = corev1.PodTemplateSpec{}
			j.Spec.PyTorchReplicaSpecs[t] = shareSpec(&pytorchSpecs, s)
		}
	}
}

func stripMPIJob(j *mpiv2beta1.MPIJob) {
	for t, s := range j.Spec.MPIReplicaSpecs {
		if s != nil {
			s.Template = corev1.PodTemplateSpec{}
			j.Spec.MPIReplicaSpecs[t] = shareSpec(&mpiSpecs, s)
		}
	}
}

func shareSpec[T any](table *sharedTable[T], s *T) *T {
	key, err := json.Marshal(s)
	if err != nil {
		return s
	}
	return table.share(string(key), s)
}
