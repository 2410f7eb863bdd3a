package gangstatus

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
)

// WatchOptions bound a Watch.
type WatchOptions struct {
	// RequestTimeout bounds each list call (0: none).
	RequestTimeout time.Duration
	// Deadline is how long one watch call stays open before the API
	// server ends it and Watch reconnects from where it was.
	Deadline time.Duration
}

// DefaultWatchDeadline is the life of one watch call of Watch.
const DefaultWatchDeadline = 5 * time.Minute

// Watch calls show with job's gangs in namespace (sorted as List sorts
// them) once, then again each time one of them is added, changed or
// deleted, until ctx ends (nil) or a call fails. A watch call that ends
// at its deadline or drops is reopened from the last version seen; one
// whose version expired lists again.
func Watch(ctx context.Context, dyn dynamic.Interface, namespace string, job Job, o WatchOptions, show func([]v1alpha1.Gang) error) error {
	if o.Deadline <= 0 {
		o.Deadline = DefaultWatchDeadline
	}
	for ctx.Err() == nil {
		gangs, rv, err := listWithin(ctx, dyn, namespace, job, o.RequestTimeout)
		if err != nil {
			return ignoreEnd(ctx, err)
		}
		byName := make(map[string]v1alpha1.Gang, len(gangs))
		for _, g := range gangs {
			byName[g.Namespace+"/"+g.Name] = g
		}
		if err := show(gangs); err != nil {
			return err
		}
		if err := follow(ctx, dyn, namespace, job, o.Deadline, rv, byName, show); !errors.Is(err, errRelist) {
			return ignoreEnd(ctx, err)
		}
	}
	return nil
}

// errRelist: the version watched from is gone; list again.
var errRelist = errors.New("resource version expired")

func listWithin(ctx context.Context, dyn dynamic.Interface, namespace string, job Job, timeout time.Duration) ([]v1alpha1.Gang, string, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return list(ctx, dyn, namespace, job)
}

// follow watches from rv, keeping byName current, one watch call after
// the other, until ctx ends or the version expires (errRelist).
func follow(ctx context.Context, dyn dynamic.Interface, namespace string, job Job, deadline time.Duration, rv string, byName map[string]v1alpha1.Gang, show func([]v1alpha1.Gang) error) error {
	secs := int64(deadline / time.Second)
	for ctx.Err() == nil {
		w, err := dyn.Resource(GVR).Namespace(namespace).Watch(ctx, metav1.ListOptions{
			LabelSelector: job.selector(), ResourceVersion: rv, TimeoutSeconds: &secs, AllowWatchBookmarks: true,
		})
		if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
			return errRelist
		}
		if err != nil {
			return listError(err, namespace)
		}
		rv, err = drain(ctx, w, job, rv, byName, show)
		w.Stop()
		if err != nil {
			return err
		}
	}
	return nil
}

// drain applies the events of one watch call until it or ctx ends; it
// returns the last resource version seen.
func drain(ctx context.Context, w watch.Interface, job Job, rv string, byName map[string]v1alpha1.Gang, show func([]v1alpha1.Gang) error) (string, error) {
	for {
		var (
			ev watch.Event
			ok bool
		)
		select {
		case <-ctx.Done():
			return rv, nil
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			return rv, nil
		}
		if ev.Type == watch.Error {
			if status := apierrors.FromObject(ev.Object); apierrors.IsGone(status) || apierrors.IsResourceExpired(status) {
				return rv, errRelist
			}
			return rv, fmt.Errorf("watch gangs: %w", apierrors.FromObject(ev.Object))
		}
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		rv = u.GetResourceVersion()
		if ev.Type == watch.Bookmark {
			continue
		}
		g, err := fromUnstructured(u.Object)
		if err != nil {
			return rv, err
		}
		if !job.matches(g) {
			continue
		}
		key := g.Namespace + "/" + g.Name
		if ev.Type == watch.Deleted {
			delete(byName, key)
		} else {
			byName[key] = *g
		}
		if err := show(snapshot(byName)); err != nil {
			return rv, err
		}
	}
}

func snapshot(byName map[string]v1alpha1.Gang) []v1alpha1.Gang {
	out := make([]v1alpha1.Gang, 0, len(byName))
	for _, g := range byName {
		out = append(out, g)
	}
	Sort(out)
	return out
}

// ignoreEnd: an error because ctx ended (Ctrl-C) is the normal end.
func ignoreEnd(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
