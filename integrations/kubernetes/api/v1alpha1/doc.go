// Package v1alpha1 is the rankgate.io/v1alpha1 API: the Gang resource, one
// per gated job attempt, in the job's namespace and owned by the job. The
// controller alone writes it (configs/deploy/rbac.yaml); people and tools
// read it (`kubectl get gangs -A`, `rankgate status`).
//
// +kubebuilder:object:generate=true
// +groupName=rankgate.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is rankgate.io/v1alpha1.
	GroupVersion = schema.GroupVersion{Group: "rankgate.io", Version: "v1alpha1"}
	// SchemeBuilder registers the types of this API.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}
	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func init() { SchemeBuilder.Register(&Gang{}, &GangList{}) }
