package app

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// gangOptions are launch's --gang flags: the gate and the pod's identity,
// as rankgate init takes them.
type gangOptions struct {
	Gang         bool
	GateURL      string
	CAFile       string
	TokenFile    string
	PodName      string
	PodNamespace string
	GangTimeout  time.Duration
	Poll         time.Duration
}

func (o *gangOptions) addFlags(f *pflag.FlagSet) {
	f.BoolVar(&o.Gang, "gang", false, "wait for the job's gang verdict from the gate before CMD starts (MPIJob launcher): exit 1 on fail, 4 at --gang-timeout")
	f.StringVar(&o.GateURL, "gate-url", "", "with --gang: the controller's gate, https://HOST:PORT")
	f.StringVar(&o.CAFile, "ca-file", "", "with --gang: PEM CA of the gate's certificate (default: system roots)")
	f.StringVar(&o.TokenFile, "token-file", defaultTokenFile, "with --gang: projected service-account token with audience rankgate")
	f.StringVar(&o.PodName, "pod-name", "", "with --gang: this pod's name (default $POD_NAME)")
	f.StringVar(&o.PodNamespace, "pod-namespace", "", "with --gang: this pod's namespace (default $POD_NAMESPACE)")
	f.DurationVar(&o.GangTimeout, "gang-timeout", 15*time.Minute, "with --gang: give up (exit 4) without a verdict after this long")
	f.DurationVar(&o.Poll, "gang-poll", 30*time.Second, "with --gang: long-poll wait of each request to the gate")
}

func (o *gangOptions) check() (pod, ns string, err error) {
	pod = firstNonEmpty(o.PodName, os.Getenv("POD_NAME"))
	ns = firstNonEmpty(o.PodNamespace, os.Getenv("POD_NAMESPACE"))
	if pod == "" || ns == "" {
		return "", "", verdict.Exitf(verdict.ExitUsage, "--gang: the pod's identity is unknown: set --pod-name/--pod-namespace or POD_NAME/POD_NAMESPACE (downward API fieldRef metadata.name and metadata.namespace)")
	}
	if u, err := url.Parse(o.GateURL); o.GateURL == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", "", verdict.Exitf(verdict.ExitUsage, "--gate-url %q: want https://HOST:PORT of the rankgate controller's gate", o.GateURL)
	}
	if o.GangTimeout <= 0 || o.Poll <= 0 {
		return "", "", verdict.Exitf(verdict.ExitUsage, "--gang-timeout and --gang-poll must be positive")
	}
	return pod, ns, nil
}

// awaitGang waits for the gang verdict of the pod's job: nil on a pass;
// exit 1 with the reason on a fail (also in the termination log), 4 when
// --gang-timeout passes without one, the gate's code when it refuses the
// pod, 3 when it cannot be used. The gate's decided answer is returned
// with the error of a fail.
func (a *App) awaitGang(ctx context.Context, o *gangOptions, po *progressOptions, termLog string) (*gate.Response, error) {
	pod, ns, err := o.check()
	if err != nil {
		return nil, err
	}
	client, err := gate.NewClient(gate.ClientOptions{URL: o.GateURL, CAFile: o.CAFile, TokenFile: o.TokenFile})
	if err != nil {
		return nil, fmt.Errorf("--gang: %w", err)
	}
	started := time.Now()
	hb := newHeartbeat(a.Streams.Err, po.interval(), "rankgate: ", ns+"/"+pod, "--gang-timeout", started.Add(o.GangTimeout))
	if hb != nil {
		hb.announce = func(w *gate.Response) string {
			return fmt.Sprintf("waiting for the gang verdict of %s before starting CMD (%d of %d ranks reported)", w.Job, w.Reported, w.Expected)
		}
		hb.refresh = func(ctx context.Context) (*gate.Response, error) { return client.Verdict(ctx, ns, pod, 0) }
	}
	wctx, cancel := context.WithTimeout(ctx, o.GangTimeout)
	defer cancel()
	log := a.Log.With(zap.String("pod", ns+"/"+pod))
	stop := hb.start(wctx)
	resp, err := client.AwaitVerdict(wctx, ns, pod, gate.AwaitOptions{
		Poll: o.Poll,
		OnRetry: func(err error, delay time.Duration) {
			hb.retrying(err)
			log.Warn("gate not answering; retrying", zap.String("gate", o.GateURL), zap.Duration("in", delay), zap.Error(err))
		},
		OnWaiting: hb.waiting,
	})
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err() // a signal: the caller maps it to 128+N
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = verdict.Exitf(verdict.ExitTimeout, "no gang verdict for pod %s/%s within --gang-timeout %s (waited %s): %w",
				ns, pod, o.GangTimeout, time.Since(started).Round(time.Second), err)
		} else {
			err = verdict.WithCode(verdict.Code(err), fmt.Errorf("waiting for the gang verdict: %w", err))
		}
		a.writeTerminationLog(termLog, err.Error())
		return nil, err
	}
	v := resp.Verdict
	if !v.Failed() {
		fmt.Fprintf(a.Streams.Err, "rankgate: gang verdict for %s: %s; starting CMD\n", resp.Job, v.Verdict)
		return resp, nil
	}
	reason := fmt.Sprintf("gang verdict fail for %s", resp.Job)
	if resp.Action != "" {
		reason += fmt.Sprintf(" (job action: %s)", resp.Action)
	}
	reason += ": " + v.Reason(verdict.TerminationMax)
	a.writeTerminationLog(termLog, reason)
	return resp, verdict.Exitf(verdict.ExitFail, "%s; CMD not started", reason)
}
