package leader

import (
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
)

// gang is one job's ranks as the gate holds them (decision.Gang).
type gang = decision.Gang
