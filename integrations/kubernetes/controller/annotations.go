package controller

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
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
