package kubeflow

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/rankgate/rankgate/integrations/kubeflow/jobset"
	"github.com/rankgate/rankgate/integrations/kubeflow/mpijob"
	"github.com/rankgate/rankgate/integrations/kubeflow/pytorchjob"
	"github.com/rankgate/rankgate/integrations/kubeflow/trainjob"
)

// registry lists the supported kinds, in the order they are tried where
// one name could be either. A new kind is a package implementing
// jobkind.Kind and one line here.
var registry = []Kind{
	pytorchjob.Kind,
	mpijob.Kind,
	trainjob.Kind,
	jobset.Kind,
}

// All returns the supported kinds, in registry order.
func All() []Kind { return append([]Kind(nil), registry...) }

// ByGVK finds the kind of a GroupVersionKind.
func ByGVK(gvk schema.GroupVersionKind) (Kind, bool) {
	for _, k := range registry {
		if k.GVK() == gvk {
			return k, true
		}
	}
	return nil, false
}

// ByName finds a kind by its Kind name (PyTorchJob), exactly as spelled.
func ByName(kind string) (Kind, bool) {
	for _, k := range registry {
		if k.GVK().Kind == kind {
			return k, true
		}
	}
	return nil, false
}

// ByResource finds a kind by the way a kubectl user names it: its Kind or
// resource name (plural or singular), in any case, optionally followed by
// its group, or version and group ("pytorchjobs.kubeflow.org").
func ByResource(name string) (Kind, bool) {
	n := strings.ToLower(name)
	for _, k := range registry {
		gvk, gvr := k.GVK(), k.GVR()
		for _, form := range []string{strings.ToLower(gvk.Kind), gvr.Resource} {
			if n == form || n == form+"."+gvk.Group || n == form+"."+gvk.Version+"."+gvk.Group {
				return k, true
			}
		}
	}
	return nil, false
}

// KindOfOperator names the job kind whose operator sets the operator-name
// label value v ("" for any other operator).
func KindOfOperator(v string) string {
	if v == "" {
		return ""
	}
	for _, k := range registry {
		if k.OperatorName() == v {
			return k.GVK().Kind
		}
	}
	return ""
}

// KindNames are the supported kinds' names, in registry order.
func KindNames() []string {
	out := make([]string, len(registry))
	for i, k := range registry {
		out[i] = k.GVK().Kind
	}
	return out
}

// KindList names the supported kinds for a message: "PyTorchJob or
// MPIJob" with conj "or".
func KindList(conj string) string {
	names := KindNames()
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " " + conj + " " + names[len(names)-1]
}

// ErrUnsupported is returned for objects that are not a supported job.
var ErrUnsupported = func() error {
	forms := make([]string, len(registry))
	for i, k := range registry {
		forms[i] = k.GVK().Kind + " " + k.GVK().GroupVersion().String()
	}
	return errors.New("not a supported job kind (" + strings.Join(forms, ", ") + ")")
}()

// PodLabels are the pod labels any supported kind reads, each once, in
// registry order.
func PodLabels() []string {
	var out []string
	for _, k := range registry {
		for _, l := range k.PodLabels() {
			if !slices.Contains(out, l) {
				out = append(out, l)
			}
		}
	}
	return out
}

// FromObject wraps a typed object of a supported kind.
func FromObject(obj runtime.Object) (Job, error) {
	if o, ok := obj.(Object); ok {
		for _, k := range registry {
			if reflect.TypeOf(k.New()) == reflect.TypeOf(o) {
				return k.Wrap(o)
			}
		}
	}
	return nil, fmt.Errorf("%T: %w", obj, ErrUnsupported)
}

// MustFromObject is FromObject for objects made by the kinds of the
// registry (k.New(), a typed informer's): only a programming error makes
// it fail, and it panics then.
func MustFromObject(obj runtime.Object) Job {
	j, err := FromObject(obj)
	if err != nil {
		panic(fmt.Sprintf("kubeflow: %v", err))
	}
	return j
}

// FromUnstructured converts an unstructured job of a supported kind (as a
// dynamic client returns it) and wraps it.
func FromUnstructured(u *unstructured.Unstructured) (Job, error) {
	k, ok := ByGVK(u.GroupVersionKind())
	if !ok {
		return nil, fmt.Errorf("%s %s/%s: %w", u.GroupVersionKind(), u.GetNamespace(), u.GetName(), ErrUnsupported)
	}
	obj := k.New()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return k.Wrap(obj)
}

// NewScheme returns a scheme with the built-in Kubernetes kinds and the
// API groups of every supported kind: what the controller and the tests'
// clients decode.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	for _, k := range registry {
		utilruntime.Must(k.AddToScheme(s))
	}
	return s
}

// Supported reports whether a GroupVersionKind is a supported job kind.
func Supported(gvk schema.GroupVersionKind) bool {
	_, ok := ByGVK(gvk)
	return ok
}
