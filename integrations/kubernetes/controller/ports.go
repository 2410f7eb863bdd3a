package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
)

// What the gate's backend (backend.go) reads and asks: the job
// reconcilers, the allocations reconcilers and the Pending watchdog have
// their own ports in their packages (jobs.Jobs, allocations.Jobs,
// watchdog.Host, ...), served by the controller's hosts (reconcilerHost,
// watchdogHost). None of them writes: they ask the leader's
// writes, the one writer of Gangs, jobs and Kueue Workloads (package leader).

// jobView reads jobs and their pods as the gate sees them.
type jobView interface {
	// optedIn: the job is gated (its own setting, else its namespace's).
	optedIn(ctx context.Context, o client.Object) (bool, error)
	// jobOf maps a pod to its job.
	jobOf(ctx context.Context, pod *corev1.Pod) (jobRef, bool, error)
}

// gangAsks are the open gangs and what the gate asks of the writes
// about them.
type gangAsks interface {
	// openGang is the gang of the job with uid, nil when none is held.
	openGang(uid types.UID) *gang
	// ensureGang is j's gang, created (with its Gang asked for) if needed.
	ensureGang(j job) *gang
	// startClock sets g's first report at (the earliest known) and arms
	// its deadline.
	startClock(g *gang, at time.Time)
	// touchProgress asks for g's progress to be written (at once: soon).
	touchProgress(uid types.UID, soon bool)
	// askDecide asks for g to be decided, ahead of every other write.
	askDecide(g *gang, a decision.Ask)
}

func (c *Controller) verdictsLoaded() bool { return c.w.Recovered() }

func (c *Controller) cachedJob(ctx context.Context, k kubeflow.Kind, key types.NamespacedName) (client.Object, error) {
	obj := k.New()
	if err := c.client.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return obj, nil
}

func (c *Controller) openGang(uid types.UID) *gang { return c.gangs.Get(uid) }
