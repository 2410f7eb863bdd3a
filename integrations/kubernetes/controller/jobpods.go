package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// podJobIndex indexes the cached pods by their job-name label. Listing a
// job's pods by label selector walks every cached pod of the namespace
// (the cache indexes namespaces, not labels): with a thousand gated jobs
// in one namespace that was most of the controller's CPU, each reconcile
// and each new gang reading 8,000 pods. The index makes it the job's own
// pods.
const podJobIndex = "rankgate.io/job-name"

func indexPodsByJob(ctx context.Context, idx client.FieldIndexer) error {
	return idx.IndexField(ctx, &corev1.Pod{}, podJobIndex, func(o client.Object) []string {
		if name, ok := o.GetLabels()[LabelJobName]; ok {
			return []string{name}
		}
		return nil
	})
}

// listJobPods lists the cached pods of namespace ns labelled with job
// name (of any job of that name: callers check the owner's UID).
func (c *Controller) listJobPods(ctx context.Context, ns, name string, pods *corev1.PodList) error {
	return c.client.List(ctx, pods, client.InNamespace(ns), client.MatchingFields{podJobIndex: name})
}
