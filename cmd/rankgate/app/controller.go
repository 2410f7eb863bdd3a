//go:build !rankgate_node

package app

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/zapr"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/integrations/kubernetes/kubeconfig"
	mutate "github.com/rankgate/rankgate/integrations/kubernetes/webhook"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/review"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/validate"
	"github.com/rankgate/rankgate/internal/fileinput"
	"github.com/rankgate/rankgate/verdict"
)

// inClusterNamespaceFile is where a pod finds its own namespace.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// defaultControllerNamespace: the shipped install's namespace, for a
// controller run outside a pod without --namespace.
const defaultControllerNamespace = "rankgate-system"

// controllerOptions are the controller's flags; the service's own settings
// go to controller.Options as they are.
type controllerOptions struct {
	controller.Options
	// Kube are kubectl's connection flags, less -n (the controller's own
	// namespace) and --request-timeout (its watches outlive any deadline).
	Kube            kubeconfig.Flags
	TrimCaches      bool
	AdmissionChecks []string
	// InitRequests and InitLimits are --init-requests and --init-limits.
	InitRequests, InitLimits string
	// pendingGrace is --pending-grace (Options.PendingGrace points to it).
	pendingGrace time.Duration
}

func (a *App) newControllerCommand() *cobra.Command {
	o := &controllerOptions{}
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Decide job-wide (gang) verdicts for opted-in PyTorchJobs and MPIJobs",
		Long: `controller watches opted-in PyTorchJobs (kubeflow.org/v1) and MPIJobs
(kubeflow.org/v2beta1) and their pods, serves the gate API over HTTPS to the
ranks' init containers (rankgate init), decides one verdict per job over all
ranks' reports, records it on the job under rankgate.io/, emits an Event,
and on a fail suspends the job (or deletes it, or only annotates it).

Run two replicas with --leader-elect: only the leader holds gangs, and it
makes itself the only endpoint of the gate Service (--gate-service); a rank
that still reaches the other gets NotLeader and retries.`,
		Example: `  rankgate controller --cert-dir /etc/rankgate/tls
  rankgate controller --kubeconfig ~/.kube/config --gate-addr 127.0.0.1:8443 \
    --cert-dir ./certs --gang-timeout 5m --leader-elect=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runController(cmd.Context(), o) },
	}
	f := cmd.Flags()
	o.Kube.AddFlags(f, "", false)
	f.StringVar(&o.GateAddr, "gate-addr", controller.DefaultGateAddr, "HOST:PORT the gate API listens on (HTTPS)")
	f.StringVar(&o.GateService, "gate-service", controller.DefaultGateService, "Service (in --namespace) through which ranks reach the gate: the leader publishes itself, at $POD_IP and the --gate-addr port, as its only endpoint (EndpointSlice <name>-leader); empty: not published")
	f.StringVar(&o.CertDir, "cert-dir", "/etc/rankgate/tls", "directory with tls.crt and tls.key for the gate (reloaded when they change)")
	f.DurationVar(&o.GangTimeout, "gang-timeout", controller.DefaultGangTimeout, "fail a gang when ranks are still missing this long after its first report (per job: annotation rankgate.io/gang-timeout)")
	f.StringVar(&o.OnFail, "on-fail", controller.DefaultOnFail, "what to do to a job whose gang fails: suspend, delete or annotate (per job: annotation rankgate.io/on-fail)")
	f.DurationVar(&o.pendingGrace, "pending-grace", controller.DefaultPendingGrace, "judge a gated job whose pod the scheduler marked unschedulable this long with the schedule engine of diagnose; fail it when hopeless (per job: annotation rankgate.io/pending-grace; 0: at once)")
	f.DurationVar(&o.PendingTimeout, "pending-timeout", 0, "fail a job still waiting for capacity or a MIG change this long after its pod became unschedulable, with PENDING_TIMEOUT (per job: annotation rankgate.io/pending-timeout; 0: never)")
	f.StringVar(&o.MIGReconfigure, "mig-reconfigure", controller.MIGReconfigureOff, "off, or on-demand when the cluster changes MIG layouts by itself: then a job whose shape a layout change would create (RECONFIGURABLE) waits instead of failing")
	f.StringVar(&o.Audience, "audience", gate.Audience, "audience the ranks' service-account tokens must carry")
	f.DurationVar(&o.MaxWait, "max-wait", controller.DefaultMaxWait, "longest long poll the gate holds open")
	f.IntVar(&o.GateMaxConnections, "gate-max-connections", controller.DefaultGateMaxConnections, "most connections the gate serves at once; each waiting rank holds one (about 55 KiB of controller memory each), so gangs with more rank pods than this cannot all wait at once")
	f.StringVar(&o.MetricsAddr, "metrics-addr", controller.DefaultMetricsAddr, "Prometheus /metrics address: HTTPS for callers the API server authorizes (get on /metrics), in clear only on loopback (0 disables)")
	f.StringVar(&o.HealthAddr, "health-addr", controller.DefaultHealthAddr, "/healthz and /readyz address (0 disables)")
	f.BoolVar(&o.LeaderElection, "leader-elect", true, "elect a leader among replicas (Lease rankgate-controller); only the leader holds gangs")
	f.StringVarP(&o.Namespace, "namespace", "n", "", "the controller's own namespace, where it keeps its leader election Lease and certificates (default: the pod's namespace; outside a pod "+defaultControllerNamespace+")")
	f.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease (default: --namespace)")
	f.Float32Var(&o.QPS, "kube-api-qps", controller.DefaultQPS, "client-side rate limit towards the API server")
	f.IntVar(&o.Burst, "kube-api-burst", controller.DefaultBurst, "client-side burst towards the API server")
	f.BoolVar(&o.TrimCaches, "trim-caches", true, "keep only the fields the controller reads in its informer caches")
	_ = f.MarkHidden("trim-caches")
	f.StringArrayVar(&o.AdmissionChecks, "admission-check", nil, "RULE=deny|warn|off for a check of the validating webhook (repeatable; checks: "+strings.Join(validate.Checks, ", ")+"; defaults: SHAPE_MISMATCH and STRATEGY_MISMATCH deny, the others warn)")
	f.StringVar(&o.WebhookAddr, "webhook-addr", controller.DefaultWebhookAddr, "HOST:PORT every replica serves the admission webhooks on (HTTPS; 0 disables)")
	f.StringVar(&o.WebhookClientCA, "webhook-client-ca", "", "PEM file of the CA that signs the API server's client certificate for webhooks: the webhook port then accepts only clients with a certificate it signed (configure the API server's --admission-control-config-file to present one; docs/security.md)")
	f.IntVar(&o.WebhookMaxConnections, "webhook-max-connections", review.DefaultMaxConns, "most connections the webhook port serves at once (HTTP/1.1; further clients wait to be accepted)")
	f.IntVar(&o.WebhookMaxDecodes, "webhook-max-decodes", review.DefaultMaxDecodes, "most admission reviews read and decoded at once; a review that finds no slot within a second is answered 503 (the API server then admits the job unchanged: failurePolicy Ignore)")
	f.Int64Var(&o.WebhookMaxBody, "webhook-max-body", review.DefaultMaxBody, "largest admission review body in bytes (413 beyond): an update carries two objects of at most 3 MiB each")
	f.DurationVar(&o.WebhookHeaderTimeout, "webhook-header-timeout", review.DefaultReadHeaderTimeout, "time a webhook client has for the TLS handshake and the request headers")
	f.DurationVar(&o.WebhookBodyTimeout, "webhook-body-timeout", review.DefaultBodyTimeout, "time a webhook client has to send the body once the review has a decode slot")
	f.DurationVar(&o.WebhookIdleTimeout, "webhook-idle-timeout", review.DefaultIdleTimeout, "how long a kept-alive webhook connection may wait for its next request")
	f.StringVar(&o.InitImage, "init-image", "", "image of the init container the mutating webhook injects (default: this controller's own image, read from its pod, else "+defaultImage+":<version>)")
	f.StringVar(&o.InitRequests, "init-requests", "cpu=100m,memory=128Mi", "cpu and memory requests of the injected init container, NAME=QUANTITY,... (its GPUs are the trainer's)")
	f.StringVar(&o.InitLimits, "init-limits", "cpu=100m,memory=128Mi", "cpu and memory limits of the injected init container, NAME=QUANTITY,... (equal to the requests, a Guaranteed pod stays Guaranteed)")
	f.StringVar(&o.GateURL, "gate-url", "", "the gate's address injected into rank pods (default https://rankgate-gate.<namespace>.svc:443)")
	f.BoolVar(&o.ManageCerts, "manage-certs", true, "create and rotate the controller's own CA and serving certificate (Secret --cert-secret), inject the CA into its webhook configurations and keep ConfigMap rankgate-ca in opted-in namespaces; false: --cert-dir's files come from elsewhere (cert-manager)")
	f.StringVar(&o.CertSecret, "cert-secret", "rankgate-tls", "Secret in the controller's namespace that holds its CA and serving certificate (--manage-certs)")
	f.StringVar(&o.WebhookConfigName, "webhook-config", "rankgate", "name of the MutatingWebhookConfiguration and ValidatingWebhookConfiguration whose CA bundle the controller keeps")
	f.BoolVar(&o.Profiling, "profiling", false, "serve Go pprof profiles under /debug/pprof/ on the metrics address")
	return cmd
}

// defaultImage is the released image, tagged with the version.
const defaultImage = "ghcr.io/rankgate/rankgate"

// ownImage: the image of this pod's controller container (the injected
// init container runs the same build), else the release image of this
// version.
func ownImage(ctx context.Context, rc *rest.Config, ns, pod string) string {
	fallback := defaultImage + ":" + Version
	if ns == "" || pod == "" {
		return fallback
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fallback
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return fallback
	}
	for _, c := range p.Spec.Containers {
		if c.Name == "controller" {
			return c.Image
		}
	}
	return fallback
}

func (a *App) runController(ctx context.Context, o *controllerOptions) error {
	// The controller is a long-running service: log at info unless told.
	if a.root.LogLevel == "" && a.Config.File == "" {
		if l, err := newLogger(a.Streams.Err, "info", a.logFormat()); err == nil {
			a.Log = l
		}
	}
	opts := o.Options
	grace := max(o.pendingGrace, 0) // 0, or less: at once
	opts.PendingGrace = &grace
	if m := opts.MIGReconfigure; m != controller.MIGReconfigureOff && m != controller.MIGReconfigureOnDemand {
		return verdict.Exitf(verdict.ExitUsage, "--mig-reconfigure %q: want off or on-demand", m)
	}
	policies, err := admissionPolicies(o.AdmissionChecks)
	if err != nil {
		return verdict.WithCode(verdict.ExitUsage, err)
	}
	opts.AdmissionPolicies = policies
	if opts.InitResources, err = initResources(o.InitRequests, o.InitLimits); err != nil {
		return verdict.WithCode(verdict.ExitUsage, err)
	}
	opts.OnFail = strings.ToLower(opts.OnFail)
	if !controller.ValidAction(opts.OnFail) {
		return verdict.Exitf(verdict.ExitUsage, "--on-fail %q: want suspend, delete or annotate", opts.OnFail)
	}
	rc, _, err := kubeconfig.FromFlags(&o.Kube, "rankgate-controller/"+Version)
	if err != nil {
		return kubeconfigError(err)
	}
	podNS := os.Getenv("POD_NAMESPACE")
	if podNS == "" {
		// A namespace name is at most 63 bytes.
		if b, err := fileinput.ReadFile(ctx, inClusterNamespaceFile, nil, 4<<10); err == nil {
			podNS = strings.TrimSpace(string(b))
		}
	}
	leNS := firstNonEmpty(o.LeaderElectionNamespace, o.Namespace, podNS)
	opts.Namespace = firstNonEmpty(o.Namespace, podNS, o.LeaderElectionNamespace, defaultControllerNamespace)
	opts.LeaderElectionNamespace = leNS
	if opts.LeaderElection && leNS == "" {
		return verdict.Exitf(verdict.ExitUsage, "--leader-election-namespace is required outside a pod (or pass --leader-elect=false)")
	}
	logger := zapr.NewLogger(a.Log)
	ctrllog.SetLogger(logger)
	opts.Identity = os.Getenv("POD_NAME")
	if opts.Identity == "" {
		opts.Identity, _ = os.Hostname()
	}
	if opts.GateService != "" {
		opts.GateEndpointIP = os.Getenv("POD_IP")
	}
	opts.Config = rc
	opts.Log = logger
	opts.FullCaches = !o.TrimCaches
	opts.ReleaseMemoryAfterSync = true
	if opts.WebhookAddr != "0" && opts.InitImage == "" {
		opts.InitImage = ownImage(ctx, rc, podNS, os.Getenv("POD_NAME"))
	}
	c, err := controller.New(opts)
	if err != nil {
		return verdict.Exitf(verdict.ExitEnvironment, "%v", err)
	}
	if err := c.Start(ctx); err != nil {
		return verdict.Exitf(verdict.ExitEnvironment, "controller: %v", err)
	}
	return nil
}

// initResources reads --init-requests and --init-limits.
func initResources(requests, limits string) (*corev1.ResourceRequirements, error) {
	r := &corev1.ResourceRequirements{}
	for _, f := range []struct {
		flag, v string
		into    *corev1.ResourceList
	}{{"--init-requests", requests, &r.Requests}, {"--init-limits", limits, &r.Limits}} {
		l, err := resourceList(f.v)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", f.flag, f.v, err)
		}
		*f.into = l
	}
	if err := mutate.CheckInitResources(*r); err != nil {
		return nil, err
	}
	return r, nil
}

// resourceList reads NAME=QUANTITY,... ("" is none).
func resourceList(v string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		name, qty, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want NAME=QUANTITY (cpu=100m)", item)
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(qty))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[corev1.ResourceName(strings.TrimSpace(name))] = q
	}
	return out, nil
}

// admissionPolicies reads --admission-check RULE=POLICY values.
func admissionPolicies(checks []string) (map[string]validate.Policy, error) {
	m := map[string]validate.Policy{}
	for _, c := range checks {
		id, p, ok := strings.Cut(c, "=")
		if !ok {
			return nil, fmt.Errorf("--admission-check %q: want RULE=deny|warn|off", c)
		}
		pol, err := validate.ParsePolicy(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("--admission-check %q: %w", c, err)
		}
		m[strings.TrimSpace(id)] = pol
	}
	if err := validate.CheckPolicies(m); err != nil {
		return nil, fmt.Errorf("--admission-check: %w", err)
	}
	return m, nil
}
