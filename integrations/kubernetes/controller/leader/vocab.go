package leader

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
)

// gang is one job's ranks as the gate holds them (decision.Gang).
type gang = decision.Gang

// asJob adapts a typed job; the objects the writes read are made by the
// kinds of the registry, so only a programming error fails.
func asJob(o client.Object) kubeflow.Job {
	j, err := kubeflow.FromObject(o)
	if err != nil {
		panic(fmt.Sprintf("leader: %v", err))
	}
	return j
}
