package app

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/internal/podinfo"
	"github.com/rankgate/rankgate/preflight/ncclenv"
	"github.com/rankgate/rankgate/topology/sources"
	"github.com/rankgate/rankgate/verdict"
)

// defaultTokenFile is where the example manifests mount the projected
// service-account token (audience rankgate).
const defaultTokenFile = "/var/run/secrets/rankgate/token"

// initOptions are init's flags.
type initOptions struct {
	preflightOptions
	GateURL      string
	CAFile       string
	TokenFile    string
	PodName      string
	PodNamespace string
	Timeout      time.Duration
	Poll         time.Duration
	// BypassFile is the pod's annotations from a downward API volume.
	BypassFile string
	// Sysfs is where the node's RDMA devices are listed (class/infiniband).
	Sysfs string
	progressOptions
}

func (a *App) newInitCommand() *cobra.Command {
	o := &initOptions{}
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Init container of a rank pod: preflight, report to the controller, wait for the gang verdict",
		Long: `init runs in an init container of every rank pod of an opted-in PyTorchJob
or MPIJob. It checks this rank's devices (the same rules as preflight),
sends its report to the rankgate controller's gate over HTTPS, authenticated
by a projected service-account token with audience rankgate, and waits for
the verdict on the whole job. The report also carries the pod's network
interfaces and the node's RDMA devices, so that the gang verdict judges
NCCL_SOCKET_IFNAME and NCCL_IB_HCA on every rank. While the gate is unreachable it retries with
backoff until --timeout. While it waits it prints a progress line to stderr
at most every 10s: the job, ranks reported of expected, the time left until
the gang's deadline (--quiet turns these lines off).

Exit 0 the gang passed (warnings allowed), 1 the gang or this rank failed,
2 bad flags or input (or the job is not opted in), 3 environment failure
(NVML or driver error, token or CA missing, gate refused the token),
4 no verdict before --timeout. On failure the reason goes to
--termination-log (Kubernetes: /dev/termination-log).

With -o json or -o yaml, stdout holds one document: the gang's verdict, or
this rank's own report when this rank failed (or could not read its
devices), or nothing when no verdict came (the reason is on stderr).`,
		Example: `  # in a pod (POD_NAME and POD_NAMESPACE from the downward API)
  rankgate init --gate-url https://rankgate-gate.rankgate-system.svc:443 \
    --ca-file /var/run/rankgate/ca.crt --termination-log /dev/termination-log
  # a simulated rank off a GPU node
  rankgate init --gate-url https://127.0.0.1:8443 --ca-file ca.crt --token-file tok \
    --pod-name job-worker-0 --pod-namespace ml --sample a100-full --devices 0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runInit(cmd.Context(), o) },
	}
	f := cmd.Flags()
	o.preflightOptions.addFlags(f)
	f.StringVar(&o.GateURL, "gate-url", "", "the controller's gate, https://HOST:PORT (required)")
	f.StringVar(&o.CAFile, "ca-file", "", "PEM CA of the gate's certificate (default: system roots)")
	f.StringVar(&o.TokenFile, "token-file", defaultTokenFile, "projected service-account token with audience rankgate")
	f.StringVar(&o.PodName, "pod-name", "", "this pod's name (default $POD_NAME, from the downward API)")
	f.StringVar(&o.PodNamespace, "pod-namespace", "", "this pod's namespace (default $POD_NAMESPACE)")
	f.DurationVar(&o.Timeout, "timeout", 15*time.Minute, "give up (exit 4) without a verdict after this long; keep it above the controller's --gang-timeout")
	f.DurationVar(&o.Poll, "poll", 30*time.Second, "long-poll wait of each request to the gate")
	_ = f.MarkHidden("poll")
	f.StringVar(&o.BypassFile, "bypass-file", "", "the pod's annotations file (downward API volume, fieldRef metadata.annotations): once it holds "+contract.AnnotationBypass+"=REASON, stop waiting for the gate and exit 0 after this rank's own checks (break-glass when the controller is down)")
	f.StringVar(&o.Sysfs, "sysfs", sysfs, "sysfs mount whose class/infiniband lists the node's RDMA devices")
	_ = f.MarkHidden("sysfs")
	o.progressOptions.addFlags(f)
	return cmd
}

func (a *App) runInit(ctx context.Context, o *initOptions) error {
	pod, ns, err := o.check()
	if err != nil {
		return err
	}
	client, err := gate.NewClient(gate.ClientOptions{URL: o.GateURL, CAFile: o.CAFile, TokenFile: o.TokenFile})
	if err != nil {
		return a.initFail(o, fmt.Errorf("rankgate init: %w", err))
	}
	hb := newHeartbeat(a.Streams.Err, o.interval(), "rankgate init: ", ns+"/"+pod, "--timeout", time.Now().Add(o.Timeout))
	if hb != nil {
		hb.announce = func(w *gate.Response) string {
			return fmt.Sprintf("%s rank %d reported; waiting for the gang (%d of %d ranks so far)", w.Job, w.Rank, w.Reported, w.Expected)
		}
		hb.refresh = func(ctx context.Context) (*gate.Response, error) { return client.Verdict(ctx, ns, pod, 0) }
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	log := a.Log.With(zap.String("pod", ns+"/"+pod))
	// Everything that waits for the gate ends when an operator bypasses it.
	gateCtx, bypassed := o.watchBypass(ctx, log)
	rank := client.StartRank(gateCtx, gate.RankOptions{
		Namespace: ns, Pod: pod, Poll: o.Poll, Timeout: o.Timeout,
		OnWarmUp: func(err error) { log.Debug("gate warm-up", zap.Error(err)) },
		OnRetry: func(err error, delay time.Duration) {
			hb.retrying(err)
			log.Warn("gate not answering; retrying", zap.String("gate", o.GateURL), zap.Duration("in", delay), zap.Error(err))
		},
		OnWaiting: func(w *gate.Response) {
			hb.waiting(w)
			log.Info("waiting for the gang verdict", zap.String("job", w.Job), zap.Int("rank", w.Rank), zap.Int("reported", w.Reported), zap.Int("expected", w.Expected))
		},
	})

	r, inv, err := a.rankPreflight(ctx, &o.preflightOptions)
	if err != nil {
		if code := verdict.Code(err); code != verdict.ExitUsage {
			// This rank cannot check its devices: tell the gate so the gang
			// fails now rather than at its deadline, then exit with our own code.
			if rerr := rank.Unchecked(gateCtx, sources.NodeName(), code, verdict.Message(err)); rerr != nil {
				log.Warn("could not tell the gate about this rank's failure", zap.Error(rerr))
			}
		}
		return err
	}
	if o.Output == formatText || r.Failed() {
		if err := a.printReport(r, o.Output); err != nil {
			return err
		}
	}
	stop := hb.start(gateCtx)
	resp, err := rank.Report(gateCtx, &gate.ReportRequest{Node: inv.Hostname, DriverVersion: inv.DriverVersion, CUDADriverVersion: inv.CUDADriverVersion, Report: r,
		Net: rankNet(o.Sysfs, log), NCCLVersion: ncclenv.VersionFromEnv(ownEnv())})
	stop()
	if why := bypassed(); why != "" && err != nil && !r.Failed() {
		fmt.Fprintf(a.Streams.Err, "rankgate init: the gate was bypassed (pod annotation %s: %q): this rank starts without a gang verdict; its own checks passed\n", contract.AnnotationBypass, why)
		return nil
	}
	if r.Failed() {
		if err == nil {
			fmt.Fprintf(a.Streams.Err, "rankgate init: gang verdict for %s: %s\n", resp.Job, resp.Verdict.Verdict)
		} else {
			log.Warn("the gate did not confirm this rank's failure", zap.Error(err))
		}
		a.writeTerminationLog(o.TerminationLog, r.Reason(verdict.TerminationMax))
		return verdict.Silent(verdict.ExitFail)
	}
	if err != nil {
		return a.initFail(o, err)
	}
	return a.gangVerdict(o, resp)
}

// check validates init's options and finds the pod's identity.
func (o *initOptions) check() (pod, ns string, err error) {
	if err := checkFormat(o.Output); err != nil {
		return "", "", err
	}
	if err := o.progressOptions.check(); err != nil {
		return "", "", err
	}
	pod = firstNonEmpty(o.PodName, os.Getenv("POD_NAME"))
	ns = firstNonEmpty(o.PodNamespace, os.Getenv("POD_NAMESPACE"))
	if pod == "" || ns == "" {
		return "", "", verdict.Exitf(verdict.ExitUsage, "the pod's identity is unknown: set --pod-name/--pod-namespace or POD_NAME/POD_NAMESPACE (downward API fieldRef metadata.name and metadata.namespace)")
	}
	if u, err := url.Parse(o.GateURL); o.GateURL == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", "", verdict.Exitf(verdict.ExitUsage, "--gate-url %q: want https://HOST:PORT of the rankgate controller's gate", o.GateURL)
	}
	if o.Timeout <= 0 {
		return "", "", verdict.Exitf(verdict.ExitUsage, "--timeout must be positive")
	}
	return pod, ns, nil
}

// gangVerdict prints the gang's verdict and exits 1 on a fail.
func (a *App) gangVerdict(o *initOptions, resp *gate.Response) error {
	v := *resp.Verdict
	if o.Output == formatText {
		fmt.Fprintf(a.Streams.Out, "\ngang verdict for %s (rank %d of %d):\n", resp.Job, resp.Rank, resp.Expected)
	}
	if err := a.printReport(v, o.Output); err != nil {
		return err
	}
	if !v.Failed() {
		return nil
	}
	reason := fmt.Sprintf("gang verdict fail for %s", resp.Job)
	if resp.Action != "" {
		reason += fmt.Sprintf(" (job action: %s)", resp.Action)
	}
	a.writeTerminationLog(o.TerminationLog, reason+": "+v.Reason(verdict.TerminationMax))
	return verdict.Silent(verdict.ExitFail)
}

// initFail writes err's reason to the termination log.
func (a *App) initFail(o *initOptions, err error) error {
	a.writeTerminationLog(o.TerminationLog, err.Error())
	return err
}

func firstNonEmpty(xs ...string) string {
	for _, x := range xs {
		if x != "" {
			return x
		}
	}
	return ""
}

// watchBypass returns a context that ends when ctx does or when the pod is
// annotated contract.AnnotationBypass (--bypass-file), and what that
// annotation says ("" until then).
func (o *initOptions) watchBypass(ctx context.Context, log *zap.Logger) (context.Context, func() string) {
	if o.BypassFile == "" {
		return ctx, func() string { return "" }
	}
	gctx, cancel := context.WithCancel(ctx)
	var why atomic.Pointer[string]
	go func() {
		defer cancel()
		reason := podinfo.Watch(gctx, o.BypassFile, contract.AnnotationBypass, bypassPoll, func(err error) {
			log.Debug("cannot read the pod's annotations", zap.Error(err))
		})
		if reason != "" {
			why.Store(&reason)
			log.Warn("gate bypassed by an operator", zap.String("annotation", contract.AnnotationBypass), zap.String("reason", reason))
		}
	}()
	return gctx, func() string {
		if p := why.Load(); p != nil {
			return *p
		}
		return ""
	}
}

// bypassPoll: how often init re-reads the pod's annotations (the kubelet
// itself refreshes the file within about a minute of a change).
const bypassPoll = 2 * time.Second
