// Package webhook is the controller's mutating admission webhook: into
// every replica template of an opted-in PyTorchJob (kubeflow.org/v1) or
// MPIJob (kubeflow.org/v2beta1) that requests GPUs or MIG devices it adds
// the `rankgate init` init container, with what it needs: the same GPU
// requests as the trainer, the downward-API identity, a projected
// service-account token for the gate, the gate's address and CA.
//
// The handler works on the object's JSON, not on the operators' Go types,
// so that fields it does not know survive and the patch holds only what it
// adds. It is idempotent: a template that already has a container named
// InitName, or whose init container runs `rankgate init`, is left as it is.
package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/launchergate"
	"github.com/rankgate/rankgate/topology"
)

// Path is where the controller's webhook server serves the mutating webhook.
const Path = "/mutate-kubeflow-jobs"

// Names the webhook gives what it adds to a pod template; a template that
// already has InitName is left as it is.
const (
	InitName        = "rankgate-init"
	TokenVolume     = "rankgate-token"
	CAVolume        = "rankgate-ca"
	TokenMountPath  = "/var/run/secrets/rankgate"
	CAMountPath     = "/var/run/rankgate"
	CAConfigMapName = "rankgate-ca" // key CAKey: the gate's CA bundle, kept by the controller
	CAKey           = "ca.crt"
	TerminationLog  = "/dev/termination-log"
	// NodeBinary is the node build in the rankgate image (no client-go).
	NodeBinary = "/usr/local/bin/rankgate-node"

	keyGate        = gate.KeyGate
	keyGangTimeout = gate.KeyGangTimeout
	tokenSeconds   = 3600
	// initMargin: the init container's --timeout is the gang timeout plus
	// this, so that the gate's verdict (or deadline) comes first.
	initMargin = 5 * time.Minute
)

// Options configure the injected init container.
type Options struct {
	// Image of the init container: the controller's own (required).
	Image string
	// GateURL is the gate's address, https://HOST:PORT (required).
	GateURL string
	// Audience of the projected token (default "rankgate").
	Audience string
	// GangTimeout is the controller's --gang-timeout (default 10m); a job's
	// rankgate.io/gang-timeout annotation overrides it.
	GangTimeout time.Duration
	// EnsureCA, if set, is called with the job's namespace before the
	// answer, so that the CA ConfigMap the pods mount exists there. Its
	// error is logged by the caller's admission warnings, not refused.
	EnsureCA func(ctx context.Context, namespace string) error
	// LauncherGate, if set, wraps the launcher of an MPIJob labelled or
	// annotated rankgate.io/launcher-gate=enabled in `rankgate launch
	// --gang` (launchergate.Wrap); nil leaves launchers alone.
	LauncherGate *launchergate.Options
}

// Mutator is the admission.Handler of Path.
type Mutator struct{ o Options }

// NewMutator returns the mutating handler.
func NewMutator(o Options) (*Mutator, error) {
	if o.Image == "" {
		return nil, fmt.Errorf("webhook: no init-container image")
	}
	if !strings.HasPrefix(o.GateURL, "https://") {
		return nil, fmt.Errorf("webhook: gate URL %q: want https://HOST:PORT", o.GateURL)
	}
	if o.Audience == "" {
		o.Audience = "rankgate"
	}
	if o.GangTimeout <= 0 {
		o.GangTimeout = 10 * time.Minute
	}
	return &Mutator{o: o}, nil
}

// Handle implements admission.Handler. Only creates are mutated: a job
// that exists is never rewritten under itself (its pods may be running
// from the templates it has), and an update never gains an init container
// that the controller's own patch would then carry (the shipped
// ValidatingAdmissionPolicy lets the controller change only
// spec.runPolicy.suspend and rankgate.io/ annotations). A job created
// before its namespace was opted in, or while no replica answered, keeps
// its templates: the Pending watchdog still judges it; re-create it to
// gate its ranks.
func (m *Mutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	k, ok := kubeflow.ByName(req.Kind.Kind)
	if !ok || req.Kind.Group != k.GVK().Group {
		return admission.Allowed("not a " + kubeflow.KindList("or"))
	}
	var obj map[string]any
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	changed, err := m.Mutate(obj, k)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if !changed {
		return admission.Allowed("")
	}
	var warnings []string
	if m.o.EnsureCA != nil {
		if err := m.o.EnsureCA(ctx, req.Namespace); err != nil {
			warnings = append(warnings, fmt.Sprintf("rankgate: the gate's CA (ConfigMap %s) is not yet in namespace %s: %v; the rank pods wait for it", CAConfigMapName, req.Namespace, err))
		}
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	resp := admission.PatchResponseFromRaw(req.Object.Raw, out)
	resp.Warnings = warnings
	return resp
}

// Mutate adds the init container to every GPU template of a job's JSON
// object of kind k (replica specs under spec.<k.ReplicaSpecsField()>); it
// reports whether anything changed. A job opted out (rankgate.io/gate:
// disabled on the job) is left as it is.
func (m *Mutator) Mutate(obj map[string]any, k kubeflow.Kind) (bool, error) {
	field := k.ReplicaSpecsField()
	meta, _ := obj["metadata"].(map[string]any)
	if optedOut(meta) {
		return false, nil
	}
	spec, _ := obj["spec"].(map[string]any)
	specs, _ := spec[field].(map[string]any)
	timeout := m.o.GangTimeout
	if ann, ok := meta["annotations"].(map[string]any); ok {
		if s, ok := ann[keyGangTimeout].(string); ok {
			if d, err := gate.ParseJobDuration(s); err == nil && d > 0 {
				timeout = d
			}
		}
	}
	names := make([]string, 0, len(specs))
	for k := range specs {
		names = append(names, k)
	}
	slices.Sort(names)
	changed := false
	for _, name := range names {
		rs, _ := specs[name].(map[string]any)
		tmpl, _ := rs["template"].(map[string]any)
		ps, _ := tmpl["spec"].(map[string]any)
		if ps == nil {
			continue
		}
		c, err := m.mutatePodSpec(ps, timeout)
		if err != nil {
			return false, fmt.Errorf("spec.%s.%s.template: %w", field, name, err)
		}
		changed = changed || c
	}
	if l := k.Launcher(); l != "" && m.o.LauncherGate != nil && launchergate.Enabled(stringMap(meta["labels"]), stringMap(meta["annotations"])) {
		rs, _ := specs[l].(map[string]any)
		c, err := m.gateLauncher(k, rs)
		if err != nil {
			return false, fmt.Errorf("spec.%s.%s.template: %w", field, l, err)
		}
		changed = changed || c
	}
	return changed, nil
}

// gateLauncher wraps the launcher's template (replica spec rs of a job of
// kind k: an MPIJob's Launcher) in the launcher gate, once.
func (m *Mutator) gateLauncher(k kubeflow.Kind, rs map[string]any) (bool, error) {
	tmpl, _ := rs["template"].(map[string]any)
	if tmpl == nil {
		return false, fmt.Errorf("the %s has no %s template to gate", k.GVK().Kind, k.Launcher())
	}
	var t corev1.PodTemplateSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &t); err != nil {
		return false, err
	}
	out, changed, err := launchergate.Wrap(&t, *m.o.LauncherGate)
	if err != nil || !changed {
		return false, err
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(out)
	if err != nil {
		return false, err
	}
	rs["template"] = u
	return true, nil
}

func stringMap(v any) map[string]string {
	m, _ := v.(map[string]any)
	out := make(map[string]string, len(m))
	for k, x := range m {
		if s, ok := x.(string); ok {
			out[k] = s
		}
	}
	return out
}

func optedOut(meta map[string]any) bool {
	for _, k := range []string{"labels", "annotations"} {
		if m, ok := meta[k].(map[string]any); ok {
			if v, ok := m[keyGate].(string); ok {
				v = strings.ToLower(v)
				return v == "disabled" || v == "false"
			}
		}
	}
	return false
}

// mutatePodSpec adds the init container, its volumes, to one template.
func (m *Mutator) mutatePodSpec(ps map[string]any, timeout time.Duration) (bool, error) {
	var pod corev1.PodSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ps, &pod); err != nil {
		return false, err
	}
	if hasRankgateInit(pod.InitContainers) {
		return false, nil
	}
	gpus := gpuLimits(pod.Containers)
	if len(gpus.Limits) == 0 {
		return false, nil
	}
	for _, v := range pod.Volumes {
		if v.Name == TokenVolume || v.Name == CAVolume {
			return false, fmt.Errorf("a volume is already named %s", v.Name)
		}
	}
	init, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ptr(m.initContainer(gpus, timeout)))
	if err != nil {
		return false, err
	}
	inits, _ := ps["initContainers"].([]any)
	// First: the gate decides before any other init container runs.
	ps["initContainers"] = append([]any{init}, inits...)
	vols, _ := ps["volumes"].([]any)
	for _, v := range m.volumes() {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ptr(v))
		if err != nil {
			return false, err
		}
		vols = append(vols, u)
	}
	ps["volumes"] = vols
	return true, nil
}

func ptr[T any](v T) *T { return &v }

// hasRankgateInit: an init container named InitName, or one that runs
// `rankgate init` (a hand-written one under another name).
func hasRankgateInit(cs []corev1.Container) bool {
	for _, c := range cs {
		if c.Name == InitName {
			return true
		}
		argv := append(slices.Clone(c.Command), c.Args...)
		for i := 0; i+1 < len(argv); i++ {
			if strings.HasPrefix(baseName(argv[i]), "rankgate") && argv[i+1] == "init" {
				return true
			}
		}
	}
	return false
}

func baseName(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

// gpuLimits: the GPU and MIG resources of the container that asks for the
// most of them (the trainer), limits and requests as it declares them.
func gpuLimits(cs []corev1.Container) corev1.ResourceRequirements {
	var best corev1.ResourceRequirements
	var bestN int64
	for _, c := range cs {
		var r corev1.ResourceRequirements
		var n int64
		for name, q := range c.Resources.Limits {
			if topology.IsGPUResource(string(name)) {
				if r.Limits == nil {
					r.Limits = corev1.ResourceList{}
				}
				r.Limits[name] = q
				n += q.Value()
			}
		}
		for name, q := range c.Resources.Requests {
			if topology.IsGPUResource(string(name)) {
				if r.Requests == nil {
					r.Requests = corev1.ResourceList{}
				}
				r.Requests[name] = q
				if _, ok := c.Resources.Limits[name]; !ok {
					n += q.Value()
				}
			}
		}
		if n > bestN {
			best, bestN = r, n
		}
	}
	if bestN == 0 {
		return corev1.ResourceRequirements{}
	}
	// Extended resources must have limits; a request alone is refused by
	// the API server, so the trainer has them.
	if best.Limits == nil {
		best.Limits = best.Requests
		best.Requests = nil
	}
	return best
}

// expectProfile: the MIG profile every rank must get, when the template
// asks for one MIG resource; nothing for nvidia.com/gpu, which under the
// single MIG strategy may be a MIG instance.
func expectProfile(r corev1.ResourceRequirements) string {
	var profile string
	for name := range r.Limits {
		if p, ok := strings.CutPrefix(string(name), topology.ResourceMIGPrefix); ok {
			if profile != "" {
				return ""
			}
			profile = p
		}
	}
	return profile
}

func (m *Mutator) initContainer(gpus corev1.ResourceRequirements, timeout time.Duration) corev1.Container {
	args := []string{
		"init",
		"--gate-url=" + m.o.GateURL,
		"--ca-file=" + CAMountPath + "/" + CAKey,
		"--token-file=" + TokenMountPath + "/token",
		"--termination-log=" + TerminationLog,
	}
	if p := expectProfile(gpus); p != "" {
		args = append(args, "--expect-profile="+p)
	}
	args = append(args, "--timeout="+gate.AddDurations(timeout, initMargin).String())
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	return corev1.Container{
		Name:    InitName,
		Image:   m.o.Image,
		Command: []string{NodeBinary},
		Args:    args,
		Env: []corev1.EnvVar{
			field("POD_NAME", "metadata.name"),
			field("POD_NAMESPACE", "metadata.namespace"),
			field("NODE_NAME", "spec.nodeName"),
		},
		Resources:                gpus,
		TerminationMessagePath:   TerminationLog,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		VolumeMounts: []corev1.VolumeMount{
			{Name: TokenVolume, MountPath: TokenMountPath, ReadOnly: true},
			{Name: CAVolume, MountPath: CAMountPath, ReadOnly: true},
		},
	}
}

func (m *Mutator) volumes() []corev1.Volume {
	exp := int64(tokenSeconds)
	return []corev1.Volume{
		{Name: TokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience: m.o.Audience, ExpirationSeconds: &exp, Path: "token"}}},
		}}},
		{Name: CAVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: CAConfigMapName},
			Items:                []corev1.KeyToPath{{Key: CAKey, Path: CAKey}},
		}}},
	}
}

var _ admission.Handler = (*Mutator)(nil)
