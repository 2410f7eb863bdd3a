package cluster

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
)

// draObjects holds what DRA allocation is judged on: the DeviceClasses,
// the devices drivers publish (ResourceSlices), and the claims and claim
// templates of the cluster (resource.k8s.io/v1). Objects of other
// versions are not read: their device layout differs.
type draObjects struct {
	classObjs map[string]*resourcev1.DeviceClass
	slices    []*resourcev1.ResourceSlice
	claims    map[string]*resourcev1.ResourceClaim         // namespace/name
	templates map[string]*resourcev1.ResourceClaimTemplate // namespace/name
	// rules: the DeviceTaintRules, whose taints the devices they select
	// carry as if their driver had put them (dra_rules.go).
	rules []*resourcev1.DeviceTaintRule
	// pools indexes slices by driver and pool (Pool); nil until asked
	// for, dropped when a slice is added.
	pools map[poolKey][]*resourcev1.ResourceSlice
	// pods: the bound, unfinished pods with resource claims, trimmed to
	// what their allocation is read from (dra_pods.go); podsByJob indexes
	// them by namespace/job name, nil until asked for, dropped when a pod
	// is added.
	pods      []*corev1.Pod
	podsByJob map[string][]*corev1.Pod
}

// AddResourceSlice records the devices a driver publishes in one slice.
func (b *Builder) AddResourceSlice(s *resourcev1.ResourceSlice) error {
	if s.Name == "" {
		return fmt.Errorf("metadata.name is empty")
	}
	if s.Spec.Driver == "" {
		return fmt.Errorf("resourceslice %s: spec.driver is empty", s.Name)
	}
	b.draJ = nil
	b.dra.slices = append(b.dra.slices, s)
	b.dra.pools = nil
	return nil
}

// AddResourceClaim records a claim: allocated claims hold their devices.
func (b *Builder) AddResourceClaim(c *resourcev1.ResourceClaim) error {
	if c.Name == "" {
		return fmt.Errorf("metadata.name is empty")
	}
	if b.dra.claims == nil {
		b.dra.claims = map[string]*resourcev1.ResourceClaim{}
	}
	b.draJ = nil
	b.dra.claims[c.Namespace+"/"+c.Name] = c
	return nil
}

// AddResourceClaimTemplate records a claim template, from which each pod
// that names it gets a claim of its own.
func (b *Builder) AddResourceClaimTemplate(t *resourcev1.ResourceClaimTemplate) error {
	if t.Name == "" {
		return fmt.Errorf("metadata.name is empty")
	}
	if b.dra.templates == nil {
		b.dra.templates = map[string]*resourcev1.ResourceClaimTemplate{}
	}
	b.draJ = nil
	b.dra.templates[t.Namespace+"/"+t.Name] = t
	return nil
}

// AddDeviceTaintRule records a DeviceTaintRule: the devices it selects
// are judged with its taint, as kube-scheduler allocates them.
func (b *Builder) AddDeviceTaintRule(r *resourcev1.DeviceTaintRule) error {
	if r.Name == "" {
		return fmt.Errorf("metadata.name is empty")
	}
	b.draJ = nil
	b.dra.rules = append(b.dra.rules, r)
	return nil
}

func (d *draObjects) addClass(dc *resourcev1.DeviceClass) {
	if d.classObjs == nil {
		d.classObjs = map[string]*resourcev1.DeviceClass{}
	}
	d.classObjs[dc.Name] = dc
}

// published: drivers publish devices in this input, so DRA pod sets can
// be judged on them.
func (d *draObjects) published() bool { return len(d.slices) > 0 }

// classLister serves the DeviceClasses to the allocator.
type classLister map[string]*resourcev1.DeviceClass

func (l classLister) List() ([]*resourcev1.DeviceClass, error) {
	out := make([]*resourcev1.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourcev1.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("deviceclass %q not found", name)
}

// draVersion is the one resource.k8s.io version whose slices, claims,
// claim templates and device taint rules are read.
const draVersion = "resource.k8s.io/v1"

// draKinds are the DRA kinds loadDRA reads (DeviceClass of any version
// is read by loadOne).
var draKinds = map[string]bool{"ResourceSlice": true, "ResourceClaim": true, "ResourceClaimTemplate": true, "DeviceTaintRule": true}

// loadDRA decodes one resource.k8s.io/v1 slice, claim, claim template or
// device taint rule.
func loadDRA(b *Builder, kind string, raw []byte) error {
	switch kind {
	case "ResourceSlice":
		var s resourcev1.ResourceSlice
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		return b.AddResourceSlice(&s)
	case "ResourceClaim":
		var c resourcev1.ResourceClaim
		if err := json.Unmarshal(raw, &c); err != nil {
			return err
		}
		return b.AddResourceClaim(&c)
	case "ResourceClaimTemplate":
		var t resourcev1.ResourceClaimTemplate
		if err := json.Unmarshal(raw, &t); err != nil {
			return err
		}
		return b.AddResourceClaimTemplate(&t)
	case "DeviceTaintRule":
		var r resourcev1.DeviceTaintRule
		if err := json.Unmarshal(raw, &r); err != nil {
			return err
		}
		if err := tombstoned(raw); err != nil {
			return err
		}
		return b.AddDeviceTaintRule(&r)
	}
	return fmt.Errorf("kind %s is not a DRA kind rankgate reads", kind)
}

// tombstoned refuses a DeviceTaintRule whose selector has the beta API's
// deviceClassName or CEL selectors: resource.k8s.io/v1 has neither (the
// API server refuses them), and reading the rule without them would
// taint every device of its driver and pool.
func tombstoned(raw []byte) error {
	var r struct {
		Spec struct {
			DeviceSelector map[string]json.RawMessage `json:"deviceSelector"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	for _, f := range []string{"deviceClassName", "selectors"} {
		if _, ok := r.Spec.DeviceSelector[f]; ok {
			return fmt.Errorf("spec.deviceSelector.%s is not a field of resource.k8s.io/v1 DeviceTaintRule (the beta API's, tombstoned since Kubernetes 1.35): select devices by driver, pool and device", f)
		}
	}
	return nil
}
