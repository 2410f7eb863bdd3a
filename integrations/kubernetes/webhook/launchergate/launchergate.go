// Package launchergate wraps an MPIJob launcher's pod template so that
// mpirun starts only after the job's gang verdict passes: an init
// container copies the rankgate binary from the controller's image into an
// emptyDir, and the launcher's command becomes
//
//	<emptyDir>/rankgate launch --gang --gate-url ... -- <original command and args>
//
// with the projected token (audience rankgate) and the gate's CA mounted,
// and the pod's identity from the downward API. The mutating webhook
// applies it to MPIJobs labelled or annotated rankgate.io/launcher-gate:
// enabled. The user's image needs nothing but glibc (the rankgate-node
// build links it).
package launchergate

import (
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
)

// Names of what Wrap adds.
const (
	InitContainerName = "rankgate-copy"
	BinVolume         = "rankgate-bin"
	TokenVolume       = "rankgate-token"
	CAVolume          = "rankgate-ca"

	BinDir    = "/rankgate/bin"
	TokenDir  = "/var/run/secrets/rankgate"
	CADir     = "/var/run/rankgate"
	TokenFile = TokenDir + "/token"
	// Binary is the wrapped command's first word.
	Binary = BinDir + "/rankgate"
)

// Options say where the binary and the gate are.
type Options struct {
	// Image is the controller's own image (the node build and version
	// pinned to the controller's).
	Image           string
	ImagePullPolicy corev1.PullPolicy
	// ImageBinary is the rankgate binary inside Image that copies itself
	// (default /usr/local/bin/rankgate-node: launch without client-go).
	ImageBinary string
	// GateURL is the gate's address, https://HOST:PORT.
	GateURL string
	// CAConfigMap holds the gate's CA under CAKey (default ca.crt).
	CAConfigMap string
	CAKey       string
	// TokenSeconds is the projected token's lifetime (default 3600).
	TokenSeconds int64
	// LaunchArgs go between `launch --gang ...` and "--" (default
	// --no-preflight: the launcher runs no rank).
	LaunchArgs []string
}

func (o *Options) defaults() error {
	if o.Image == "" || o.GateURL == "" || o.CAConfigMap == "" {
		return errors.New("launchergate: Image, GateURL and CAConfigMap are required")
	}
	if o.ImageBinary == "" {
		o.ImageBinary = "/usr/local/bin/rankgate-node"
	}
	if o.CAKey == "" {
		o.CAKey = "ca.crt"
	}
	if o.TokenSeconds == 0 {
		o.TokenSeconds = 3600
	}
	if o.LaunchArgs == nil {
		o.LaunchArgs = []string{"--no-preflight"}
	}
	return nil
}

// Enabled reports whether a job's labels or annotations ask for the
// launcher gate (the label wins).
func Enabled(labels, annotations map[string]string) bool {
	if v, ok := labels[contract.KeyLauncherGate]; ok {
		return v == "enabled"
	}
	return annotations[contract.KeyLauncherGate] == "enabled"
}

// Wrapped reports whether t already carries the launcher gate.
func Wrapped(t *corev1.PodTemplateSpec) bool {
	for _, c := range t.Spec.InitContainers {
		if c.Name == InitContainerName {
			return true
		}
	}
	return len(t.Spec.Containers) > 0 && len(t.Spec.Containers[0].Command) > 0 && t.Spec.Containers[0].Command[0] == Binary
}

// Wrap returns a copy of the launcher template t with the launcher gate:
// the first container (mpi-operator's launcher container) runs its
// command behind `rankgate launch --gang`. A template that already has it
// is returned unchanged (changed false): applying Wrap again changes
// nothing. A launcher container without a command cannot be wrapped (its
// image's entrypoint is not known here): an error that says so.
func Wrap(t *corev1.PodTemplateSpec, o Options) (out *corev1.PodTemplateSpec, changed bool, err error) {
	if err := o.defaults(); err != nil {
		return nil, false, err
	}
	if Wrapped(t) {
		return t, false, nil
	}
	if len(t.Spec.Containers) == 0 {
		return nil, false, errors.New("the launcher template has no container")
	}
	out = t.DeepCopy()
	spec := &out.Spec
	c := &spec.Containers[0]
	if len(c.Command) == 0 {
		return nil, false, fmt.Errorf("launcher container %q has no command: set command (mpirun ...) so that %s can wrap it; the image's entrypoint is not visible to the webhook", c.Name, contract.KeyLauncherGate)
	}
	for _, v := range []string{BinVolume, TokenVolume, CAVolume} {
		if slices.ContainsFunc(spec.Volumes, func(x corev1.Volume) bool { return x.Name == v }) {
			return nil, false, fmt.Errorf("the launcher template already has a volume named %s", v)
		}
	}

	argv := []string{Binary, "launch", "--gang", "--gate-url", o.GateURL, "--ca-file", CADir + "/" + o.CAKey, "--token-file", TokenFile}
	argv = append(argv, o.LaunchArgs...)
	argv = append(argv, "--")
	argv = append(argv, c.Command...)
	c.Command = append(argv, c.Args...)
	c.Args = nil
	c.VolumeMounts = append(c.VolumeMounts,
		corev1.VolumeMount{Name: BinVolume, MountPath: BinDir, ReadOnly: true},
		corev1.VolumeMount{Name: TokenVolume, MountPath: TokenDir, ReadOnly: true},
		corev1.VolumeMount{Name: CAVolume, MountPath: CADir, ReadOnly: true},
	)
	c.Env = withIdentity(c.Env)
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	}

	spec.InitContainers = append([]corev1.Container{{
		Name:                     InitContainerName,
		Image:                    o.Image,
		ImagePullPolicy:          o.ImagePullPolicy,
		Command:                  []string{o.ImageBinary, "copy-binary", BinDir},
		VolumeMounts:             []corev1.VolumeMount{{Name: BinVolume, MountPath: BinDir}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true), RunAsNonRoot: ptr(true),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}}, spec.InitContainers...)
	spec.Volumes = append(spec.Volumes,
		corev1.Volume{Name: BinVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: TokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience: gate.Audience, ExpirationSeconds: ptr(o.TokenSeconds), Path: "token",
			}}},
		}}},
		corev1.Volume{Name: CAVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: o.CAConfigMap},
			Items:                []corev1.KeyToPath{{Key: o.CAKey, Path: o.CAKey}},
		}}},
	)
	return out, true, nil
}

// withIdentity adds POD_NAME and POD_NAMESPACE from the downward API
// unless the container sets them.
func withIdentity(env []corev1.EnvVar) []corev1.EnvVar {
	for _, e := range []struct{ name, field string }{{"POD_NAME", "metadata.name"}, {"POD_NAMESPACE", "metadata.namespace"}} {
		if slices.ContainsFunc(env, func(v corev1.EnvVar) bool { return v.Name == e.name }) {
			continue
		}
		env = append(env, corev1.EnvVar{Name: e.name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: e.field}}})
	}
	return env
}

func ptr[T any](v T) *T { return &v }
