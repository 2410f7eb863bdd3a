// Package controller is `rankgate controller`: it watches opted-in
// TrainJobs, JobSets, PyTorchJobs and MPIJobs (the kinds of package
// kubeflow) and their pods, serves the gate API (package gate) to their
// ranks, decides one gang verdict per job with preflight.GangRules,
// records it in the job's Gang and on the job, and acts on a failure
// (suspend, delete, or annotate only).
//
// Its parts, each the owner of its state: the gate's backend (reports in,
// answers out, through the gang store: package gangstore); the event
// router (package router: one handler per informer for the reconcilers);
// the job reconcilers (package jobs), the allocations reconcilers
// (package allocations) and the Pending watchdog (package watchdog): they
// read the caches and ask; the leader's writes (the one
// writer of Gangs, of rankgate's writes on jobs and of Kueue Workloads),
// with the Gang book; the node model and the pods' usage (package
// clusterstate) and the DRA caches: the cluster as the engine judges it,
// on every replica. Controller wires them.
//
// Only the leader (controller-runtime leader election) holds gangs, and it
// publishes itself as the gate Service's only endpoint (leaderendpoint.go);
// other replicas are Ready (probes), answer a rank that still reaches them
// with NotLeader and close the connection, and ranks retry on a new one.
// Gang state is in memory but nothing is lost on a restart: verdicts are
// recorded in the job's Gang (in the job's namespace) and then on the
// job, the time of a gang's first report in its Gang, and waiting ranks
// re-send their reports on every poll.
package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
	"github.com/rankgate/rankgate/integrations/kubernetes/certs"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/clusterstate"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/leader"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/metrics"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/watchdog"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	gateserver "github.com/rankgate/rankgate/integrations/kubernetes/gate/server"
	"github.com/rankgate/rankgate/preflight/schedule"
)

// Options configure the controller. Zero values take the defaults noted.
type Options struct {
	// Config reaches the API server. Its QPS/Burst are raised to QPS/Burst.
	Config *rest.Config
	Scheme *runtime.Scheme // default: Scheme()
	QPS    float32         // default 200
	Burst  int             // default 400

	// GateAddr is the gate's listen address (default ":8443"), unless
	// GateListener is given.
	GateAddr     string
	GateListener net.Listener
	// GateService names the Service in Namespace through which ranks reach
	// the gate. The leader publishes itself as its only endpoint (an
	// EndpointSlice, see leaderendpoint.go) at GateEndpointIP and the gate
	// listener's port, so that ranks' connections reach the replica that
	// decides. Empty: not published (the command's default is
	// DefaultGateService).
	GateService    string
	GateEndpointIP string // this replica's pod IP (POD_IP)
	// CertDir holds tls.crt and tls.key for the gate (watched for
	// rotation). Insecure serves plain HTTP instead: tests only.
	CertDir  string
	Insecure bool
	// Audience of the tokens ranks present (default "rankgate").
	Audience string
	// MaxWait caps a rank's long poll (default 30s).
	MaxWait time.Duration
	// GateMaxConnections bounds the gate's connections open at once
	// (default 2048): a waiting rank holds one during its long poll, so a
	// gang of more rank pods cannot all wait at once (see gatebound.go).
	GateMaxConnections int
	// AppliedDelay: how long after a verdict is on its job the Gang's
	// Applied condition is written (nil: DefaultAppliedDelay; 0: at once).
	// Nobody waits for it; written later, it stays out of the burst of
	// verdict writes when many gangs complete together.
	AppliedDelay *time.Duration
	// GangTimeout: how long after the first report of a gang the missing
	// ranks fail it (default 10m; per job: annotation rankgate.io/gang-timeout).
	GangTimeout time.Duration
	// ResendGrace: after becoming leader, how long to wait for ranks to
	// re-send their reports before a deadline may fail a gang (default
	// MaxWait + 5s).
	ResendGrace time.Duration
	// OnFail: suspend (default), delete or annotate.
	OnFail string

	// PendingGrace: how long a gated job's pod may stay unschedulable
	// before the job is judged by the schedule engine (nil:
	// DefaultPendingGrace; 0: at once; per job: annotation
	// rankgate.io/pending-grace).
	PendingGrace *time.Duration
	// PendingTimeout fails a job still waiting this long with
	// PENDING_TIMEOUT (default 0: never; per job rankgate.io/pending-timeout).
	PendingTimeout time.Duration
	// MIGReconfigure: "off" (default) or "on-demand" (the cluster changes
	// MIG layouts by itself: RECONFIGURABLE waits instead of failing).
	MIGReconfigure string

	// MetricsAddr serves /metrics (default ":8080"; "0" disables): over
	// HTTPS with CertDir's certificate, to clients the API server
	// authenticates and authorizes for GET on the URL, unless the address
	// is on loopback, which is served in clear.
	MetricsAddr string
	HealthAddr  string // default ":8081"; "0" disables

	// Namespace is the controller's own namespace: its leader election
	// Lease and certificates live there (default: LeaderElectionNamespace;
	// the command passes the pod's namespace).
	Namespace string

	LeaderElection          bool
	LeaderElectionID        string // default "rankgate-controller"
	LeaderElectionNamespace string // default: Namespace
	LeaseDuration           time.Duration
	RenewDeadline           time.Duration
	RetryPeriod             time.Duration

	// Profiling serves net/http/pprof under /debug/pprof/ on the metrics
	// address.
	Profiling bool

	// ReleaseMemoryAfterSync returns the initial list's garbage to the
	// operating system once the caches are synced (debug.FreeOSMemory): the
	// list of tens of thousands of objects is transient, the trimmed caches
	// are a fraction of it. Process-wide; the command sets it.
	ReleaseMemoryAfterSync bool

	// FullCaches keeps whole objects in the informer caches instead of the
	// trimmed ones (for measuring what trimming saves; never in production).
	FullCaches bool

	// The admission webhooks and the controller's own certificates.
	WebhookOptions

	// Identity names this replica in rankgate.io/decided-by (default the
	// host name).
	Identity string
	Log      logr.Logger
	// Clock: where the controller reads the time and arms its deadlines
	// and delays (nil: the real clock; tests pass a fake one).
	Clock clock.WithTickerAndDelayedExecution
}

// Defaults of Options (and of rankgate controller's flags).
const (
	DefaultQPS          = 200
	DefaultBurst        = 400
	DefaultGateAddr     = ":8443"
	DefaultMaxWait      = 30 * time.Second
	DefaultGangTimeout  = 10 * time.Minute
	DefaultMetricsAddr  = ":8080"
	DefaultHealthAddr   = ":8081"
	DefaultOnFail       = ActionSuspend
	DefaultPendingGrace = 10 * time.Second
	// DefaultAppliedDelay: see Options.AppliedDelay.
	DefaultAppliedDelay = 5 * time.Second
	// DefaultGateMaxConnections: see Options.GateMaxConnections.
	DefaultGateMaxConnections = gateserver.DefaultMaxConns
)

func (o *Options) defaults() error {
	if o.Config == nil {
		return errors.New("controller: no API server config")
	}
	if o.Scheme == nil {
		o.Scheme = Scheme()
	}
	if o.QPS == 0 {
		o.QPS = DefaultQPS
	}
	if o.Burst == 0 {
		o.Burst = DefaultBurst
	}
	if o.GateAddr == "" {
		o.GateAddr = DefaultGateAddr
	}
	if o.Audience == "" {
		o.Audience = gate.Audience
	}
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.GateMaxConnections <= 0 {
		o.GateMaxConnections = DefaultGateMaxConnections
	}
	if err := durationDefault(&o.AppliedDelay, DefaultAppliedDelay, "AppliedDelay"); err != nil {
		return err
	}
	if o.GangTimeout <= 0 {
		o.GangTimeout = DefaultGangTimeout
	}
	if o.ResendGrace <= 0 {
		o.ResendGrace = o.MaxWait + 5*time.Second
	}
	if o.OnFail == "" {
		o.OnFail = DefaultOnFail
	}
	if err := o.pendingDefaults(); err != nil {
		return err
	}
	if !ValidAction(o.OnFail) {
		return fmt.Errorf("on-fail %q: want suspend, delete or annotate", o.OnFail)
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = DefaultMetricsAddr
	}
	if o.HealthAddr == "" {
		o.HealthAddr = DefaultHealthAddr
	}
	if o.LeaderElectionID == "" {
		o.LeaderElectionID = "rankgate-controller"
	}
	if o.Namespace == "" {
		o.Namespace = o.LeaderElectionNamespace
	}
	if o.Namespace == "" {
		return errors.New("controller: its own namespace (Options.Namespace) is unknown")
	}
	if o.LeaderElectionNamespace == "" {
		o.LeaderElectionNamespace = o.Namespace
	}
	if o.Identity == "" {
		o.Identity, _ = os.Hostname()
	}
	o.webhookDefaults()
	if !o.Insecure && o.CertDir == "" {
		return errors.New("controller: --cert-dir is required (tls.crt and tls.key for the gate's HTTPS)")
	}
	return nil
}

// Controller is one replica of `rankgate controller`.
type Controller struct {
	opts   Options
	log    logr.Logger
	mgr    manager.Manager
	client client.Client // cached reads, writes
	api    client.Reader // uncached reads
	// gangAPI reads and writes Gangs: uncached (no informer: finished
	// Gangs are history), and without a client-side rate limit, like
	// TokenReviews: verdict writes are on the ranks' path; progress
	// writes have their own pace (package leader, progress.go).
	gangAPI client.Client
	rec     events.EventRecorder
	gate    *gateserver.Server
	backend *gateBackend // the gate's backend: reports in, answers out (backend.go)
	kinds   []kubeflow.Kind
	engine  *schedule.Engine    // judges whether a missing rank can ever be placed
	wd      *watchdog.Watchdog  // the Pending watchdog: jobs with unschedulable pods (pending.go)
	state   *clusterstate.State // the nodes and the pods' usage as the engine judges them, fed by the informers (model.go, usage.go)
	certs   *certs.Rotator      // the controller's own CA (ManageCerts)
	caDist  *certs.Distributor  // the one writer of the CA ConfigMaps (nil: no bundle to give)
	// dra: the DRA informers, where resource.k8s.io/v1 is served (dra.go).
	dra draCaches
	// webhookCert serves the webhook port's certificate (registerWebhooks).
	webhookCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	jobCA       sync.Map // namespace -> fingerprint (certs.CAHash) of the CA bundle written there (ensureJobCA)

	unexpected  uidSet        // pods reported as not the job's (podfit.go); max maxMisfits
	placements  placementMemo // placement rules read of unbound pods (podfacts.go)
	batchOwners batchOwners   // the MPIJob (or none) controlling each batch Job read (gatepod.go)

	leader      atomic.Bool
	synced      atomic.Bool
	leaderSince atomic.Int64 // unix nanos

	gangs *gangstore.Store[decision.Decision] // the open gangs (reports in, answers out)

	// w: the leader's writes (package leader), the one writer of Gangs,
	// of rankgate's writes on jobs and of Kueue Workloads, with the Gang
	// book of the jobs being gated.
	w *leader.Writes
}

// managerOptions are the controller-runtime manager's options for opts.
func managerOptions(opts Options, kinds []kubeflow.Kind) manager.Options {
	mopts := manager.Options{
		Scheme:                        opts.Scheme,
		Logger:                        opts.Log,
		Cache:                         cacheOptions(kinds, !opts.FullCaches),
		Metrics:                       metricsOptions(opts),
		HealthProbeBindAddress:        opts.HealthAddr,
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              opts.LeaderElectionID,
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       ptrDuration(10 * time.Second),
	}
	if opts.HealthAddr == "0" {
		mopts.HealthProbeBindAddress = "0"
	}
	if opts.LeaseDuration > 0 {
		mopts.LeaseDuration = ptrDuration(opts.LeaseDuration)
	}
	if opts.RenewDeadline > 0 {
		mopts.RenewDeadline = ptrDuration(opts.RenewDeadline)
	}
	if opts.RetryPeriod > 0 {
		mopts.RetryPeriod = ptrDuration(opts.RetryPeriod)
	}
	return mopts
}

// gateCertificate is where the gate's serving certificate comes from: the
// controller's own CA, or the files in CertDir (watched, so that a renewal
// needs no restart); nil with Insecure (tests only).
func (c *Controller) gateCertificate(mgr manager.Manager) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	if c.certs != nil {
		return c.certs.GetCertificate, nil
	}
	if c.opts.Insecure {
		return nil, nil
	}
	cw, err := certwatcher.New(filepath.Join(c.opts.CertDir, "tls.crt"), filepath.Join(c.opts.CertDir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("controller: gate certificate in %s: %w", c.opts.CertDir, err)
	}
	if err := mgr.Add(cw); err != nil {
		return nil, err
	}
	return cw.GetCertificate, nil
}

// newController is a replica's in-memory state for opts (defaulted),
// without its clients: New adds them, unit tests add fakes.
func newController(opts Options) *Controller {
	c := &Controller{opts: opts, log: opts.Log, gangs: gangstore.New[decision.Decision](gangstore.Gauges{Gangs: metrics.Gangs, Waiting: metrics.Waiting}),
		engine: schedule.New()}
	c.unexpected.max = maxMisfits
	c.wd = c.newWatchdog()
	return c
}

// New builds the manager, the caches, the reconcilers and the gate.
func New(opts Options) (*Controller, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	metrics.Register()
	cfg := rest.CopyConfig(opts.Config)
	cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	c := newController(opts)
	kinds, err := installedKinds(cfg, opts.Scheme, c.log)
	if err != nil {
		return nil, err
	}
	c.kinds = kinds
	c.state = clusterstate.New(c.engine, c.clock())

	mopts := managerOptions(opts, kinds)
	ws, err := c.webhookServer()
	if err != nil {
		return nil, err
	}
	if ws != nil {
		mopts.WebhookServer = ws
	}
	mgr, err := manager.New(cfg, mopts)
	if err != nil {
		return nil, fmt.Errorf("controller: manager: %w", err)
	}
	if err := c.setupCerts(mgr); err != nil {
		return nil, err
	}
	c.mgr = mgr
	if err := indexPodsByJob(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return nil, fmt.Errorf("controller: indexing pods by job: %w", err)
	}
	c.client = mgr.GetClient()
	c.api = mgr.GetAPIReader()
	c.rec = mgr.GetEventRecorder("rankgate-controller")

	// TokenReviews are bounded by the ranks' requests and by the
	// authenticator's cache and concurrency limit, and sit on the path from
	// a rank's report to its verdict: no client-side rate limit for them
	// (the API server's priority and fairness still applies). Nor for
	// verdict writes (Gangs).
	trCfg := rest.CopyConfig(cfg)
	trCfg.QPS, trCfg.Burst = -1, 0
	// They also get a connection of their own: client-go sends all of a
	// configuration's requests over one HTTP/2 connection, where they
	// would queue behind the informers' watch streams and the bulk writes
	// (a dial function of its own gives the client a transport of its own).
	if trCfg.Dial == nil {
		trCfg.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	cs, err := kubernetes.NewForConfig(trCfg)
	if err != nil {
		return nil, err
	}
	if c.gangAPI, err = client.New(trCfg, client.Options{Scheme: opts.Scheme, Mapper: mgr.GetRESTMapper()}); err != nil {
		return nil, err
	}
	getCert, err := c.gateCertificate(mgr)
	if err != nil {
		return nil, err
	}
	qs := leader.NewQueues()
	c.w = c.newWrites(&qs)
	c.backend = c.gateBackend()
	c.gate = gateserver.New(gateserver.Options{
		Addr: opts.GateAddr, Listener: opts.GateListener, GetCertificate: getCert,
		Auth:    gateserver.NewTokenReviewAuthenticator(cs.AuthenticationV1().TokenReviews(), opts.Audience, time.Minute),
		Backend: c.backend, MaxWait: opts.MaxWait, MaxConns: opts.GateMaxConnections, Log: c.log.WithName("gate"), Observe: metrics.ObserveRequest,
	})
	if err := mgr.Add(c.gate); err != nil {
		return nil, err
	}
	if err := c.registerWebhooks(mgr, ws, selfUser(cs, c.log)); err != nil {
		return nil, err
	}
	if ws != nil {
		_ = mgr.GetWebhookServer() // adds it to the manager: every replica serves
	}
	// Every replica syncs its caches and is Ready once they are (and the
	// gate listens): a standby serves probes and answers the gate with
	// NotLeader, so that it neither stalls a rolling update nor blocks a
	// drain. Only the leader holds gangs (watchLeadership).
	if err := mgr.Add(everyReplica(c.watchSync)); err != nil {
		return nil, err
	}
	if err := mgr.Add(manager.RunnableFunc(c.watchLeadership)); err != nil {
		return nil, err
	}
	if err := c.setupReconcilers(); err != nil {
		return nil, err
	}
	podsCS, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if err := c.startUsage(context.Background(), podsCS); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("caches", func(*http.Request) error {
		if !c.synced.Load() {
			return errors.New("informer caches not synced")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("gate", func(*http.Request) error {
		select {
		case <-c.gate.Serving():
			return nil
		default:
			return errors.New("gate not listening")
		}
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Start runs until ctx ends or the manager fails (for example when this
// replica loses its lease).
func (c *Controller) Start(ctx context.Context) error { return c.mgr.Start(ctx) }

// GateAddr opens the gate's listener if needed and returns its address.
func (c *Controller) GateAddr() (net.Addr, error) { return c.gate.Listen() }

// Decisions counts the verdicts this replica decided and recorded itself
// (adopted ones not included).
func (c *Controller) Decisions() int64 { return c.w.Decisions() }

// IsLeader reports whether this replica holds the gangs.
func (c *Controller) IsLeader() bool { return c.leader.Load() }

// everyReplica is a runnable that runs whether or not this replica leads.
type everyReplica func(context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (everyReplica) NeedLeaderElection() bool { return false }

// watchSync marks the caches synced (readiness), on every replica.
func (c *Controller) watchSync(ctx context.Context) error {
	if c.mgr.GetCache().WaitForCacheSync(ctx) {
		c.synced.Store(true)
		if c.opts.ReleaseMemoryAfterSync {
			debug.FreeOSMemory()
		}
	}
	return nil
}

// watchLeadership runs on the leader only (manager.RunnableFunc needs the
// lease): it marks this replica leader, then loads the verdicts an
// earlier leader recorded and did not apply (leader.Writes.Sweep) before the gate
// answers ranks, and works the leader's writes (package leader).
func (c *Controller) watchLeadership(ctx context.Context) error {
	c.leaderSince.Store(c.now().UnixNano())
	c.leader.Store(true)
	c.log.Info("leading: this replica holds the gangs", "identity", c.opts.Identity)
	c.w.Run(ctx, nil)
	go c.w.Sweep(ctx)
	published := c.publishGateEndpoint(ctx) // the gate Service routes to this replica
	<-ctx.Done()
	c.leader.Store(false)
	published() // withdrawn before the lease is released
	return nil
}

// installedKinds keeps the job kinds whose CRDs the API server serves.
func installedKinds(cfg *rest.Config, scheme *runtime.Scheme, log logr.Logger) ([]kubeflow.Kind, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	mapper, err := newMapper(cfg, hc)
	if err != nil {
		return nil, err
	}
	var out []kubeflow.Kind
	for _, k := range kubeflow.All() {
		if _, err := mapper.RESTMapping(k.GVK().GroupKind(), k.GVK().Version); err != nil {
			if meta.IsNoMatchError(err) {
				log.Info("job kind not served by the API server; not watched", "kind", k.GVK().String())
				continue
			}
			return nil, fmt.Errorf("controller: discovering %s: %w", k.GVK(), err)
		}
		if !scheme.Recognizes(k.GVK()) {
			return nil, fmt.Errorf("controller: scheme lacks %s", k.GVK())
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("controller: %s is installed; install the Kubeflow training operator, the MPI operator, Kubeflow Trainer or JobSet first", noKindInstalled())
	}
	return out, nil
}

// noKindInstalled names every supported kind with its API version, for
// the error when none is served: "neither PyTorchJob (kubeflow.org/v1)
// nor MPIJob (kubeflow.org/v2beta1)".
func noKindInstalled() string {
	var names []string
	for _, k := range kubeflow.All() {
		names = append(names, fmt.Sprintf("%s (%s)", k.GVK().Kind, k.GVK().GroupVersion()))
	}
	if len(names) == 2 {
		return "neither " + names[0] + " nor " + names[1]
	}
	return "none of " + strings.Join(names, ", ")
}

// Scheme has the built-in kinds, every supported job kind and Gang.
func Scheme() *runtime.Scheme {
	s := kubeflow.NewScheme()
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

func newMapper(cfg *rest.Config, hc *http.Client) (meta.RESTMapper, error) {
	return apiutil.NewDynamicRESTMapper(cfg, hc)
}
