// Package v1alpha1 is the rankgate.io/v1alpha1 API: the Gang resource, one
// per gated job attempt, in the job's namespace and owned by the job. The
// controller alone writes it (configs/deploy/rbac.yaml); people and tools
// read it (`kubectl get gangs -A`, `rankgate status`).
//
// +kubebuilder:object:generate=true
// +groupName=rankgate.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is rankgate.io/v1alpha1.
	GroupVersion = schema.GroupVersion{Group: "rankgate.io", Version: "v1alpha1"}
	// SchemeBuilder registers the types of this API.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Gang{}, &GangList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
