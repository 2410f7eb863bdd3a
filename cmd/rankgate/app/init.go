package app

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

func init() { extraCommands = append(extraCommands, (*App).newInitCommand) }

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
the verdict on the whole job. While the gate is unreachable it retries with
backoff until --timeout.

Exit 0 the gang passed (warnings allowed), 1 the gang or this rank failed,
2 bad flags or input (or the job is not opted in), 3 environment failure
(NVML or driver error, token or CA missing, gate refused the token),
4 no verdict before --timeout. On failure the reason goes to
--termination-log (Kubernetes: /dev/termination-log).`,
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
	return cmd
}

func (a *App) runInit(ctx context.Context, o *initOptions) error {
	format := o.Output
	if err := checkFormat(format); err != nil {
		return err
	}
	pod := firstNonEmpty(o.PodName, os.Getenv("POD_NAME"))
	ns := firstNonEmpty(o.PodNamespace, os.Getenv("POD_NAMESPACE"))
	if pod == "" || ns == "" {
		return verdict.Exitf(verdict.ExitUsage, "the pod's identity is unknown: set --pod-name/--pod-namespace or POD_NAME/POD_NAMESPACE (downward API fieldRef metadata.name and metadata.namespace)")
	}
	gateURL := o.GateURL
	if u, err := url.Parse(gateURL); gateURL == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return verdict.Exitf(verdict.ExitUsage, "--gate-url %q: want https://HOST:PORT of the rankgate controller's gate", gateURL)
	}
	client, err := gate.NewClient(gate.ClientOptions{URL: gateURL, CAFile: o.CAFile, TokenFile: o.TokenFile})
	if err != nil {
		return a.initFail(o, fmt.Errorf("rankgate init: %w", err))
	}
	timeout := o.Timeout
	if timeout <= 0 {
		return verdict.Exitf(verdict.ExitUsage, "--timeout must be positive")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	log := a.Log.With(zap.String("pod", ns+"/"+pod))

	// While the devices are discovered (seconds with NVML), open the
	// connection and get the token reviewed with a verdict poll that does
	// not wait: the report then finds both ready.
	warm := make(chan struct{})
	go func() {
		defer close(warm)
		wctx, stop := context.WithTimeout(ctx, 10*time.Second)
		defer stop()
		if _, err := client.Verdict(wctx, ns, pod, 0); err != nil {
			log.Debug("gate warm-up", zap.Error(err))
		}
	}()

	req := &gate.ReportRequest{APIVersion: gate.APIVersion, Namespace: ns, Pod: pod}
	r, inv, err := a.rankPreflight(ctx, &o.preflightOptions)
	if err != nil {
		code := verdict.Code(err)
		if code == verdict.ExitUsage {
			return err
		}
		// This rank cannot check its devices: tell the gate so the gang
		// fails now rather than at its deadline, then exit with our own code.
		req.Node = nodeName()
		req.Report = verdict.NewReport(req.Node, []verdict.Finding{{
			Rule: verdict.RuleRankEnvironment, Severity: verdict.SeverityFail,
			Message:     fmt.Sprintf("rank pod %s/%s could not check its devices (rankgate init exit %d): %s", ns, pod, code, orText(verdict.Message(err), "see its init container's log and termination message")),
			Remediation: "fix the node's driver or NVML access (kubectl logs POD -c rankgate-init), then resume the job",
		}})
		short, stop := context.WithTimeout(ctx, 20*time.Second)
		_, rerr := client.Await(short, req, gate.AwaitOptions{Poll: 5 * time.Second})
		stop()
		if rerr != nil {
			log.Warn("could not tell the gate about this rank's failure", zap.Error(rerr))
		}
		return err
	}
	req.Report = r
	req.Node = inv.Hostname
	req.DriverVersion = inv.DriverVersion
	req.CUDADriverVersion = inv.CUDADriverVersion
	if format == formatText || r.Failed() {
		if err := a.printReport(r, format); err != nil {
			return err
		}
	}

	waitCtx := ctx
	if r.Failed() {
		// Our own verdict is known: report it so the gang fails at once,
		// but do not wait long for the answer.
		var stop context.CancelFunc
		waitCtx, stop = context.WithTimeout(ctx, 30*time.Second)
		defer stop()
	}
	select {
	case <-warm:
	case <-time.After(5 * time.Second):
	}
	started := time.Now()
	announced := false
	resp, err := client.Await(waitCtx, req, gate.AwaitOptions{
		Poll: o.Poll,
		OnRetry: func(err error, delay time.Duration) {
			log.Warn("gate not answering; retrying", zap.String("gate", gateURL), zap.Duration("in", delay), zap.Error(err))
		},
		OnWaiting: func(w *gate.Response) {
			if !announced {
				announced = true
				fmt.Fprintf(a.Streams.Err, "rankgate init: %s rank %d reported; waiting for the gang (%d of %d ranks so far)\n", w.Job, w.Rank, w.Reported, w.Expected)
			}
			log.Info("waiting for the gang verdict", zap.String("job", w.Job), zap.Int("rank", w.Rank), zap.Int("reported", w.Reported), zap.Int("expected", w.Expected))
		},
	})
	if r.Failed() {
		reason := r.Reason(verdict.TerminationMax)
		if err == nil && resp.Verdict != nil {
			fmt.Fprintf(a.Streams.Err, "rankgate init: gang verdict for %s: %s\n", resp.Job, resp.Verdict.Verdict)
		} else {
			log.Warn("the gate did not confirm this rank's failure", zap.Error(err))
		}
		a.writeTerminationLog(o.TerminationLog, reason)
		return verdict.Silent(verdict.ExitFail)
	}
	if err != nil {
		return a.initFail(o, &gate.WaitError{Err: err, Timeout: timeout, Waited: time.Since(started)})
	}
	v := *resp.Verdict
	if format == formatText {
		fmt.Fprintf(a.Streams.Out, "\ngang verdict for %s (rank %d of %d):\n", resp.Job, resp.Rank, resp.Expected)
	}
	if err := a.printReport(v, format); err != nil {
		return err
	}
	if v.Failed() {
		reason := fmt.Sprintf("gang verdict fail for %s", resp.Job)
		if resp.Action != "" {
			reason += fmt.Sprintf(" (job action: %s)", resp.Action)
		}
		a.writeTerminationLog(o.TerminationLog, reason+": "+v.Reason(verdict.TerminationMax))
		return verdict.Silent(verdict.ExitFail)
	}
	return nil
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

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
