package decision

import (
	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// Gang is one job's ranks as the leader holds them until its verdict
// (package gangstore: reports in, answers out).
type Gang = gangstore.Gang[Decision]

// Trigger says why a gang is decided.
type Trigger int

const (
	OnComplete    Trigger = iota // every expected rank reported
	OnEarlyFail                  // the ranks so far already fail together
	OnDeadline                   // gang timeout with ranks missing
	OnUnplaceable                // a missing rank's pod can never be placed
	OnPending                    // the Pending watchdog: hopeless, or past the pending timeout
)

func (t Trigger) String() string {
	return [...]string{"complete", "early-fail", "deadline", "unplaceable", "pending"}[t]
}

// Ask is a request to decide a gang now, and why.
type Ask struct {
	Why     Trigger
	Missing map[int]preflight.MissingRank
	Pre     *verdict.Report // the Pending watchdog's verdict, instead of the gang rules'
}

// ReadyTrigger is why a gang whose Add answered ready is to be decided;
// false: not yet.
func ReadyTrigger(ready gangstore.Ready) (Trigger, bool) {
	switch ready {
	case gangstore.Complete:
		return OnComplete, true
	case gangstore.EarlyFail:
		return OnEarlyFail, true
	}
	return 0, false
}

// JobKey names job j's gang: namespace/kind/name.
func JobKey(j kubeflow.Job) string {
	return j.Namespace() + "/" + j.Kind() + "/" + j.Name()
}
