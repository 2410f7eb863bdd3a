package certs

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
)

type fixedCA []byte

func (f fixedCA) CABundle() []byte       { return f }
func (fixedCA) Changed() <-chan struct{} { return nil }

// A pass writes every opted-in namespace's copy and then confirms the
// bundle; a namespace that refuses the write (terminating: Forbidden) keeps
// its old copy but does not hold the confirmation back.
func TestPassConfirmsPastATerminatingNamespace(t *testing.T) {
	old := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "stuck", Name: CAConfigMap,
		Annotations: map[string]string{contract.AnnotationCAHash: "old"}}, Data: map[string]string{"ca.crt": "old"}}
	cl := fake.NewClientBuilder().WithObjects(old).
		WithIndex(&corev1.ConfigMap{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).
		WithInterceptorFuncs(interceptor.Funcs{
			Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
				if o.GetNamespace() == "stuck" {
					return apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, o.GetName(), errTerminating)
				}
				return c.Update(ctx, o, opts...)
			},
		}).Build()
	var published []string
	d := &Distributor{Client: cl, Namespace: "rankgate-system", Source: fixedCA("new-bundle"),
		OptedIn: func(context.Context) (map[string]bool, error) { return map[string]bool{"ml": true, "stuck": true}, nil },
		Publish: func(_ context.Context, h string) (bool, error) { published = append(published, h); return true, nil }}
	require.NoError(t, d.distributeOnce(context.Background()))
	cm := &corev1.ConfigMap{}
	require.NoError(t, cl.Get(context.Background(), client.ObjectKey{Namespace: "ml", Name: CAConfigMap}, cm))
	require.Equal(t, "new-bundle", cm.Data["ca.crt"])
	require.Equal(t, []string{CAHash([]byte("new-bundle"))}, published, "the terminating namespace held the confirmation back")
}

var errTerminating = errTerm("namespace stuck is being terminated")

type errTerm string

func (e errTerm) Error() string { return string(e) }
