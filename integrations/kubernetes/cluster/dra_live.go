package cluster

import (
	"context"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// loadDRA adds the ResourceSlices, ResourceClaims,
// ResourceClaimTemplates and DeviceTaintRules (resource.k8s.io/v1) that
// DRA jobs are judged on. A cluster that does not serve the API has none; a user who may not
// list them is told that DRA jobs are not judged (DRA_NOT_JUDGED).
func (l *Live) loadDRA(ctx context.Context, b *Builder) error {
	api := l.Core.ResourceV1()
	forbidden := func(err error, what string) (bool, error) {
		switch {
		case err == nil:
			return false, nil
		case apierrors.IsNotFound(err):
			return true, nil
		case apierrors.IsForbidden(err):
			l.Notes = append(l.Notes, "cannot list "+what+" (resource.k8s.io/v1): jobs whose devices come through DRA are not judged (DRA_NOT_JUDGED)")
			return true, nil
		}
		return true, apiErrorf("list %s: %w", what, err)
	}
	slices, err := api.ResourceSlices().List(ctx, metav1.ListOptions{})
	if stop, err := forbidden(err, "resourceslices"); stop {
		return err
	}
	claims, err := api.ResourceClaims("").List(ctx, metav1.ListOptions{})
	if stop, err := forbidden(err, "resourceclaims"); stop {
		return err
	}
	templates, err := api.ResourceClaimTemplates("").List(ctx, metav1.ListOptions{})
	if stop, err := forbidden(err, "resourceclaimtemplates"); stop {
		return err
	}
	// DeviceTaintRules are served in v1 from Kubernetes 1.37: an older
	// API server has none that the scheduler applies to v1 slices.
	rules, err := api.DeviceTaintRules().List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		rules, err = &resourcev1.DeviceTaintRuleList{}, nil
	}
	if stop, err := forbidden(err, "devicetaintrules"); stop {
		return err
	}
	// Slices last: without claims and templates the judgement would be
	// wrong, so a partial read leaves DRA jobs unjudged.
	for i := range claims.Items {
		if err := b.AddResourceClaim(&claims.Items[i]); err != nil {
			return apiErrorf("resourceclaim %s/%s: %w", claims.Items[i].Namespace, claims.Items[i].Name, err)
		}
	}
	for i := range templates.Items {
		if err := b.AddResourceClaimTemplate(&templates.Items[i]); err != nil {
			return apiErrorf("resourceclaimtemplate %s/%s: %w", templates.Items[i].Namespace, templates.Items[i].Name, err)
		}
	}
	for i := range rules.Items {
		if err := b.AddDeviceTaintRule(&rules.Items[i]); err != nil {
			return apiErrorf("devicetaintrule %s: %w", rules.Items[i].Name, err)
		}
	}
	for i := range slices.Items {
		if err := b.AddResourceSlice(&slices.Items[i]); err != nil {
			return apiErrorf("resourceslice %s: %w", slices.Items[i].Name, err)
		}
	}
	return nil
}
