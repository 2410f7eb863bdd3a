//go:build !rankgate_node

package app

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/zapr"
	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/internal/fileinput"
	"github.com/rankgate/rankgate/verdict"
)

func init() { extraCommands = append(extraCommands, (*App).newControllerCommand) }

// inClusterNamespaceFile is where a pod finds its own namespace.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// defaultControllerNamespace: the shipped install's namespace, for a
// controller run outside a pod without --namespace.
const defaultControllerNamespace = "rankgate-system"

func (a *App) newControllerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Decide job-wide (gang) verdicts for opted-in PyTorchJobs and MPIJobs",
		Long: `controller watches opted-in PyTorchJobs (kubeflow.org/v1) and MPIJobs
(kubeflow.org/v2beta1) and their pods, serves the gate API over HTTPS to the
ranks' init containers (rankgate init), decides one verdict per job over all
ranks' reports, records it on the job under rankgate.io/, emits an Event,
and on a fail suspends the job (or deletes it, or only annotates it).

Run two replicas with --leader-elect: only the leader holds gangs; the
other answers the gate with NotLeader and ranks retry.`,
		Example: `  rankgate controller --cert-dir /etc/rankgate/tls
  rankgate controller --kubeconfig ~/.kube/config --gate-addr 127.0.0.1:8443 \
    --cert-dir ./certs --gang-timeout 5m --leader-elect=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runController(cmd) },
	}
	f := cmd.Flags()
	f.String("kubeconfig", "", "kubeconfig file (default: in-cluster config, then $KUBECONFIG)")
	f.String("gate-addr", ":8443", "HOST:PORT the gate API listens on (HTTPS)")
	f.String("cert-dir", "/etc/rankgate/tls", "directory with tls.crt and tls.key for the gate (reloaded when they change)")
	f.Duration("gang-timeout", 10*time.Minute, "fail a gang when ranks are still missing this long after its first report (per job: annotation rankgate.io/gang-timeout)")
	f.String("on-fail", controller.ActionSuspend, "what to do to a job whose gang fails: suspend, delete or annotate (per job: annotation rankgate.io/on-fail)")
	f.String("audience", gate.Audience, "audience the ranks' service-account tokens must carry")
	f.Duration("max-wait", 30*time.Second, "longest long poll the gate holds open")
	f.String("metrics-addr", ":8080", "Prometheus /metrics address: HTTPS for callers the API server authorizes (get on /metrics), in clear only on loopback (0 disables)")
	f.String("health-addr", ":8081", "/healthz and /readyz address (0 disables)")
	f.Bool("leader-elect", true, "elect a leader among replicas (Lease rankgate-controller); only the leader holds gangs")
	f.String("namespace", "", "the controller's own namespace, where it keeps its verdict records (default: the pod's namespace; outside a pod "+defaultControllerNamespace+")")
	f.String("leader-election-namespace", "", "namespace of the Lease (default: --namespace)")
	f.Float32("kube-api-qps", 200, "client-side rate limit towards the API server")
	f.Int("kube-api-burst", 400, "client-side burst towards the API server")
	f.Bool("trim-caches", true, "keep only the fields the controller reads in its informer caches")
	_ = f.MarkHidden("trim-caches")
	f.Bool("profiling", false, "serve Go pprof profiles under /debug/pprof/ on the metrics address")
	return cmd
}

func (a *App) runController(cmd *cobra.Command) error {
	cfg := a.Config
	// The controller is a long-running service: log at info unless told.
	if !cmd.Flags().Changed("log-level") && os.Getenv("RANKGATE_LOG_LEVEL") == "" && cfg.File == "" {
		if l, err := newLogger(a.Streams.Err, "info", cfg.LogFormat); err == nil {
			a.Log = l
		}
	}
	onFail := strings.ToLower(cfg.String("on-fail"))
	if !controller.ValidAction(onFail) {
		return verdict.Exitf(verdict.ExitUsage, "--on-fail %q: want suspend, delete or annotate", onFail)
	}
	rc, err := restConfig(cfg.String("kubeconfig"))
	if err != nil {
		return verdict.Exitf(verdict.ExitEnvironment, "%v", err)
	}
	rc.UserAgent = "rankgate-controller/" + Version
	podNS := os.Getenv("POD_NAMESPACE")
	if podNS == "" {
		// A namespace name is at most 63 bytes.
		if b, err := fileinput.ReadFile(cmd.Context(), inClusterNamespaceFile, nil, 4<<10); err == nil {
			podNS = strings.TrimSpace(string(b))
		}
	}
	leNS := firstNonEmpty(cfg.String("leader-election-namespace"), cfg.String("namespace"), podNS)
	ownNS := firstNonEmpty(cfg.String("namespace"), podNS, cfg.String("leader-election-namespace"), defaultControllerNamespace)
	leaderElect := cfg.Bool("leader-elect")
	if leaderElect && leNS == "" {
		return verdict.Exitf(verdict.ExitUsage, "--leader-election-namespace is required outside a pod (or pass --leader-elect=false)")
	}
	logger := zapr.NewLogger(a.Log)
	ctrllog.SetLogger(logger)
	identity := os.Getenv("POD_NAME")
	if identity == "" {
		identity, _ = os.Hostname()
	}
	c, err := controller.New(controller.Options{
		Config:                  rc,
		QPS:                     float32(cfg.v.GetFloat64("kube-api-qps")),
		Burst:                   cfg.Int("kube-api-burst"),
		GateAddr:                cfg.String("gate-addr"),
		CertDir:                 cfg.String("cert-dir"),
		Audience:                cfg.String("audience"),
		MaxWait:                 cfg.Duration("max-wait"),
		GangTimeout:             cfg.Duration("gang-timeout"),
		OnFail:                  onFail,
		MetricsAddr:             cfg.String("metrics-addr"),
		HealthAddr:              cfg.String("health-addr"),
		LeaderElection:          leaderElect,
		LeaderElectionNamespace: leNS,
		Namespace:               ownNS,
		Identity:                identity,
		Log:                     logger,
		FullCaches:              !cfg.Bool("trim-caches"),
		Profiling:               cfg.Bool("profiling"),
		ReleaseMemoryAfterSync:  true,
	})
	if err != nil {
		return verdict.Exitf(verdict.ExitEnvironment, "%v", err)
	}
	if err := c.Start(cmd.Context()); err != nil {
		return verdict.Exitf(verdict.ExitEnvironment, "controller: %v", err)
	}
	return nil
}

// restConfig: --kubeconfig, else in-cluster, else $KUBECONFIG.
func restConfig(path string) (*rest.Config, error) {
	if path != "" {
		return clientcmd.BuildConfigFromFlags("", path)
	}
	rc, err := rest.InClusterConfig()
	if err == nil {
		return rc, nil
	}
	if env := os.Getenv("KUBECONFIG"); env != "" {
		return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(env)}, nil).ClientConfig()
	}
	return nil, err
}
