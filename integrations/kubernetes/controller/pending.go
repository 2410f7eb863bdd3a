package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/watchdog"
	"github.com/rankgate/rankgate/verdict"
)

// The Pending watchdog (package watchdog) owns what is known of gated
// jobs whose pods the scheduler cannot place; here is what it asks of the
// controller (watchdogHost): the job's pods and the job whole from the
// caches, judgements on the controller's cluster state, and the writes.
//
// A job is judged as diagnose judges it, on every relevant change (pods,
// nodes): on the engine's node model with the requests of every bound,
// unfinished pod summed per node (package clusterstate), both kept current
// from the informers. Hopelessness never depends on free capacity; what a job
// waits for does (who holds the devices), and its text changes with every
// pod bound or finished on a busy node: it is renewed at most once per
// watchdog.LiveEvery while its rule stays the same.

// MIG reconfiguration policies (Options.MIGReconfigure).
const (
	MIGReconfigureOff      = "off"
	MIGReconfigureOnDemand = "on-demand"
)

func (o *Options) pendingDefaults() error {
	if err := durationDefault(&o.PendingGrace, DefaultPendingGrace, "PendingGrace"); err != nil {
		return err
	}
	if o.PendingTimeout < 0 {
		o.PendingTimeout = 0
	}
	switch o.MIGReconfigure {
	case "":
		o.MIGReconfigure = MIGReconfigureOff
	case MIGReconfigureOff, MIGReconfigureOnDemand:
	default:
		return fmt.Errorf("mig-reconfigure %q: want off or on-demand", o.MIGReconfigure)
	}
	return nil
}

// newWatchdog is c's Pending watchdog.
func (c *Controller) newWatchdog() *watchdog.Watchdog {
	s := watchdog.Settings{Timeout: c.opts.PendingTimeout, OnDemand: c.opts.MIGReconfigure == MIGReconfigureOnDemand}
	if c.opts.PendingGrace != nil {
		s.Grace = *c.opts.PendingGrace
	}
	for _, k := range kubeflow.All() {
		s.Kinds = append(s.Kinds, k.GVK().Kind)
	}
	return watchdog.New(watchdogHost{c}, c.clock(), c.log, s)
}

// jobPods are the cached pods of the job with obj's UID that fit its spec
// (podFits: another pod with its labels and owner is ignored).
func (c *Controller) jobPods(ctx context.Context, obj client.Object) ([]*corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := c.listJobPods(ctx, pods, obj.GetNamespace(), obj.GetName()); err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if ref, ok, err := c.jobOf(ctx, p); err == nil && ok && ref.uid == obj.GetUID() {
			out = append(out, p)
		}
	}
	return c.fittingPods(kubeflow.MustFromObject(obj), out), nil
}

// watchdogHost is what the Pending watchdog asks of c.
type watchdogHost struct{ c *Controller }

func (h watchdogHost) JobPods(ctx context.Context, obj client.Object) ([]*corev1.Pod, error) {
	return h.c.jobPods(ctx, obj)
}

// JudgeLive judges job j with its cached pods as `rankgate diagnose job`
// does: against every node with the requests of every bound, unfinished
// pod (the live snapshot of package clusterstate). The same workload on
// the same snapshot is judged once: last is the job's last judgement (a
// waiting job is looked at again every watchdog.Recheck and after each
// write of its annotation).
func (h watchdogHost) JudgeLive(ctx context.Context, j job, pods []*corev1.Pod, last *watchdog.Judgement) (*watchdog.Judgement, error) {
	c := h.c
	if err := j.Validate(); err != nil {
		return nil, err
	}
	pods, err := c.judgedPods(ctx, j, pods)
	if err != nil {
		return nil, err
	}
	// A job whose devices come through DRA is judged on the published
	// devices (dra.go); where they are not known, the engine answers
	// DRA_NOT_JUDGED, a waiting cause that is never hopeless.
	dra, err := c.draState(ctx)
	if err != nil {
		return nil, err
	}
	w, _, err := jobWorkload(dra.builder(), dra, true, j, pods, false)
	if err != nil {
		return nil, err
	}
	s, err := c.state.Live(ctx)
	if err != nil {
		return nil, err
	}
	key := workloadKey(w)
	if last != nil && last.Snapshot == s.Seq && last.Key == key {
		return last, nil
	}
	return &watchdog.Judgement{Snapshot: s.Seq, Key: key, Result: c.engine.Diagnose(s.Cluster, w), Workload: w, Sig: signature(w)}, nil
}

// FullJob reads obj whole from the API server (the cache strips its pod
// templates); nil when it is gone or was replaced.
func (h watchdogHost) FullJob(ctx context.Context, k kubeflow.Kind, obj client.Object) (client.Object, error) {
	full := k.New()
	if err := h.c.api.Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}, full); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	if full.GetUID() != obj.GetUID() {
		return nil, nil
	}
	return full, nil
}

// ModelJudge judges workloads on the node model as it is now (a node
// event's re-judging, model.go): hopeless, or the model cannot judge.
// Hopelessness never depends on free capacity, so no pod's usage is
// needed; equal workloads are judged once per model generation.
func (h watchdogHost) ModelJudge() func(*watchdog.Judgement) bool {
	c := h.c
	cl, gen, err := c.state.Nodes.Cluster()
	onDemand := c.opts.MIGReconfigure == MIGReconfigureOnDemand
	return func(j *watchdog.Judgement) bool {
		return err != nil || c.state.Nodes.Hopeless(gen, j.Sig, func() bool {
			h, _ := watchdog.Cause(c.engine.Diagnose(cl, j.Workload), onDemand)
			return h
		})
	}
}

func (h watchdogHost) WantWaitingFor(obj client.Object, kind string, cause *verdict.Finding) {
	h.c.wantWaitingFor(obj, kind, cause)
}

// Fail fails job j with the Pending watchdog's report through the gang
// path (record, then apply).
func (h watchdogHost) Fail(j job, rep verdict.Report) {
	h.c.askDecide(h.c.ensureGang(j), decision.Ask{Why: decision.OnPending, Pre: &rep})
}

// durationDefault sets an optional duration that is not set to def; a
// negative one is an error of the caller.
func durationDefault(d **time.Duration, def time.Duration, name string) error {
	if *d == nil {
		*d = &def
		return nil
	}
	if **d < 0 {
		return fmt.Errorf("controller: %s %s is negative", name, **d)
	}
	return nil
}
