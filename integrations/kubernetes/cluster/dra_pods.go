package cluster

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
)

// The devices of a bound pod with resource claims are known from its
// claims' allocations (integrations/kubernetes/devicesource/dra): the
// Builder keeps such pods, trimmed, and serves its claims and slices the
// way that source reads them (DRAObjects), so that diagnose judges a
// rank pod from its allocation as the controller does.

// trimDRAPod keeps of a bound pod what its allocation and its rank are
// read from: metadata without annotations and managed fields,
// spec.nodeName, spec.resourceClaims and the claim statuses.
func trimDRAPod(p *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, Labels: p.Labels,
			OwnerReferences: p.OwnerReferences, DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName, ResourceClaims: p.Spec.ResourceClaims},
		Status: corev1.PodStatus{
			Phase: p.Status.Phase, ResourceClaimStatuses: p.Status.ResourceClaimStatuses,
			ExtendedResourceClaimStatus: p.Status.ExtendedResourceClaimStatus,
		},
	}
}

// DRAPodsOf lists the bound, unfinished pods with resource claims of job
// j (running or not), trimmed as BoundDRAPod.Pod, in the order they were
// added. A pod belongs to j as it does for WorkloadFor: by its controller
// owner reference or its job-name (or JobSet-name) label.
func (b *Builder) DRAPodsOf(j kubeflow.Job) []*corev1.Pod {
	d := &b.dra
	if d.podsByJob == nil {
		d.podsByJob = map[string][]*corev1.Pod{}
		for _, p := range d.pods {
			if _, name := jobOf(p); name != "" {
				k := p.Namespace + "/" + name
				d.podsByJob[k] = append(d.podsByJob[k], p)
			}
		}
	}
	var out []*corev1.Pod
	for _, p := range d.podsByJob[j.Namespace()+"/"+j.Name()] {
		if kind, _ := jobOf(p); kind == "" || kind == j.Kind() {
			out = append(out, p)
		}
	}
	return out
}

// DRAObjects returns the ResourceClaims, ResourceSlices and
// DeviceTaintRules added, as the
// DRA device source reads them (its Objects interface). It reflects what
// is added later too.
func (b *Builder) DRAObjects() DRAObjects { return DRAObjects{d: &b.dra} }

// DRAObjects serves a Builder's claims and slices by name, and its
// DeviceTaintRules. Returned
// objects are the Builder's: read only.
type DRAObjects struct{ d *draObjects }

// Claim is ResourceClaim namespace/name; nil when there is none.
func (o DRAObjects) Claim(namespace, name string) *resourcev1.ResourceClaim {
	return o.d.claims[namespace+"/"+name]
}

// Pool is the ResourceSlices of driver's pool named pool, of every
// generation read.
func (o DRAObjects) Pool(driver, pool string) []*resourcev1.ResourceSlice {
	if o.d.pools == nil {
		o.d.pools = make(map[poolKey][]*resourcev1.ResourceSlice)
		for _, s := range o.d.slices {
			k := poolKey{s.Spec.Driver, s.Spec.Pool.Name}
			o.d.pools[k] = append(o.d.pools[k], s)
		}
	}
	return o.d.pools[poolKey{driver, pool}]
}

// TaintRules are the DeviceTaintRules added.
func (o DRAObjects) TaintRules() []*resourcev1.DeviceTaintRule { return o.d.rules }

// poolKey names a pool: its driver and its name.
type poolKey struct{ driver, pool string }

// LoadDRA adds the cluster's ResourceClaims, ResourceClaimTemplates,
// DeviceTaintRules and ResourceSlices alone (resource.k8s.io/v1), for judging one bound pod
// from its allocation; LoadCluster adds them with the rest.
func (l *Live) LoadDRA(ctx context.Context, b *Builder) error { return l.loadDRA(ctx, b) }
