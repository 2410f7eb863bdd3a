//go:build !rankgate_node

package app

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/verdict"
)

// jobRef names a PyTorchJob or MPIJob as a kubectl user types it. Every
// command that takes a job (status, diagnose job) parses it with
// parseJobRef.
type jobRef struct {
	// Namespace is the one given as NAMESPACE/NAME; "" when none was.
	Namespace string
	// Kind is a supported kind's name (PyTorchJob), or "" for any.
	Kind string
	Name string
}

// jobRefForms is what the usage errors and the help texts list.
var jobRefForms = "NAME, KIND/NAME, KIND NAME or NAMESPACE/NAME (KIND: " + kindWords + ", also as " +
	kubeflow.All()[0].GVR().GroupResource().String() + ")"

// kindWords names the job kinds rankgate gates as a kubectl user types
// them: "pytorchjob or mpijob".
var kindWords = strings.ToLower(kubeflow.KindList("or"))

// String is the KIND/NAME form (lower-case kind), or NAME without a kind.
func (r jobRef) String() string {
	if r.Kind == "" {
		return r.Name
	}
	return strings.ToLower(r.Kind) + "/" + r.Name
}

// parseJobRef reads a job from the command line: one argument (NAME,
// KIND/NAME, NAMESPACE/NAME) or two (KIND NAME). KIND is a kind or
// resource name, singular or plural, any case, optionally followed by
// its group, or version and group: pytorchjob, PyTorchJobs,
// mpijob.kubeflow.org, pytorchjobs.v1.kubeflow.org. A first segment that
// is not a job kind is a namespace (diagnose's NAMESPACE/NAME form).
func parseJobRef(args []string) (jobRef, error) {
	var r jobRef
	switch len(args) {
	case 1:
		first, rest, ok := strings.Cut(args[0], "/")
		if !ok {
			r.Name = first
			break
		}
		kind, isKind, err := parseJobKind(first)
		if err != nil {
			return jobRef{}, err
		}
		if isKind {
			r.Kind = kind
		} else {
			if errs := validation.IsDNS1123Label(first); len(errs) > 0 {
				return jobRef{}, usagef("%q: %q is neither a job kind nor a namespace: want %s", args[0], first, jobRefForms)
			}
			r.Namespace = first
		}
		r.Name = rest
	case 2:
		kind, isKind, err := parseJobKind(args[0])
		if err != nil {
			return jobRef{}, err
		}
		if !isKind {
			return jobRef{}, usagef("%q %q: the first of two arguments is the kind, %s: want %s", args[0], args[1], kindWords, jobRefForms)
		}
		r.Kind, r.Name = kind, args[1]
	default:
		return jobRef{}, usagef("want one job: %s", jobRefForms)
	}
	if r.Name == "" {
		return jobRef{}, usagef("%q: the job name is missing: want %s", strings.Join(args, " "), jobRefForms)
	}
	if errs := validation.IsDNS1123Subdomain(r.Name); len(errs) > 0 {
		return jobRef{}, usagef("%q: not a job name (%s): want %s", r.Name, errs[0], jobRefForms)
	}
	return r, nil
}

// parseJobKind tells whether s names a job kind. A word with a dot that
// is not one (tfjobs.kubeflow.org) is an error: it can be no namespace.
func parseJobKind(s string) (kind string, ok bool, err error) {
	word, qual, dotted := strings.Cut(strings.ToLower(s), ".")
	for _, k := range kubeflow.All() {
		gvk, resource := k.GVK(), k.GVR().Resource
		if word != strings.ToLower(gvk.Kind) && word != resource {
			continue
		}
		if !dotted || qual == gvk.Group || qual == gvk.Version+"."+gvk.Group {
			return gvk.Kind, true, nil
		}
		return "", false, usagef("%q: %s is served as %s.%s.%s", s, gvk.Kind, resource, gvk.Version, gvk.Group)
	}
	if dotted {
		return "", false, usagef("%q: not a job kind rankgate gates: want %s", s, kindWords)
	}
	return "", false, nil
}

// jobNamespace picks the namespace of a job: from NAMESPACE/NAME or -n
// (both: they must agree), else def (the kubeconfig context's).
func jobNamespace(r jobRef, flagNS string, def func() (string, error)) (string, error) {
	switch {
	case r.Namespace != "" && flagNS != "" && r.Namespace != flagNS:
		return "", usagef("the job names namespace %q, --namespace says %q: give one", r.Namespace, flagNS)
	case r.Namespace != "":
		return r.Namespace, nil
	case flagNS != "":
		return flagNS, nil
	}
	return def()
}

// parsePodRef reads a pod: NAME or NAMESPACE/NAME (the namespace is
// then picked as a job's, by jobNamespace).
func parsePodRef(arg string) (jobRef, error) {
	r := jobRef{Name: arg}
	if first, rest, ok := strings.Cut(arg, "/"); ok {
		r = jobRef{Namespace: first, Name: rest}
		if errs := validation.IsDNS1123Label(first); len(errs) > 0 {
			return jobRef{}, usagef("%q: %q is not a namespace: want NAME or NAMESPACE/NAME", arg, first)
		}
	}
	if errs := validation.IsDNS1123Subdomain(r.Name); len(errs) > 0 {
		return jobRef{}, usagef("%q: not a pod name (%s): want NAME or NAMESPACE/NAME", r.Name, errs[0])
	}
	return r, nil
}

// jobKind merges the kind of the argument with a --kind flag.
func jobKind(r jobRef, flagKind string) (string, error) {
	if flagKind == "" {
		return r.Kind, nil
	}
	kind, ok, err := parseJobKind(flagKind)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", usagef("kind %q: want %s", flagKind, kubeflow.KindList("or"))
	}
	if r.Kind != "" && r.Kind != kind {
		return "", usagef("the job is a %s, --kind says %s: give one", r.Kind, kind)
	}
	return kind, nil
}

func usagef(format string, args ...any) error {
	return verdict.Exitf(verdict.ExitUsage, "%s", fmt.Sprintf(format, args...))
}
