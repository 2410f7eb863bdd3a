package validate

import (
	"context"
	"fmt"
	"slices"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/verdict"
)

// The claim checks read a job's resource claims (spec.resourceClaims of
// its pod templates: a ResourceClaimTemplate, from which each pod gets a
// claim of its own, or an existing ResourceClaim that the pods share)
// against the cluster's DeviceClasses and the devices drivers publish in
// ResourceSlices, with the scheduler's CEL (k8s.io/dynamic-resource-
// allocation). What is knowable before a pod exists:
//
//   - DRA_CLAIM_UNMATCHED: a request names a DeviceClass the cluster does
//     not have, or its selectors (with its class's) match none of the
//     published devices. A node an autoscaler adds may publish one, and a
//     class may be created later, so the check warns unless set to deny.
//     Where the placement check already refused or warned the job with
//     SHAPE_MISMATCH (the same judgement, with the allocator), an unmatched
//     request is not said twice.
//   - DRA_MIG_MAY_SPAN_GPUS: the job's ranks get two or more MIG devices,
//     and their claims cannot keep them on one physical GPU, which every
//     job the gate judges needs (the controller fails the gang with
//     GANG_MIG_SPANS_GPUS otherwise): several claims hold them (pods each
//     with a claim from a template, or a pod with several claims: a
//     claim's matchAttribute binds only its own devices), or one claim
//     holds several without a matchAttribute constraint on the devices'
//     parentUUID. It does not fire when every published device the
//     requests match sits on one GPU (a selector pinned to a parent).
//   - A claim template or claim the pods name that does not exist (yet):
//     its requests are not checked, and the job is admitted with a
//     DRA_NOT_JUDGED warning whatever the policies say: the template may
//     be created after the job.
//
// Without the DRA objects (not served, caches not synced) nothing is said.

// claimChecks runs the claim checks on j where its pods have resource
// claims and the DeviceClasses and DRA objects are known, adding their
// findings to fs; it returns the notes: claims the pods name that do not
// exist, or why the checks could not run.
func (h *handler) claimChecks(ctx context.Context, rd *reads, j kubeflow.Job, on func(string) bool, fs *[]verdict.Finding) []string {
	if h.objects == nil || h.classes == nil || (!on(verdict.RuleDRAClaimUnmatched) && !on(verdict.RuleDRAMIGMaySpanGPUs)) || !hasClaims(j) {
		return nil
	}
	classes, err := rd.deviceClasses()
	var o *DRAObjects
	if err == nil {
		o, err = rd.draObjects()
	}
	if err != nil {
		return []string{"rankgate: claim checks (DRA_CLAIM_UNMATCHED, DRA_MIG_MAY_SPAN_GPUS) skipped: " + clip(err.Error(), 150)}
	}
	if o == nil {
		return nil
	}
	found, missing := newClaimView(classes, o, j.Namespace(), h.cel).judgeClaims(ctx, j, on)
	// SHAPE_MISMATCH already names the requests no published device
	// serves, with the nearest devices.
	shape := slices.ContainsFunc(*fs, func(f verdict.Finding) bool { return f.Rule == verdict.RuleShapeMismatch })
	for _, f := range found {
		if !shape || f.Rule != verdict.RuleDRAClaimUnmatched {
			*fs = append(*fs, f)
		}
	}
	notes := make([]string, 0, len(missing))
	for _, f := range missing {
		notes = append(notes, warning(f))
	}
	return notes
}

// hasClaims: a replica that runs pods has resource claims.
func hasClaims(j kubeflow.Job) bool {
	for _, rs := range j.ReplicaSpecs() {
		if rs.Replicas > 0 && rs.Template != nil && len(rs.Template.Spec.ResourceClaims) > 0 {
			return true
		}
	}
	return false
}

// maxParents: knowing two physical GPUs a request's devices sit on is
// enough to know that they may be split.
const maxParents = 2

// pubDevice is a published device as CEL sees it.
type pubDevice struct {
	in     cel.Device
	parent string // parentUUID: a MIG device's physical GPU
}

// claimView is what the claim checks read, for one job's namespace.
type claimView struct {
	classes   map[string]*resourcev1.DeviceClass
	devices   []pubDevice
	templates map[string]*resourcev1.ResourceClaimTemplate
	claims    map[string]*resourcev1.ResourceClaim
	cache     *cel.Cache
}

func newClaimView(classes []resourcev1.DeviceClass, o *DRAObjects, ns string, cache *cel.Cache) *claimView {
	v := &claimView{classes: map[string]*resourcev1.DeviceClass{}, templates: map[string]*resourcev1.ResourceClaimTemplate{},
		claims: map[string]*resourcev1.ResourceClaim{}, cache: cache}
	for i := range classes {
		v.classes[classes[i].Name] = &classes[i]
	}
	for _, s := range o.Slices {
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			in := cel.Device{Driver: s.Spec.Driver, AllowMultipleAllocations: d.AllowMultipleAllocations, Attributes: d.Attributes, Capacity: d.Capacity}
			v.devices = append(v.devices, pubDevice{in: in, parent: attrString(d.Attributes, s.Spec.Driver, "parentUUID")})
		}
	}
	for _, t := range o.Templates {
		if t.Namespace == ns {
			v.templates[t.Name] = t
		}
	}
	for _, c := range o.Claims {
		if c.Namespace == ns {
			v.claims[c.Name] = c
		}
	}
	return v
}

// attrString reads a string attribute by its bare name (the driver's
// domain) or qualified with the driver's name.
func attrString(attrs map[resourcev1.QualifiedName]resourcev1.DeviceAttribute, driver, name string) string {
	for _, k := range []string{name, driver + "/" + name} {
		if a, ok := attrs[resourcev1.QualifiedName(k)]; ok && a.StringValue != nil {
			return *a.StringValue
		}
	}
	return ""
}

// podClaim is one of a rank replica's pod claims, resolved.
type podClaim struct {
	replica string
	pods    int32
	runs    bool   // the replica runs ranks
	name    string // the pod's name for the claim
	source  string // "ResourceClaimTemplate ns/x" or "ResourceClaim ns/x"
	shared  string // the ResourceClaim's name, when the pods share one
	spec    *resourcev1.ResourceClaimSpec
	// allocated: a shared claim the scheduler has allocated already.
	allocated bool
}

// podClaims resolves the claims of the replicas that run pods; missing
// are DRA_NOT_JUDGED findings for those that do not exist, one per claim
// template or claim.
func (v *claimView) podClaims(j kubeflow.Job) (out []podClaim, missing []verdict.Finding) {
	var absent []string
	users := map[string][]string{} // absent source -> "claim x of R pods"
	for _, rs := range j.ReplicaSpecs() {
		if rs.Replicas == 0 || rs.Template == nil {
			continue
		}
		for _, prc := range rs.Template.Spec.ResourceClaims {
			pc := podClaim{replica: rs.Type, pods: rs.Replicas, runs: rs.RunsRanks, name: prc.Name}
			kind, name := "ResourceClaimTemplate", ""
			switch {
			case prc.ResourceClaimTemplateName != nil:
				name = *prc.ResourceClaimTemplateName
				if t, ok := v.templates[name]; ok {
					pc.spec = &t.Spec.Spec
				}
			case prc.ResourceClaimName != nil:
				kind, name = "ResourceClaim", *prc.ResourceClaimName
				pc.shared = name
				if c, ok := v.claims[name]; ok {
					pc.spec, pc.allocated = &c.Spec, c.Status.Allocation != nil
				}
			default:
				continue
			}
			pc.source = kind + " " + j.Namespace() + "/" + name
			if pc.spec != nil {
				out = append(out, pc)
				continue
			}
			if users[pc.source] == nil {
				absent = append(absent, pc.source)
			}
			users[pc.source] = append(users[pc.source], fmt.Sprintf("claim %s of %s pods", pc.name, pc.replica))
		}
	}
	rule, _ := verdict.Lookup(verdict.RuleDRANotJudged)
	for _, src := range absent {
		missing = append(missing, verdict.Finding{
			Rule: rule.ID, Severity: verdict.SeverityWarn,
			Message: fmt.Sprintf("%s (%s) does not exist yet: its requests are not checked, and the pods stay Pending until it exists.",
				src, strings.Join(users[src], ", ")),
			Remediation: "create it in the job's namespace, or correct the name in the pod template",
		})
	}
	return out, missing
}

// alternative is one way a request may be served: its exact request, or
// one of its firstAvailable subrequests.
type alternative struct {
	class     string
	selectors []resourcev1.DeviceSelector
	count     int64 // 0: all matching devices
}

func alternatives(r *resourcev1.DeviceRequest) []alternative {
	mk := func(class string, sel []resourcev1.DeviceSelector, mode resourcev1.DeviceAllocationMode, n int64) alternative {
		if mode == resourcev1.DeviceAllocationModeAll {
			return alternative{class: class, selectors: sel}
		}
		return alternative{class: class, selectors: sel, count: max(n, 1)}
	}
	if e := r.Exactly; e != nil {
		return []alternative{mk(e.DeviceClassName, e.Selectors, e.AllocationMode, e.Count)}
	}
	out := make([]alternative, 0, len(r.FirstAvailable))
	for i := range r.FirstAvailable {
		s := &r.FirstAvailable[i]
		out = append(out, mk(s.DeviceClassName, s.Selectors, s.AllocationMode, s.Count))
	}
	return out
}

// match is what the published devices say of one alternative.
type match struct {
	// why is why it matches no device ("" when it matches one).
	why string
	// mig: the devices it matches are MIG devices; parents are the
	// physical GPUs they sit on (at most maxParents are looked for).
	mig     bool
	parents map[string]bool
}

// match evaluates an alternative's DeviceClass and selectors on the
// published devices, with the scheduler's CEL. It stops once the answer
// cannot change: at a matching device that is no MIG device, or once the
// matching MIG devices sit on maxParents GPUs.
func (v *claimView) match(ctx context.Context, a alternative) match {
	class, ok := v.classes[a.class]
	switch {
	case !ok:
		return match{why: fmt.Sprintf("names DeviceClass %s, which does not exist", a.class)}
	case len(v.devices) == 0:
		// No driver publishes devices (yet): nothing to match.
		return match{}
	}
	m := match{parents: map[string]bool{}}
	inClass, matched, full := 0, false, false
	var evalErr string
	for i := range v.devices {
		d := &v.devices[i]
		if ok, _ := v.passes(ctx, class.Spec.Selectors, d.in); !ok {
			continue
		}
		inClass++
		ok, err := v.passes(ctx, a.selectors, d.in)
		if err != "" && evalErr == "" {
			evalErr = err
		}
		if !ok {
			continue
		}
		matched = true
		if d.parent == "" {
			full = true
			break
		}
		if m.parents[d.parent] = true; len(m.parents) >= maxParents {
			break
		}
	}
	switch {
	case inClass == 0:
		m.why = fmt.Sprintf("matches no device: none of the %d published devices is of DeviceClass %s", len(v.devices), a.class)
	case !matched:
		m.why = fmt.Sprintf("matches none of the %d published devices of DeviceClass %s: selectors %s", inClass, a.class, selectorText(a.selectors))
		if evalErr != "" {
			m.why += " (" + clip(evalErr, 120) + ")"
		}
	}
	m.mig = matched && !full
	return m
}

// passes: every selector matches d. err is the first evaluation error
// (the allocator does not allocate a device whose selector fails).
func (v *claimView) passes(ctx context.Context, sel []resourcev1.DeviceSelector, d cel.Device) (bool, string) {
	for _, s := range sel {
		if s.CEL == nil {
			continue
		}
		prog := v.cache.GetOrCompile(s.CEL.Expression)
		if prog.Error != nil {
			return false, prog.Error.Error()
		}
		ok, _, err := prog.DeviceMatches(ctx, d)
		if err != nil {
			return false, err.Error()
		}
		if !ok {
			return false, ""
		}
	}
	return true, ""
}

func selectorText(sel []resourcev1.DeviceSelector) string {
	var out []string
	for _, s := range sel {
		if s.CEL != nil {
			out = append(out, strings.TrimSpace(s.CEL.Expression))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " && ")
}

// migRequest is a request of a claim that asks for MIG devices.
type migRequest struct {
	name    string
	count   int64 // 0: all matching devices
	parents map[string]bool
}

// claimMIG is what one of a job's pod claims asks of MIG devices.
type claimMIG struct {
	pc       podClaim
	requests []migRequest
	// constrained: a matchAttribute on parentUUID covers every MIG request.
	constrained bool
}

// devices counts the MIG devices of one claim; a request for all
// matching devices counts as two (more than one), and all says so.
func (c claimMIG) devices() (n int64, all bool) {
	for _, r := range c.requests {
		if r.count == 0 {
			n, all = n+2, true
			continue
		}
		n += r.count
	}
	return n, all
}

// judgeClaims runs the claim checks on j: unmatched requests, the MIG
// devices' claims, and the claims the pods name that do not exist.
func (v *claimView) judgeClaims(ctx context.Context, j kubeflow.Job, on func(string) bool) (fs, missing []verdict.Finding) {
	pcs, missing := v.podClaims(j)
	// A template or claim named by several replicas is matched, and
	// reported, once.
	type result struct {
		mr  *migRequest
		why string
	}
	done := map[string]*result{}
	var migs []claimMIG
	for _, pc := range pcs {
		cm := claimMIG{pc: pc}
		for i := range pc.spec.Devices.Requests {
			r := &pc.spec.Devices.Requests[i]
			key := pc.source + "\x00" + r.Name
			res, seen := done[key]
			if !seen {
				res = &result{}
				res.mr, res.why = v.request(ctx, r)
				done[key] = res
			}
			mr := res.mr
			if res.why != "" && !pc.allocated && !seen && on(verdict.RuleDRAClaimUnmatched) {
				fs = append(fs, unmatched(pc, r.Name, res.why))
			}
			if mr != nil && pc.runs {
				cm.requests = append(cm.requests, *mr)
			}
		}
		if len(cm.requests) > 0 {
			cm.constrained = parentConstrained(pc.spec, cm.requests)
			migs = append(migs, cm)
		}
	}
	if on(verdict.RuleDRAMIGMaySpanGPUs) {
		if f, ok := migSpan(migs); ok {
			fs = append(fs, f)
		}
	}
	return fs, missing
}

// request matches each alternative of r: why is set when none matches a
// device; the MIG request when the devices an alternative matches are MIG
// devices.
func (v *claimView) request(ctx context.Context, r *resourcev1.DeviceRequest) (*migRequest, string) {
	var whys []string
	var mr *migRequest
	for _, a := range alternatives(r) {
		m := v.match(ctx, a)
		if m.why != "" {
			whys = append(whys, m.why)
			continue
		}
		if !m.mig {
			continue
		}
		if mr == nil {
			mr = &migRequest{name: r.Name, count: a.count, parents: map[string]bool{}}
		}
		if a.count == 0 || mr.count == 0 {
			mr.count = 0 // all matching devices
		} else {
			mr.count = max(mr.count, a.count)
		}
		for p := range m.parents {
			mr.parents[p] = true
		}
	}
	if len(whys) == len(alternatives(r)) && len(whys) > 0 {
		return nil, strings.Join(whys, "; and ")
	}
	return mr, ""
}

func unmatched(pc podClaim, request, why string) verdict.Finding {
	rule, _ := verdict.Lookup(verdict.RuleDRAClaimUnmatched)
	return verdict.Finding{
		Rule: rule.ID, Severity: verdict.SeverityWarn,
		Message: fmt.Sprintf("%s request %s %s; the scheduler cannot allocate it (%s pods' claim %s).",
			pc.source, request, why, pc.replica, pc.name),
		Remediation: rule.Remediation,
	}
}

// parentConstrained: a matchAttribute constraint on a parentUUID
// attribute covers every MIG request of the claim (a constraint without
// requests covers them all).
func parentConstrained(spec *resourcev1.ResourceClaimSpec, reqs []migRequest) bool {
	for _, c := range spec.Devices.Constraints {
		if c.MatchAttribute == nil || !strings.HasSuffix(string(*c.MatchAttribute), "/parentUUID") {
			continue
		}
		covered := true
		for _, r := range reqs {
			covered = covered && (len(c.Requests) == 0 || containsRequest(c.Requests, r.name))
		}
		if covered {
			return true
		}
	}
	return false
}

// containsRequest: names holds the request, or one of its subrequests
// ("request/subrequest").
func containsRequest(names []string, request string) bool {
	for _, n := range names {
		if n == request || strings.HasPrefix(n, request+"/") {
			return true
		}
	}
	return false
}

// migSpan: DRA_MIG_MAY_SPAN_GPUS when the rank pods' MIG devices (two or
// more) come from claims that cannot keep them on one physical GPU.
func migSpan(migs []claimMIG) (verdict.Finding, bool) {
	// Pods of a replica each get their own claim from a template; a
	// shared claim is one claim for every pod that names it.
	holders, devices, all := int64(0), int64(0), false
	parents := map[string]bool{}
	var order, loose []string
	perPod := map[string][]string{} // claim and source -> replicas
	seen := map[string]bool{}
	for _, c := range migs {
		n, key := int64(c.pc.pods), fmt.Sprintf("claim %s from %s", c.pc.name, c.pc.source)
		if c.pc.shared != "" {
			if seen[c.pc.shared] {
				continue
			}
			seen[c.pc.shared], n, key = true, 1, "shared "+c.pc.source
			order = append(order, key)
		} else {
			if perPod[key] == nil {
				order = append(order, key)
			}
			perPod[key] = append(perPod[key], fmt.Sprintf("%s (%s)", c.pc.replica, plural(n, "pod")))
		}
		cn, call := c.devices()
		holders, devices, all = holders+n, devices+n*cn, all || call
		for _, r := range c.requests {
			for p := range r.parents {
				parents[p] = true
			}
		}
		if cn > 1 && !c.constrained {
			loose = append(loose, fmt.Sprintf("%s asks %s without a matchAttribute on parentUUID", key, deviceCount(cn, call)))
		}
	}
	if devices < 2 || len(parents) < 2 || (holders < 2 && len(loose) == 0) {
		return verdict.Finding{}, false
	}
	// Warnings are cut at 256 bytes: what and where first, why after.
	var lead []string
	if holders > 1 {
		for i, k := range order {
			if rs := perPod[k]; rs != nil {
				order[i] = k + " per pod of " + strings.Join(rs, ", ")
			}
		}
		lead = append(lead, fmt.Sprintf("%s in %d claims (%s)", deviceCount(devices, all), holders, strings.Join(order, "; ")))
	}
	lead = append(lead, loose...)
	rule, _ := verdict.Lookup(verdict.RuleDRAMIGMaySpanGPUs)
	return verdict.Finding{
		Rule: rule.ID, Severity: verdict.SeverityWarn,
		Message: fmt.Sprintf("%s: nothing keeps the ranks on one physical GPU. A matchAttribute binds only its own claim's devices, the published devices these requests match sit on several GPUs, and the gate fails the gang (%s) when ranks land on different ones.",
			strings.Join(lead, "; "), verdict.RuleGangMIGSpansGPUs),
		Remediation: rule.Remediation,
	}, true
}

func deviceCount(n int64, all bool) string {
	if all {
		return "several MIG devices"
	}
	return plural(n, "MIG device")
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
