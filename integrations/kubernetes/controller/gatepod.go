package controller

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	gateserver "github.com/rankgate/rankgate/integrations/kubernetes/gate/server"
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

// reportingPod reads the pod id speaks for: from the cache, else (not
// there yet, or an older pod of the same name there) from the API server,
// unless the pod was read before and had no job-name label. A pod without
// that label is no rank.
func (c *Controller) reportingPod(ctx context.Context, id gateserver.Identity) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	key := types.NamespacedName{Namespace: id.Namespace, Name: id.Pod}
	err := c.client.Get(ctx, key, pod)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, gate.Errorf(gate.CodeUnavailable, "reading pod %s/%s: %v", id.Namespace, id.Pod, err)
	}
	if err != nil || string(pod.UID) != id.PodUID {
		if c.notRanks.has(types.UID(id.PodUID)) {
			return nil, notARank(id.Namespace, id.Pod)
		}
		if err := c.api.Get(ctx, key, pod); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, gate.Errorf(gate.CodeForbidden, "pod %s/%s does not exist", id.Namespace, id.Pod)
			}
			return nil, gate.Errorf(gate.CodeUnavailable, "reading pod %s/%s: %v", id.Namespace, id.Pod, err)
		}
	}
	if string(pod.UID) != id.PodUID {
		return nil, gate.Errorf(gate.CodeForbidden, "the token was issued to an earlier pod named %s/%s (uid %s, now %s)", id.Namespace, id.Pod, id.PodUID, pod.UID)
	}
	if pod.Labels[LabelJobName] == "" {
		c.notRanks.add(pod.UID)
		return nil, notARank(id.Namespace, id.Pod)
	}
	return pod, nil
}

func notARank(ns, name string) error {
	return gate.Errorf(gate.CodeNotARank, "pod %s/%s is not a rank: it has no %s label, which the Kubeflow operators put on every replica pod", ns, name, LabelJobName)
}

// refuseUnexpected refuses the report of a rank's pod that does not fit
// the job's spec (podFits): it must not decide the gang. A rank another
// pod already holds is refused as a second claim (refuseClaim).
func (c *Controller) refuseUnexpected(g *gang, r rankOf) error {
	why := podFits(r.job, r.pod)
	if why == nil {
		return nil
	}
	if h, held := g.HolderOf(r.rank); held && h.UID != string(r.pod.UID) {
		return c.refuseClaim(g, r, &h)
	}
	msg := fmt.Sprintf("pod %s (uid %s) claims rank %d of %s but is not a pod its operator creates (%v): its report is refused", r.pod.Name, r.pod.UID, r.rank, g.Key(), why)
	if c.unexpected.first(r.pod.UID) {
		c.log.Info("refused the report of a pod that is not one of the job's", "job", g.Key(), "rank", r.rank, "pod", r.pod.Name, "podUID", string(r.pod.UID), "why", why.Error())
		c.rec.Eventf(r.job.Object(), r.pod, corev1.EventTypeWarning, contract.ReasonUnexpectedPod, "Gate", "%s", msg)
	}
	return gate.Errorf(gate.CodeForbidden, "%s", msg)
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
