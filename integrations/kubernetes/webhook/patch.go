package webhook

import (
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
// metadata field); metaOps.
func labelOps(base string, m *metav1.ObjectMeta, key, v string) []jsonpatch.Operation {
	return metaOps(base, m, map[string]string{key: v}, nil)
}

// metaOps sets labels and annotations on the object metadata m at base
// (its metadata field), creating the maps or the metadata as needed: a
// metadata that is all zero may be absent from the JSON, and is then
// added whole. Entries m already has with the same value are left out.
func metaOps(base string, m *metav1.ObjectMeta, labels, annotations map[string]string) []jsonpatch.Operation {
	labels, annotations = missing(m.Labels, labels), missing(m.Annotations, annotations)
	if len(labels) == 0 && len(annotations) == 0 {
		return nil
	}
	if reflect.DeepEqual(*m, metav1.ObjectMeta{}) {
		whole := map[string]any{}
		if len(labels) > 0 {
			whole["labels"] = labels
		}
		if len(annotations) > 0 {
			whole["annotations"] = annotations
		}
		return []jsonpatch.Operation{add(base, whole)}
	}
	return append(mapOps(base+"/labels", m.Labels, labels), mapOps(base+"/annotations", m.Annotations, annotations)...)
}

// missing: the entries of want that have does not hold with the same value.
func missing(have, want map[string]string) map[string]string {
	var out map[string]string
	for k, v := range want {
		if cur, ok := have[k]; ok && cur == v {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// mapOps adds entries (none of them held with that value) to the string
// map at path, which holds have: the whole map when there is none.
func mapOps(path string, have, entries map[string]string) []jsonpatch.Operation {
	if len(entries) == 0 {
		return nil
	}
	if have == nil {
		return []jsonpatch.Operation{add(path, entries)}
	}
	keys := slices.Sorted(maps.Keys(entries))
	ops := make([]jsonpatch.Operation, 0, len(keys))
	for _, k := range keys {
		ops = append(ops, add(path+"/"+pointerKey(k), entries[k]))
	}
	return ops
}
