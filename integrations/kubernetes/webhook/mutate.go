// Package webhook is the controller's mutating admission webhook: into
// every replica template of an opted-in PyTorchJob (kubeflow.org/v1) or
// MPIJob (kubeflow.org/v2beta1) that requests GPUs or MIG devices it adds
// the `rankgate init` init container, with what it needs: the same GPU
// requests as the trainer, the downward-API identity, a projected
// service-account token for the gate, the gate's address and CA.
//
// The handler decodes the object once into the operators' Go types and
// answers with a JSON patch that only adds (and, for the launcher gate,
// rewrites the launcher's command), so that fields it does not know
// survive. It is idempotent: a template that already has a container named
// InitName, or whose init container runs `rankgate init`, is left as it is.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/jobkind"
	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/launchergate"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/review"
)

// Path is where the controller's webhook server serves the mutating webhook.
const Path = "/mutate-kubeflow-jobs"

// Names the webhook gives what it adds to a pod template; a template that
// already has InitName is left as it is.
const (
	InitName    = "rankgate-init"
	TokenVolume = "rankgate-token"
	CAVolume    = "rankgate-ca"
	// PodInfoVolume is the pod's own annotations (downward API), where the
	// init container sees an operator's contract.AnnotationBypass.
	PodInfoVolume    = "rankgate-podinfo"
	PodInfoMountPath = "/etc/rankgate/podinfo"
	TokenMountPath   = "/var/run/secrets/rankgate"
	CAMountPath      = "/var/run/rankgate"
	CAConfigMapName  = "rankgate-ca" // key CAKey: the gate's CA bundle, kept by the controller
	CAKey            = "ca.crt"
	TerminationLog   = "/dev/termination-log"
	// NodeBinary is the node build in the rankgate image (no client-go).
	NodeBinary = "/usr/local/bin/rankgate-node"

	tokenSeconds = 3600
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
	// answer of a create that is not a dry run, so that the CA ConfigMap
	// the pods mount exists there, but only when OptedIn (the
	// controller's own view of the namespace, never the review's) says
	// yes; nil OptedIn: never. Its error becomes an admission warning, not
	// a refusal.
	EnsureCA func(ctx context.Context, namespace string) error
	OptedIn  func(ctx context.Context, namespace string) bool
	// LauncherGate, if set, wraps the launcher of an MPIJob labelled or
	// annotated rankgate.io/launcher-gate=enabled in `rankgate launch
	// --gang` (launchergate.Wrap); nil leaves launchers alone.
	LauncherGate *launchergate.Options
	// InitResources are the init container's cpu and memory requests and
	// limits (nil: DefaultInitResources); its GPU resources are always the
	// trainer's.
	InitResources *corev1.ResourceRequirements
	// GPUClaim, if set, tells whether a pod resource claim of a pod in
	// namespace is served by NVIDIA's GPU driver (its claim or template
	// asks a DeviceClass, or selects devices, of driver gpu.nvidia.com):
	// a rank whose devices come only through such claims gets the init
	// container with them. nil: only ranks that ask GPU resources are
	// gated.
	GPUClaim func(namespace string, pc corev1.PodResourceClaim) bool
	// RuntimeOf, if set, reads the (Cluster)TrainingRuntime a TrainJob
	// names, once, when it is created: whether it runs its MPI launcher as
	// a node (contract.LabelMPILauncherIsNode). Its error becomes an
	// admission warning.
	RuntimeOf func(ctx context.Context, key trainjob.RuntimeKey) (*trainjob.Runtime, error)
}

// DefaultInitResources: what the init container (rankgate-node: one NVML
// read, one HTTPS exchange) needs, with room; set, so that a namespace
// whose ResourceQuota demands requests and limits admits it, and with
// requests equal to limits, so that a pod of QoS class Guaranteed (CPU
// manager's static policy) stays Guaranteed.
func DefaultInitResources() corev1.ResourceRequirements {
	l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}
	return corev1.ResourceRequirements{Requests: l, Limits: l.DeepCopy()}
}

// CheckInitResources says what is wrong with init-container resources: only
// cpu and memory, positive, a request no larger than its limit.
func CheckInitResources(r corev1.ResourceRequirements) error {
	for _, l := range []corev1.ResourceList{r.Requests, r.Limits} {
		for name, q := range l {
			if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
				return fmt.Errorf("init-container resources: %s: only cpu and memory are set here (GPUs are the trainer's)", name)
			}
			if q.Sign() <= 0 {
				return fmt.Errorf("init-container resources: %s %s: want a positive quantity", name, q.String())
			}
		}
	}
	for name, req := range r.Requests {
		if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
			return fmt.Errorf("init-container resources: %s request %s is above its limit %s", name, req.String(), lim.String())
		}
	}
	return nil
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
	if o.InitResources == nil {
		d := DefaultInitResources()
		o.InitResources = &d
	}
	if err := CheckInitResources(*o.InitResources); err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
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
//
// The object is decoded once, into the typed job, after a check of its
// size and shape (review.DecodeJob); a job over those bounds is admitted
// unchanged with a warning, as when no replica answers. The answer is a
// JSON patch of what the webhook adds, so the fields it does not know
// survive.
func (m *Mutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	j, err := review.DecodeJob(req.Kind, req.Namespace, req.Object.Raw)
	if errors.Is(err, review.ErrTooLarge) {
		return admission.Allowed("").WithWarnings(fmt.Sprintf("rankgate: not gated: %v", err))
	}
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if j == nil {
		return admission.Allowed("not a " + kubeflow.KindList("or"))
	}
	extra, warning := m.runtimeLabels(ctx, j)
	ops, err := m.patch(j, extra)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if len(ops) == 0 {
		return admission.Allowed("")
	}
	resp := admission.Patched("", ops...)
	if warning != "" {
		resp.Warnings = append(resp.Warnings, warning)
	}
	if err := j.Validate(); err != nil {
		// Gated, but its ranks will be refused: say so while the user is
		// looking (a TrainJob without spec.trainer.numNodes).
		resp.Warnings = append(resp.Warnings, fmt.Sprintf("rankgate: the gate cannot number this %s's ranks: %v", j.Kind(), err))
	}
	if w := m.ensureCA(ctx, req, j.Namespace()); w != "" {
		resp.Warnings = append(resp.Warnings, w)
	}
	return resp
}

// ensureCA asks for the CA ConfigMap in ns, only when the controller's
// own view says ns is opted in (OptedIn): a review names any namespace
// its sender likes. Not on a dry run (sideEffects: NoneOnDryRun). It
// returns a warning for the user, or "".
func (m *Mutator) ensureCA(ctx context.Context, req admission.Request, ns string) string {
	if m.o.EnsureCA == nil || m.o.OptedIn == nil || (req.DryRun != nil && *req.DryRun) || !m.o.OptedIn(ctx, ns) {
		return ""
	}
	if err := m.o.EnsureCA(ctx, ns); err != nil {
		return fmt.Sprintf("rankgate: the gate's CA (ConfigMap %s) is not yet in namespace %s: %v; the rank pods wait for it", CAConfigMapName, ns, err)
	}
	return ""
}

// Patch is the JSON patch that adds the init container to every GPU
// template of a job (every replica type, in name order), and with
// rankgate.io/launcher-gate the launcher gate to the launcher of a kind
// that has one (an MPIJob's);
// empty when there is nothing to add. A job opted out (rankgate.io/gate:
// disabled on the job) gets nothing.
func (m *Mutator) Patch(j kubeflow.Job) ([]jsonpatch.Operation, error) { return m.patch(j, nil) }

// runtimeLabels: what a TrainJob's runtime adds to the labels its
// runtime patch carries (RuntimeOf), and a warning for the user when the
// runtime cannot be read.
func (m *Mutator) runtimeLabels(ctx context.Context, j kubeflow.Job) (map[string]string, string) {
	key, isTrainJob, err := trainjob.RuntimeOf(j)
	if !isTrainJob || m.o.RuntimeOf == nil || optedOut(j.Object().GetLabels(), j.Object().GetAnnotations()) {
		return nil, ""
	}
	if lp, ok := j.(jobkind.LabelPropagator); ok {
		if _, _, _, needed := lp.PropagateLabels(contract.RuntimePatchManager, nil); !needed {
			return nil, "" // its runtime patch is there already: nothing is added
		}
	}
	var rt *trainjob.Runtime
	if err == nil {
		rt, err = m.o.RuntimeOf(ctx, key)
	}
	if err != nil {
		return nil, fmt.Sprintf("rankgate: cannot read the TrainJob's runtime: %v; if it runs its MPI launcher as a node, the gang waits for one rank too many", err)
	}
	if p := rt.Spec.MLPolicy; p != nil && p.MPI != nil && ptr.Deref(p.MPI.RunLauncherAsNode, false) {
		return map[string]string{contract.LabelMPILauncherIsNode: "true"}, ""
	}
	return nil, ""
}

// gangTimeout is how long the init container waits: the object's
// rankgate.io/gang-timeout when it reads as a positive duration (own),
// else the controller's.
func (m *Mutator) gangTimeout(annotations map[string]string) (d time.Duration, own bool) {
	if s, ok := annotations[contract.AnnotationGangTimeout]; ok {
		if d, err := gate.ParseJobDuration(s); err == nil && d > 0 {
			return d, true
		}
	}
	return m.o.GangTimeout, false
}

// patch is Patch, with extra labels for the runtime patch of a TrainJob.
func (m *Mutator) patch(j kubeflow.Job, extra map[string]string) ([]jsonpatch.Operation, error) {
	o := j.Object()
	if optedOut(o.GetLabels(), o.GetAnnotations()) {
		return nil, nil
	}
	timeout, own := m.gangTimeout(o.GetAnnotations())
	k, ok := kubeflow.ByGVK(j.GVK())
	if !ok {
		return nil, fmt.Errorf("%s: %w", j.GVK(), kubeflow.ErrUnsupported)
	}
	// A kind whose rank pods get the init container when they are
	// created (the Pod webhook, PodPath) gets only the label that sends
	// them there.
	pi, ok := k.(jobkind.PodInjected)
	atPod := ok && pi.InjectsAtPodCreation()
	templates := j.Templates()
	names := make([]string, 0, len(templates))
	for k := range templates {
		names = append(names, k)
	}
	slices.Sort(names)
	var ops []jsonpatch.Operation
	for _, name := range names {
		if name == "" {
			// Not a replica type any operator runs, and a key that JSON
			// patch implementations address differently: left alone.
			continue
		}
		ptr, field := templatePointer(j, name)
		t := templates[name]
		var add []jsonpatch.Operation
		labels := map[string]string{}
		var annotations map[string]string
		switch {
		case hasRankgateInit(t.Spec.InitContainers):
			// Written by hand (a TrainingRuntime's): left as it is.
		case atPod:
			if !asksDevices(m.rankResources(j.Namespace(), &t.Spec)) {
				continue
			}
			if err := freeVolumeNames(&t.Spec); err != nil {
				return nil, fmt.Errorf("%s: %w", field, err)
			}
			labels[contract.LabelInject] = contract.ValueInjectRanks
			if own {
				annotations = map[string]string{contract.AnnotationGangTimeout: o.GetAnnotations()[contract.AnnotationGangTimeout]}
			}
		default:
			var err error
			if add, err = m.podSpecOps(ptr+"/spec", j.Namespace(), &t.Spec, timeout); err != nil {
				return nil, fmt.Errorf("%s: %w", field, err)
			}
			if len(add) == 0 {
				continue
			}
		}
		if k.PodJobNameLabel() != kubeflow.LabelJobName {
			// The controller's pod cache holds the pods that carry
			// LabelJobName, which the Kubeflow operators set and the
			// JobSet controller does not: a gated rank pod carries it,
			// also one whose init container was written by hand (in a
			// TrainingRuntime: the label's value is the JobSet's name).
			labels[kubeflow.LabelJobName] = j.Name()
		}
		ops = append(ops, add...)
		ops = append(ops, metaOps(ptr+"/metadata", &t.ObjectMeta, labels, annotations)...)
	}
	if lp, ok := j.(jobkind.LabelPropagator); ok {
		labels := map[string]string{contract.KeyGate: "enabled"}
		maps.Copy(labels, extra)
		if launchergate.Enabled(o.GetLabels(), o.GetAnnotations()) {
			// The launcher gate is asked for on the object that holds
			// the launcher's template (a TrainJob's JobSet).
			labels[contract.KeyLauncherGate] = "enabled"
		}
		path, n, item, needed := lp.PropagateLabels(contract.RuntimePatchManager, labels)
		if needed {
			ops = append(ops, appendOps(jsonPointer(path), n, item)...)
		}
	}
	if m.o.LauncherGate != nil && launchergate.Enabled(o.GetLabels(), o.GetAnnotations()) {
		add, err := m.launcherGateOps(k, j, templates)
		if err != nil {
			return nil, err
		}
		ops = append(ops, add...)
	}
	return ops, nil
}

// launcherGateOps gates the launcher of j, if it has one: the kind's
// (an MPIJob's Launcher) or the object's (the launcher of a JobSet made
// from a Trainer MPI runtime, which also gets the job-name label the
// controller finds a gate pod's job by, as a rank template does).
func (m *Mutator) launcherGateOps(k kubeflow.Kind, j kubeflow.Job, templates map[string]*corev1.PodTemplateSpec) ([]jsonpatch.Operation, error) {
	l := k.Launcher()
	t := templates[l]
	if lh, ok := j.(jobkind.LauncherHolder); ok && l == "" {
		l, t = lh.LauncherTemplate()
	}
	if l == "" {
		return nil, nil
	}
	ptr, field := templatePointer(j, l)
	if t == nil {
		return nil, fmt.Errorf("%s: the %s has no %s template to gate", field, k.GVK().Kind, l)
	}
	ops, err := m.launcherOps(ptr+"/spec", t)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if (len(ops) > 0 || launchergate.Wrapped(t)) && k.PodJobNameLabel() != kubeflow.LabelJobName {
		ops = append(ops, labelOps(ptr+"/metadata", &t.ObjectMeta, kubeflow.LabelJobName, j.Name())...)
	}
	return ops, nil
}

// templatePointer is the JSON pointer of the pod template of replica type
// typ in j, and its field path for messages (spec.replicatedJobs.0.template...).
func templatePointer(j kubeflow.Job, typ string) (pointer, field string) {
	path := j.TemplatePath(typ)
	return jsonPointer(path), strings.Join(path, ".")
}

// jsonPointer is path as a JSON Pointer, each key escaped (pointerKey).
func jsonPointer(path []string) string {
	keys := make([]string, len(path))
	for i, p := range path {
		keys[i] = pointerKey(p)
	}
	return "/" + strings.Join(keys, "/")
}

func optedOut(labels, annotations map[string]string) bool {
	return contract.GateDisabled(contract.GateSetting(labels, annotations))
}

// podSpecOps: the init container first (the gate decides before any other
// init container runs) and its volumes, for one template at base.
func (m *Mutator) podSpecOps(base, ns string, pod *corev1.PodSpec, timeout time.Duration) ([]jsonpatch.Operation, error) {
	if hasRankgateInit(pod.InitContainers) {
		return nil, nil
	}
	gpus := m.rankResources(ns, pod)
	if !asksDevices(gpus) {
		return nil, nil
	}
	if err := freeVolumeNames(pod); err != nil {
		return nil, err
	}
	ops := prependOps(base+"/initContainers", len(pod.InitContainers), m.initContainer(gpus, timeout))
	return append(ops, appendOps(base+"/volumes", len(pod.Volumes), m.volumes()...)...), nil
}

// freeVolumeNames: pod has no volume under a name the init container's
// volumes take.
func freeVolumeNames(pod *corev1.PodSpec) error {
	for _, v := range pod.Volumes {
		if v.Name == TokenVolume || v.Name == CAVolume || v.Name == PodInfoVolume {
			return fmt.Errorf("a volume is already named %s", v.Name)
		}
	}
	return nil
}

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

func (m *Mutator) initContainer(gpus corev1.ResourceRequirements, timeout time.Duration) corev1.Container {
	args := []string{
		"init",
		"--gate-url=" + m.o.GateURL,
		"--ca-file=" + CAMountPath + "/" + CAKey,
		"--token-file=" + TokenMountPath + "/token",
		"--termination-log=" + TerminationLog,
		"--bypass-file=" + PodInfoMountPath + "/annotations",
	}
	if p := expectProfile(gpus); p != "" {
		args = append(args, "--expect-profile="+p)
	}
	args = append(args, "--timeout="+gate.AddDurations(timeout, initMargin).String())
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	res := corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}, Claims: gpus.Claims}
	for _, from := range []corev1.ResourceRequirements{gpus, *m.o.InitResources} {
		maps.Copy(res.Limits, from.Limits)
		maps.Copy(res.Requests, from.Requests)
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
		Resources: res,
		// What Pod Security "restricted" asks of a container; the image
		// runs as uid 65532.
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			RunAsNonRoot:             ptr.To(true),
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePath:   TerminationLog,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		VolumeMounts: []corev1.VolumeMount{
			{Name: TokenVolume, MountPath: TokenMountPath, ReadOnly: true},
			{Name: CAVolume, MountPath: CAMountPath, ReadOnly: true},
			{Name: PodInfoVolume, MountPath: PodInfoMountPath, ReadOnly: true},
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
		{Name: PodInfoVolume, VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}}},
		}}},
	}
}

var _ admission.Handler = (*Mutator)(nil)
