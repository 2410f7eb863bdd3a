package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/verdict"
)

// Live reads the model from an API server. Pods are listed page by page
// and folded into the Builder, so memory stays bounded by the model, not
// by the number of pods.
type Live struct {
	Core    kubernetes.Interface
	Dynamic dynamic.Interface
	// PageSize of pod and node lists (default 500).
	PageSize int64
	// Notes says what LoadCluster could not read and did without (for
	// the user, on stderr).
	Notes []string
}

// NewLive builds clients from a rest config.
func NewLive(cfg *rest.Config) (*Live, error) {
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Live{Core: core, Dynamic: dyn}, nil
}

// NotFoundError: the named object does not exist (or its kind is not
// served). diagnose exits 2 on it; other API errors are environment
// failures (exit 3).
type NotFoundError struct{ What string }

func (e *NotFoundError) Error() string { return e.What + " not found" }

// ExitCode: naming an object that does not exist is exit 2.
func (e *NotFoundError) ExitCode() int { return verdict.ExitUsage }

// ArgError: the request itself is wrong (an unknown kind, an ambiguous
// name). diagnose exits 2 on it.
type ArgError struct{ Msg string }

func (e *ArgError) Error() string { return e.Msg }

// ExitCode: a wrong request is exit 2.
func (e *ArgError) ExitCode() int { return verdict.ExitUsage }

// APIError: the API server could not answer (unreachable, forbidden, too
// slow). diagnose exits 3 on it, a deadline included: the cluster, not the
// user's input, is at fault.
type APIError struct{ Err error }

func (e *APIError) Error() string { return e.Err.Error() }
func (e *APIError) Unwrap() error { return e.Err }

// ExitCode is 3.
func (e *APIError) ExitCode() int { return verdict.ExitEnvironment }

func apiErrorf(format string, args ...any) error {
	return &APIError{Err: fmt.Errorf(format, args...)}
}

func (l *Live) pageSize() int64 {
	if l.PageSize > 0 {
		return l.PageSize
	}
	return 500
}

// LoadCluster adds every node, every unfinished pod, every DeviceClass
// and the DRA slices, claims and claim templates to b.
func (l *Live) LoadCluster(ctx context.Context, b *Builder) error {
	if err := l.loadDeviceClasses(ctx, b); err != nil {
		return err
	}
	if err := l.loadDRA(ctx, b); err != nil {
		return err
	}
	opts := metav1.ListOptions{Limit: l.pageSize()}
	for {
		nodes, err := l.Core.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return apiErrorf("list nodes: %w", err)
		}
		for i := range nodes.Items {
			if err := b.AddNode(&nodes.Items[i]); err != nil {
				return apiErrorf("node %s: %w", nodes.Items[i].Name, err)
			}
		}
		if opts.Continue = nodes.Continue; opts.Continue == "" {
			break
		}
	}
	opts = metav1.ListOptions{Limit: l.pageSize(), FieldSelector: "status.phase!=Succeeded,status.phase!=Failed"}
	for {
		pods, err := l.Core.CoreV1().Pods("").List(ctx, opts)
		if err != nil {
			return apiErrorf("list pods: %w", err)
		}
		for i := range pods.Items {
			if err := b.AddPod(&pods.Items[i]); err != nil {
				p := &pods.Items[i]
				return apiErrorf("pod %s/%s: %w", p.Namespace, p.Name, err)
			}
		}
		if opts.Continue = pods.Continue; opts.Continue == "" {
			break
		}
	}
	return nil
}

// loadDeviceClasses adds the DeviceClasses (resource.k8s.io/v1), which say
// which extended resources DRA serves. A cluster that does not serve the
// API has none; a user who may not list them is told that pods asking for
// an extended resource DRA serves are judged from node allocatable.
func (l *Live) loadDeviceClasses(ctx context.Context, b *Builder) error {
	classes, err := l.Core.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsForbidden(err):
		l.Notes = append(l.Notes, "cannot list deviceclasses (resource.k8s.io/v1): pods asking for an extended resource that DRA serves are judged as if the device plugin served it, and DRA_NOT_JUDGED only comes from resource claims")
		return nil
	case err != nil:
		return apiErrorf("list deviceclasses: %w", err)
	}
	for i := range classes.Items {
		if err := b.AddDeviceClass(&classes.Items[i]); err != nil {
			return apiErrorf("deviceclass %s: %w", classes.Items[i].Name, err)
		}
	}
	return nil
}

// Job gets a job of a supported kind. kind names one kind as kubectl
// takes it ("PyTorchJob", "mpijobs", any case) or is "" to try every
// kind; a name that two kinds use is an error asking for the kind.
func (l *Live) Job(ctx context.Context, namespace, name, kind string) (kubeflow.Job, error) {
	cands := kubeflow.All()
	if kind != "" {
		k, ok := kubeflow.ByResource(kind)
		if !ok || strings.Contains(kind, ".") {
			return nil, &ArgError{Msg: fmt.Sprintf("kind %q: want %s", kind, kubeflow.KindList("or"))}
		}
		cands = []kubeflow.Kind{k}
	}
	var found []kubeflow.Job
	for _, c := range cands {
		u, err := l.Dynamic.Resource(c.GVR()).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, apiErrorf("get %s %s/%s: %w", c.GVK().Kind, namespace, name, err)
		}
		j, err := kubeflow.FromUnstructured(u)
		if err != nil {
			return nil, &APIError{Err: err}
		}
		found = append(found, j)
	}
	switch len(found) {
	case 0:
		what := kubeflow.KindList("or")
		if len(cands) == 1 {
			what = cands[0].GVK().Kind
		}
		return nil, &NotFoundError{What: fmt.Sprintf("%s %s/%s (or its CRD is not installed)", what, namespace, name)}
	case 1:
		return found[0], nil
	}
	kinds := make([]string, len(found))
	for i, j := range found {
		kinds[i] = article(j.Kind()) + " " + j.Kind()
	}
	both := "both "
	if len(kinds) > 2 {
		both = ""
	}
	return nil, &ArgError{Msg: fmt.Sprintf("%s%s are named %s/%s: say which with --kind", both, strings.Join(kinds, " and "), namespace, name)}
}

// Pod gets one pod.
func (l *Live) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	p, err := l.Core.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, &NotFoundError{What: fmt.Sprintf("pod %s/%s", namespace, name)}
	}
	if err != nil {
		return nil, apiErrorf("get pod %s/%s: %w", namespace, name, err)
	}
	return p, nil
}

// JobOfPod returns the Kubeflow job a pod belongs to, if any.
func (l *Live) JobOfPod(ctx context.Context, p *corev1.Pod) (kubeflow.Job, bool, error) {
	kind, name := jobOf(p)
	if name == "" {
		return nil, false, nil
	}
	j, err := l.Job(ctx, p.Namespace, name, kind)
	var nf *NotFoundError
	if errors.As(err, &nf) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return j, true, nil
}

// article is "a" or "an" before a kind's name as it is read aloud: an
// acronym by its first letter's name (an MPIJob), a word by its first
// letter (a PyTorchJob).
func article(kind string) string {
	if kind == "" {
		return "a"
	}
	vowels := "AEIOU"
	if len(kind) > 1 && unicode.IsUpper(rune(kind[1])) {
		vowels = "AEFHILMNORSX" // letters whose names start with a vowel sound
	}
	if strings.ContainsRune(vowels, unicode.ToUpper(rune(kind[0]))) {
		return "an"
	}
	return "a"
}
