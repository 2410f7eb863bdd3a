package apicalls

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// countingAPI is a fake API server that counts its reads.
func countingAPI(objs ...client.Object) (client.Client, *int) {
	n := new(int)
	return interceptor.NewClient(fake.NewClientBuilder().WithObjects(objs...).Build(), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			*n++
			return c.Get(ctx, key, obj, opts...)
		}}), n
}

// The cache answers when it has the object at the UID asked for (or any
// UID when none is asked for); the API server is read when the cache has
// no such object, or an older one of the same name; other cache errors
// are returned as they are.
func TestGetFreshFallsBackToTheAPIServer(t *testing.T) {
	ctx := context.Background()
	key := types.NamespacedName{Namespace: "ml", Name: "pt"}
	old := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "pt", UID: "old"}}
	cur := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "pt", UID: "new"}}
	cache := fake.NewClientBuilder().WithObjects(old).Build()
	api, reads := countingAPI(cur)

	got := &corev1.ConfigMap{}
	require.NoError(t, GetFresh(ctx, cache, api, key, got, "old"))
	require.Equal(t, types.UID("old"), got.UID)
	require.NoError(t, GetFresh(ctx, cache, api, key, got, ""))
	require.Equal(t, types.UID("old"), got.UID)
	require.Zero(t, *reads)

	require.NoError(t, GetFresh(ctx, cache, api, key, got, "new"))
	require.Equal(t, types.UID("new"), got.UID, "the cache's copy is older")
	require.Equal(t, 1, *reads)

	empty := fake.NewClientBuilder().Build()
	require.NoError(t, GetFresh(ctx, empty, api, key, got, ""))
	require.Equal(t, types.UID("new"), got.UID, "not in the cache yet")
	require.Equal(t, 2, *reads)

	missing := types.NamespacedName{Namespace: "ml", Name: "gone"}
	require.True(t, apierrors.IsNotFound(GetFresh(ctx, empty, api, missing, got, "")))

	broken := interceptor.NewClient(fake.NewClientBuilder().Build(), interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return apierrors.NewServiceUnavailable("cache down")
		}})
	require.True(t, apierrors.IsServiceUnavailable(GetFresh(ctx, broken, api, key, got, "")))
	require.Equal(t, 3, *reads, "only the missing object's read went to the API server")
}
