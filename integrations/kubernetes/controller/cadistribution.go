package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// caNamespaces are the namespaces whose CA ConfigMap the leader keeps, as
// its own cache sees them: those labelled rankgate.io/gate=enabled and
// those of the jobs opted in by their own label or annotation. A tenant
// cannot add a namespace to it by labelling a ConfigMap.
func (c *Controller) caNamespaces(ctx context.Context) (map[string]bool, error) {
	nss := &corev1.NamespaceList{}
	if err := c.client.List(ctx, nss, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	out := map[string]bool{}
	for i := range nss.Items {
		if ns := &nss.Items[i]; nsOptedIn(ns) {
			out[ns.Name] = true
		}
	}
	for _, k := range c.kinds {
		list := k.NewList()
		// Read only: the cached objects themselves, not copies.
		if err := c.client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing %s: %w", k.GVK().Kind, err)
		}
		if err := meta.EachListItem(list, func(o runtime.Object) error {
			if j, ok := o.(client.Object); ok && enabled(gateSetting(j)) {
				out[j.GetNamespace()] = true
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}
