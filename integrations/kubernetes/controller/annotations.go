package controller

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/leader"
)

// gateSetting is the job's own opt-in setting (contract.GateSetting).
func gateSetting(o client.Object) string {
	return contract.GateSetting(o.GetLabels(), o.GetAnnotations())
}

func enabled(v string) bool { return contract.GateEnabled(v) }

// Fail policies (package decision).
const (
	ActionSuspend  = decision.ActionSuspend
	ActionDelete   = decision.ActionDelete
	ActionAnnotate = decision.ActionAnnotate
)

// ValidAction reports whether s is a fail policy.
func ValidAction(s string) bool { return decision.ValidAction(s) }

// LabelKueueQueue is Kueue's queue label: a job that carries it is
// Kueue's to admit (package leader stops it through its Workload).
const LabelKueueQueue = leader.LabelKueueQueue

// WorkloadGVK is Kueue's Workload as the controller reads and patches it
// (package leader).
var WorkloadGVK = leader.WorkloadGVK
