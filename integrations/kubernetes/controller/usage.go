package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
)

// The pods' usage (clusterstate.Usage) is fed from two informers: the
// pod cache (the Kubeflow replica pods; cache.go keeps a bound pod's
// effective request) and a slim informer over every other bound,
// unfinished pod (label selector: no job-name label), which keeps only
// identity, node, phase and request. Nothing re-reads the cluster.

// otherPodsInformer watches every bound, unfinished pod without the
// job-name label (the pod cache holds the others), keeping slim copies.
func otherPodsInformer(cs kubernetes.Interface) toolscache.SharedIndexInformer {
	opts := func(o *metav1.ListOptions) {
		o.LabelSelector = "!" + LabelJobName
		o.FieldSelector = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
	}
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			opts(&o)
			return cs.CoreV1().Pods("").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			opts(&o)
			return cs.CoreV1().Pods("").Watch(ctx, o)
		},
	}
	inf := toolscache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, toolscache.SharedIndexInformerOptions{})
	_ = inf.SetTransform(slimPod)
	return inf
}

// startUsage feeds the usage from the pod cache and from a slim informer over
// the other pods, which runs on every replica (as the caches do).
func (c *Controller) startUsage(ctx context.Context, cs kubernetes.Interface) error {
	pi, err := c.mgr.GetCache().GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	reg, err := pi.AddEventHandler(c.state.Usage.Handler("jobs"))
	if err != nil {
		return err
	}
	c.state.Usage.AddSource(reg.HasSynced)
	inf := otherPodsInformer(cs)
	oreg, err := inf.AddEventHandler(c.state.Usage.Handler("other"))
	if err != nil {
		return err
	}
	c.state.Usage.AddSource(oreg.HasSynced)
	return c.mgr.Add(everyReplica(func(ctx context.Context) error {
		inf.RunWithContext(ctx)
		return nil
	}))
}
