package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
)

// The pod cache keeps of an unbound pod its effective request and a
// fingerprint of its placement rules, not the rules (cache.go): a pod's
// node selector, affinity and tolerations have no size bound a cache could
// afford for every pod that carries a job-name label. The schedule engine
// judges each replica type of a job by one unbound pod of that type
// (cluster.Builder.WorkloadFor), so the watchdog reads the rules of that
// one pod from the API server when it judges the job, and remembers them
// for as long as the pod keeps the same fingerprint.

// placementFingerprint is a fixed-size digest of the placement rules the
// schedule engine reads of a pod (cluster.ConstraintsOf, without the node
// name) and of its resource claims.
func placementFingerprint(spec *corev1.PodSpec) string {
	c := cluster.ConstraintsOf(spec)
	c.NodeName = ""
	b, err := json.Marshal(struct {
		C      any
		Claims []corev1.PodResourceClaim
	}{c, spec.ResourceClaims}) // maps marshal in key order
	if err != nil {
		return "unreadable"
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// placementRules is what ConstraintsOf reads of a pod's spec, and its
// resource claims (whether its devices come through DRA: cluster.Builder).
func placementRules(in *corev1.PodSpec) *corev1.PodSpec {
	out := &corev1.PodSpec{NodeSelector: in.NodeSelector, Tolerations: in.Tolerations, ResourceClaims: in.ResourceClaims}
	if a := in.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		out.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution}}
	}
	return out
}

// ruleCount is the number of entries of a pod's placement rules.
func ruleCount(s *corev1.PodSpec) int {
	n := len(s.NodeSelector) + len(s.Tolerations) + len(s.ResourceClaims)
	if s.Affinity != nil {
		for _, t := range s.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			n += 1 + len(t.MatchExpressions) + len(t.MatchFields)
			for _, r := range t.MatchExpressions {
				n += len(r.Values)
			}
		}
	}
	return n
}

// placementMemo remembers the placement rules read of sample pods, by pod
// UID and fingerprint; it forgets everything when full, and never keeps
// rules larger than maxMemoRules entries.
type placementMemo struct {
	mu sync.Mutex
	m  map[string]*corev1.PodSpec
}

const (
	maxMemoPods  = 1024
	maxMemoRules = 256
)

func (m *placementMemo) get(key string) *corev1.PodSpec {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m[key]
}

func (m *placementMemo) put(key string, s *corev1.PodSpec) {
	if ruleCount(s) > maxMemoRules {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil || len(m.m) >= maxMemoPods {
		m.m = map[string]*corev1.PodSpec{}
	}
	m.m[key] = s
}

// judgedPods prepares a job's cached pods for the schedule engine: the
// pods that fit the job (fittingPods), the first unbound pod of each
// replica type (by name) in front and with its placement rules
// (withPlacement), for WorkloadFor judges each type by its first unbound
// pod.
func (c *Controller) judgedPods(ctx context.Context, j job, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	fit := c.fittingPods(j, pods)
	slices.SortFunc(fit, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	sampled := map[string]bool{}
	var samples, rest []*corev1.Pod
	for _, p := range fit {
		typ := kubeflow.ReplicaTypeOf(j, p)
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || sampled[typ] {
			rest = append(rest, p)
			continue
		}
		s, err := c.withPlacement(ctx, p)
		if err != nil {
			return nil, err
		}
		if s != nil {
			sampled[typ] = true
			samples = append(samples, s)
		}
	}
	return append(samples, rest...), nil
}

// withPlacement returns cached pod p with its placement rules: from the
// memo, else read from the API server; nil when the pod is gone. A pod
// from a cache that keeps whole pods is returned as it is.
func (c *Controller) withPlacement(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	fp, trimmed := p.Annotations[annoPlacement]
	if !trimmed {
		return p, nil
	}
	key := string(p.UID) + "/" + fp
	rules := c.placements.get(key)
	if rules == nil {
		full := &corev1.Pod{}
		if err := c.api.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, full); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("reading the placement rules of pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		if full.UID != p.UID {
			return nil, nil
		}
		rules = placementRules(&full.Spec)
		if placementFingerprint(&full.Spec) == fp {
			c.placements.put(key, rules)
		}
	}
	q := *p
	q.Spec.NodeSelector, q.Spec.Affinity, q.Spec.Tolerations, q.Spec.ResourceClaims = rules.NodeSelector, rules.Affinity, rules.Tolerations, rules.ResourceClaims
	return &q, nil
}
