package cluster

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/rankgate/rankgate/preflight/schedule"
)

// Whether a pod's devices come through Dynamic Resource Allocation is
// decided here, for diagnose, the validating webhook and the Pending
// watchdog alike: a pod uses DRA when it has resource claims
// (spec.resourceClaims), or when one of its containers (init or app) asks
// for an extended resource that a DeviceClass maps (KEP-5004: the class's
// spec.extendedResourceName, or the implicit
// deviceclass.resource.kubernetes.io/<class> that every class has). Such
// a pod set carries schedule.PodSet.DRA, and the engine does not judge it
// from node allocatable (DRA_NOT_JUDGED).
//
// A DeviceClass that maps nvidia.com/gpu makes every pod asking for
// nvidia.com/gpu a DRA pod, even where some nodes still advertise
// nvidia.com/gpu from the device plugin: the scheduler may serve the
// request from either.

// DeviceClasses maps an extended resource name to the DeviceClass that
// serves it.
type DeviceClasses map[string]string

// add records a class's extended resource names. Two classes naming the
// same resource keep the first name in sort order (the scheduler picks the
// newer class; only the name in messages depends on it).
func (d DeviceClasses) add(dc *resourcev1.DeviceClass) {
	names := []string{resourcev1.ResourceDeviceClassPrefix + dc.Name}
	if r := dc.Spec.ExtendedResourceName; r != nil && *r != "" {
		names = append(names, *r)
	}
	for _, r := range names {
		if cur, ok := d[r]; !ok || dc.Name < cur {
			d[r] = dc.Name
		}
	}
}

// AddDeviceClass records the extended resources a DeviceClass maps. It
// may come before or after the pods that ask for them.
func (b *Builder) AddDeviceClass(dc *resourcev1.DeviceClass) error {
	if dc.Name == "" {
		return fmt.Errorf("metadata.name is empty")
	}
	if b.classes == nil {
		b.classes = DeviceClasses{}
	}
	b.classes.add(dc)
	b.dra.addClass(dc)
	b.draJ = nil
	return nil
}

// DeviceClasses returns the extended resources the added DeviceClasses map.
func (b *Builder) DeviceClasses() DeviceClasses { return b.classes }

// claimNames are the names of a pod's resource claims.
func claimNames(spec *corev1.PodSpec) []string {
	if len(spec.ResourceClaims) == 0 {
		return nil
	}
	out := make([]string, len(spec.ResourceClaims))
	for i := range spec.ResourceClaims {
		out[i] = spec.ResourceClaims[i].Name
	}
	return out
}

// viaDRA says how a pod with these resource claims and this effective
// request gets devices through DRA, or "" when it does not.
func (d DeviceClasses) viaDRA(claims []string, req schedule.Resources) string {
	var parts []string
	names := make([]string, 0, len(req))
	for r, v := range req {
		if v > 0 {
			names = append(names, r)
		}
	}
	sort.Strings(names)
	for _, r := range names {
		switch class, ok := d[r]; {
		case ok:
			parts = append(parts, r+" from DeviceClass "+class)
		case strings.HasPrefix(r, resourcev1.ResourceDeviceClassPrefix):
			// A class's implicit name, the class not in the input.
			parts = append(parts, r)
		}
	}
	if len(claims) > 0 {
		parts = append(parts, "resource claims "+strings.Join(claims, ", "))
	}
	return strings.Join(parts, " and ")
}

// BoundDRAPod is a pod with resource claims that the scheduler has bound
// (DRA allocates a pod's claims when it binds it) and that does not run
// yet: diagnose judges it from its allocation (DRAObjects) instead of
// treating it as no GPU pod.
type BoundDRAPod struct {
	Namespace, Name, Node string
	Phase                 corev1.PodPhase
	Claims                []string
	// Pod is the pod, trimmed to what its allocation is read from
	// (metadata, spec.nodeName and spec.resourceClaims, and its claim
	// statuses).
	Pod *corev1.Pod
}

// BoundDRAPodOf describes bound pod p, which uses resource claims (its
// own, or the one the scheduler made for its extended resources), with p
// trimmed.
func BoundDRAPodOf(p *corev1.Pod) BoundDRAPod {
	claims := claimNames(&p.Spec)
	if e := p.Status.ExtendedResourceClaimStatus; e != nil && e.ResourceClaimName != "" {
		claims = append(claims, e.ResourceClaimName+" (for its extended resources)")
	}
	return BoundDRAPod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Phase: p.Status.Phase, Claims: claims, Pod: trimDRAPod(p)}
}

func (b *Builder) addBoundDRA(p *corev1.Pod) {
	bp := BoundDRAPodOf(p)
	b.dra.pods = append(b.dra.pods, bp.Pod)
	b.dra.podsByJob = nil
	if p.Status.Phase == corev1.PodRunning {
		b.runningDRA++
		return
	}
	b.boundDRA = append(b.boundDRA, bp)
}

// BoundDRAPods lists the bound pods with resource claims that do not run
// yet, in the order they were added.
func (b *Builder) BoundDRAPods() []BoundDRAPod { return b.boundDRA }

// RunningDRAPods counts the bound pods with resource claims that run.
func (b *Builder) RunningDRAPods() int { return b.runningDRA }

// BoundDRAMessage says what diagnose knows of a bound pod whose devices
// come through DRA claims while its allocation cannot be judged yet:
// waiting says what for, as the DRA device source says it
// (devicesource.Rank.Waiting); empty when the claims hold no device the
// source judges.
func BoundDRAMessage(p BoundDRAPod, waiting string) string {
	phase := string(p.Phase)
	if phase == "" {
		phase = "unknown"
	}
	head := fmt.Sprintf("Pod %s/%s is bound to node %s (phase %s) and its devices come through DRA resource claims (%s)",
		p.Namespace, p.Name, p.Node, phase, strings.Join(p.Claims, ", "))
	if waiting == "" {
		return head + ", but they hold no GPU or MIG device that the devices' driver publishes (type gpu or mig): the pod's devices are not judged."
	}
	return head + ": " + waiting + ". Its devices are judged from its allocation once every claim is allocated and its devices are published in a ResourceSlice."
}
