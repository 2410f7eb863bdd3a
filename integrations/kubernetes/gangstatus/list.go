// Package gangstatus reads the Gang resources (rankgate.io/v1alpha1) the
// controller writes and shows them to people: a table like kubectl get's,
// a detail view of one gang, a List document for scripts. It only reads.
package gangstatus

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"

	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/verdict"
)

// GVR is the Gang resource.
var GVR = v1alpha1.GroupVersion.WithResource("gangs")

// pageSize bounds one list response; a namespace may hold many gangs.
const pageSize = 500

// Job selects the gangs of one job; the zero value selects all.
type Job struct {
	// Kind is PyTorchJob or MPIJob; "" matches both.
	Kind string
	Name string
}

func (j Job) matches(g *v1alpha1.Gang) bool {
	if j.Name == "" {
		return true
	}
	return g.Spec.Job.Name == j.Name && (j.Kind == "" || strings.EqualFold(g.Spec.Job.Kind, j.Kind))
}

// List reads the gangs of namespace ("" for every namespace), those of
// job only when it names one, ordered by namespace, job and kind, the
// latest attempt first.
func List(ctx context.Context, dyn dynamic.Interface, namespace string, job Job) ([]v1alpha1.Gang, error) {
	out, _, err := list(ctx, dyn, namespace, job)
	return out, err
}

// selector is the label selector of job's gangs: the controller labels
// each Gang with its job's name when the name fits a label value; longer
// names are matched by Job.matches.
func (j Job) selector() string {
	if j.Name != "" && len(validation.IsValidLabelValue(j.Name)) == 0 {
		return contract.LabelJobName + "=" + j.Name
	}
	return ""
}

// list is List and the resource version of the list, to watch from.
func list(ctx context.Context, dyn dynamic.Interface, namespace string, job Job) ([]v1alpha1.Gang, string, error) {
	opts := metav1.ListOptions{Limit: pageSize, LabelSelector: job.selector()}
	var out []v1alpha1.Gang
	rv := ""
	for {
		page, err := dyn.Resource(GVR).Namespace(namespace).List(ctx, opts)
		if err != nil {
			return nil, "", listError(err, namespace)
		}
		for i := range page.Items {
			g, err := fromUnstructured(page.Items[i].Object)
			if err != nil {
				return nil, "", err
			}
			if job.matches(g) {
				out = append(out, *g)
			}
		}
		rv = page.GetResourceVersion()
		if opts.Continue = page.GetContinue(); opts.Continue == "" {
			break
		}
	}
	Sort(out)
	return out, rv, nil
}

func fromUnstructured(obj map[string]any) (*v1alpha1.Gang, error) {
	var g v1alpha1.Gang
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &g); err != nil {
		return nil, &Error{Code: verdict.ExitEnvironment, Err: fmt.Errorf("gang: %w", err)}
	}
	return &g, nil
}

// Sort orders gangs by namespace, job name and kind, the latest attempt
// first.
func Sort(gs []v1alpha1.Gang) {
	sort.SliceStable(gs, func(i, j int) bool {
		a, b := &gs[i], &gs[j]
		switch {
		case a.Namespace != b.Namespace:
			return a.Namespace < b.Namespace
		case a.Spec.Job.Name != b.Spec.Job.Name:
			return a.Spec.Job.Name < b.Spec.Job.Name
		case a.Spec.Job.Kind != b.Spec.Job.Kind:
			return a.Spec.Job.Kind < b.Spec.Job.Kind
		case a.Spec.Attempt != b.Spec.Attempt:
			return a.Spec.Attempt > b.Spec.Attempt
		}
		return a.Name < b.Name
	})
}

// Error is a failed read, with its exit code: 3, the environment (the CRD
// is not installed, access is denied, the API server did not answer).
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// ExitCode is the process's exit code for e.
func (e *Error) ExitCode() int { return e.Code }

// ErrCRDMissing is wrapped when the API server does not serve
// gangs.rankgate.io.
var ErrCRDMissing = errors.New("the API server does not serve gangs.rankgate.io/v1alpha1: the Gang CRD is not installed (kubectl apply -k configs/deploy installs it with the controller)")

func listError(err error, namespace string) error {
	where := "in every namespace"
	if namespace != "" {
		where = "in namespace " + namespace
	}
	switch {
	case apierrors.IsNotFound(err):
		// Listing a served resource never answers 404, even in a namespace
		// that does not exist: the resource itself is missing.
		return &Error{Code: verdict.ExitEnvironment, Err: ErrCRDMissing}
	case apierrors.IsForbidden(err):
		return &Error{Code: verdict.ExitEnvironment, Err: fmt.Errorf("forbidden: you may not list gangs.rankgate.io %s; ask for the RBAC verb list on resource gangs in API group rankgate.io: %w", where, err)}
	case apierrors.IsUnauthorized(err):
		return &Error{Code: verdict.ExitEnvironment, Err: fmt.Errorf("the API server does not accept your credentials (check the kubeconfig's user): %w", err)}
	}
	return &Error{Code: verdict.ExitEnvironment, Err: fmt.Errorf("list gangs %s: %w", where, err)}
}
