package apicalls

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// GetFresh reads from the cache and falls back to the API server when the
// cache does not have the object yet or has an older one (uid differs).
func GetFresh(ctx context.Context, cache, api client.Reader, key types.NamespacedName, obj client.Object, wantUID string) error {
	err := cache.Get(ctx, key, obj)
	if err == nil && (wantUID == "" || string(obj.GetUID()) == wantUID) {
		return nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return api.Get(ctx, key, obj)
}
