package webhook

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"reflect"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/launchergate"
)

// The patch is built from the typed template, which says how long each
// list is: an empty list (absent, null or []) is added whole (an add on an
// existing member replaces it), a list with entries gets entries inserted
// at the front or appended.

// pointerKey escapes a map key for a JSON pointer (RFC 6901).
func pointerKey(k string) string {
	if !strings.ContainsAny(k, "~/") {
		return k
	}
	return pointerEscaper.Replace(k)
}

// pointerEscaper escapes a JSON Pointer reference token (RFC 6901); a
// Replacer is safe for concurrent use, and building one per key was a
// visible part of an admission's CPU.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

func add(path string, v any) jsonpatch.Operation {
	return jsonpatch.Operation{Operation: "add", Path: path, Value: v}
}

// prependOps puts items before the n entries of the list at path.
func prependOps[T any](path string, n int, items ...T) []jsonpatch.Operation {
	if len(items) == 0 {
		return nil
	}
	if n == 0 {
		return []jsonpatch.Operation{add(path, items)}
	}
	ops := make([]jsonpatch.Operation, 0, len(items))
	for i, it := range items {
		ops = append(ops, add(path+"/"+strconv.Itoa(i), it))
	}
	return ops
}

// appendOps puts items after the n entries of the list at path.
func appendOps[T any](path string, n int, items ...T) []jsonpatch.Operation {
	if len(items) == 0 {
		return nil
	}
	if n == 0 {
		return []jsonpatch.Operation{add(path, items)}
	}
	ops := make([]jsonpatch.Operation, 0, len(items))
	for _, it := range items {
		ops = append(ops, add(path+"/-", it))
	}
	return ops
}

// launcherOps: what launchergate.Wrap changes in the launcher template at
// base (its pod spec), as patch operations: the init containers it puts
// first, the volumes it appends, and on the first container the command
// that runs the original behind the gate (its args folded in), the mounts
// and environment it appends and the termination message policy it sets.
func (m *Mutator) launcherOps(base string, t *corev1.PodTemplateSpec) ([]jsonpatch.Operation, error) {
	out, changed, err := launchergate.Wrap(t, *m.o.LauncherGate)
	if err != nil || !changed {
		return nil, err
	}
	in, got := &t.Spec, &out.Spec
	ops := prependOps(base+"/initContainers", len(in.InitContainers), got.InitContainers[:len(got.InitContainers)-len(in.InitContainers)]...)
	ops = append(ops, appendOps(base+"/volumes", len(in.Volumes), got.Volumes[len(in.Volumes):]...)...)
	c, w := &in.Containers[0], &got.Containers[0]
	const c0 = "/containers/0"
	ops = append(ops, add(base+c0+"/command", w.Command))
	if len(c.Args) > 0 && len(w.Args) == 0 {
		ops = append(ops, jsonpatch.Operation{Operation: "remove", Path: base + c0 + "/args"})
	}
	ops = append(ops, appendOps(base+c0+"/volumeMounts", len(c.VolumeMounts), w.VolumeMounts[len(c.VolumeMounts):]...)...)
	ops = append(ops, appendOps(base+c0+"/env", len(c.Env), w.Env[len(c.Env):]...)...)
	if c.TerminationMessagePolicy != w.TerminationMessagePolicy {
		ops = append(ops, add(base+c0+"/terminationMessagePolicy", w.TerminationMessagePolicy))
	}
	return ops, nil
}

// labelOps sets label key=v on the object metadata m at base (its
// metadata field), creating the labels or the metadata as needed: a
// metadata that is all zero may be absent from the JSON, and is then
// added whole.
func labelOps(base string, m *metav1.ObjectMeta, key, v string) []jsonpatch.Operation {
	switch {
	case m.Labels[key] == v:
		return nil
	case m.Labels != nil:
		return []jsonpatch.Operation{add(base+"/labels/"+pointerKey(key), v)}
	case reflect.DeepEqual(*m, metav1.ObjectMeta{}):
		return []jsonpatch.Operation{add(base, map[string]any{"labels": map[string]string{key: v}})}
	}
	return []jsonpatch.Operation{add(base+"/labels", map[string]string{key: v})}
}
