package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
)

// The pod cache holds only pods with the job-name label, the label every
// operator puts on its replica pods. A pod the cache does not show is
// either too new for it or no rank: it is read from the API server once,
// and a pod read without the label is remembered (by UID), so that its
// further requests are refused without a read. Should it be labelled
// later, the cache shows it. Likewise the batch Job that controls a pod
// with the label (an MPIJob's launcher, or not) is read once.

// uidSet is a set of pod UIDs that holds at most max and forgets
// everything when full (the zero value holds maxNotRanks).
type uidSet struct {
	mu  sync.Mutex
	m   map[types.UID]struct{}
	max int
}

const maxNotRanks = 8192

func (s *uidSet) has(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[uid]
	return ok
}

func (s *uidSet) add(uid types.UID) { s.first(uid) }

// first adds uid and says whether it was not there yet.
func (s *uidSet) first(uid types.UID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[uid]; ok {
		return false
	}
	limit := s.max
	if limit == 0 {
		limit = maxNotRanks
	}
	if s.m == nil || len(s.m) >= limit {
		s.m = map[types.UID]struct{}{}
	}
	s.m[uid] = struct{}{}
	return true
}

func notARank(ns, name string) error {
	return gate.Errorf(gate.CodeNotARank, "pod %s/%s is not a rank: it has no %s label, which the Kubeflow operators put on every replica pod", ns, name, LabelJobName)
}

// batchOwners remembers, by batch Job UID, the MPIJob that controls the
// Job (an MPIJob's launcher) or that none does, so that a pod whose
// controller is a batch Job costs one read of that Job, not one per
// request. It forgets everything when full.
type batchOwners struct {
	mu sync.Mutex
	m  map[types.UID]batchOwner
}

type batchOwner struct {
	ref jobRef
	ok  bool
}

func (b *batchOwners) get(uid types.UID) (ref jobRef, ok, known bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, known := b.m[uid]
	return o.ref, o.ok, known
}

func (b *batchOwners) put(uid types.UID, ref jobRef, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil || len(b.m) >= maxNotRanks {
		b.m = map[types.UID]batchOwner{}
	}
	b.m[uid] = batchOwner{ref: ref, ok: ok}
}
