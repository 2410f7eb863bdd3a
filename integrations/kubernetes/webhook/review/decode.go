// Package review serves the admission webhooks within bounds: the HTTPS
// server (connections, header and body timeouts, a body cap, a limit on
// the reviews read and decoded at once), the AdmissionReview envelope read
// once into the few fields the handlers use, and the job it carries
// decoded once into the typed Kubeflow objects after a check of its size
// and shape that allocates nothing.
//
// Whoever can reach the webhook port can send a review; without
// --webhook-client-ca nothing says it came from the API server. So a
// review is only ever input to judge: its size is bounded before anything
// is allocated for it, and no side effect takes its target from it.
package review

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/json"

	"github.com/rankgate/rankgate/integrations/kubeflow"
)

// Bounds of a job object in a review. The API server accepts request
// bodies of at most 3 MiB; the object it sends to a webhook also carries
// what it adds (defaults, metadata.managedFields). A job over MaxObject is
// not decoded.
//
// The decoded typed object is bounded by the shape of the JSON: every
// value becomes at least a string header or a map entry, and every object
// in a list a whole struct (a container is about 1 KiB of Go memory for
// two bytes of JSON, "{}"). MaxValues bounds the values (list entries and
// object members) and MaxListObjects the objects inside lists; a
// PyTorchJob with a thousand environment variables in each of two
// templates uses about 4,000 of the first and 2,000 of the second.
const (
	MaxObject      = 4 << 20
	MaxValues      = 200_000
	MaxListObjects = 20_000
	// maxDepth is encoding/json's own nesting limit.
	maxDepth = 10_000
)

// ErrTooLarge is returned for an object over one of the bounds.
var ErrTooLarge = errors.New("over the admission webhook's bounds")

// DecodeJob decodes raw (a review's object or old object) as the job kind
// gvk names, once, after checking its size and shape; nil, nil for a kind
// that is not a supported job. namespace fills an object that names none
// (the review's namespace: the API server's, a generateName create).
func DecodeJob(gvk metav1.GroupVersionKind, namespace string, raw []byte) (kubeflow.Job, error) {
	k, ok := kubeflow.ByGVK(schema.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind})
	if !ok {
		return nil, nil
	}
	obj := k.New()
	if err := CheckShape(raw); err != nil {
		return nil, fmt.Errorf("%s in namespace %s: %w", gvk.Kind, namespace, err)
	}
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, fmt.Errorf("decoding %s in namespace %s: %w", gvk.Kind, namespace, err)
	}
	j, err := k.Wrap(obj)
	if err != nil {
		return nil, err
	}
	if j.Namespace() == "" {
		j.Object().SetNamespace(namespace)
	}
	return j, nil
}

// DecodePod decodes raw (a review's Pod) once, after checking its size
// and shape as DecodeJob does; namespace fills a pod that names none.
func DecodePod(namespace string, raw []byte) (*corev1.Pod, error) {
	if err := CheckShape(raw); err != nil {
		return nil, fmt.Errorf("a pod in namespace %s: %w", namespace, err)
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(raw, pod); err != nil {
		return nil, fmt.Errorf("decoding Pod in namespace %s: %w", namespace, err)
	}
	if pod.Namespace == "" {
		pod.Namespace = namespace
	}
	return pod, nil
}

// CheckShape checks a JSON value's size and shape (MaxObject, MaxValues,
// MaxListObjects) by scanning its bytes; it allocates nothing but its
// nesting stack, and leaves the syntax to the decoder.
func CheckShape(raw []byte) error {
	if len(raw) > MaxObject {
		return fmt.Errorf("an object of %d bytes: %w (%d bytes)", len(raw), ErrTooLarge, MaxObject)
	}
	var (
		stack   []bool // per open value: true for a list
		values  int
		objects int
		// empty: the innermost list or object has no value yet.
		empty bool
	)
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch c {
		case ' ', '\t', '\n', '\r', ':':
			continue
		case '"':
			j := i + 1
			for ; j < len(raw) && raw[j] != '"'; j++ {
				if raw[j] == '\\' {
					j++
				}
			}
			i = j
		case ',':
			empty = true
			continue
		case '}', ']':
			if len(stack) == 0 {
				return errors.New("unbalanced brackets")
			}
			stack = stack[:len(stack)-1]
			empty = false
			continue
		}
		// c begins a value, or (in an object, after '{' or ',') a key.
		inList := len(stack) > 0 && stack[len(stack)-1]
		if empty && len(stack) > 0 {
			values++
			if values > MaxValues {
				return fmt.Errorf("more than %d values: %w", MaxValues, ErrTooLarge)
			}
		}
		empty = false
		if c == '{' || c == '[' {
			if c == '{' && inList {
				objects++
				if objects > MaxListObjects {
					return fmt.Errorf("more than %d objects in lists: %w", MaxListObjects, ErrTooLarge)
				}
			}
			if len(stack) == maxDepth {
				return fmt.Errorf("nested deeper than %d", maxDepth)
			}
			stack = append(stack, c == '[')
			empty = true
		}
	}
	return nil
}
