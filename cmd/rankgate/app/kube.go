//go:build !rankgate_node

package app

import (
	"context"
	"errors"
	"flag"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/kubeconfig"
	"github.com/rankgate/rankgate/verdict"
)

// kubeFlags are kubectl's connection flags on the commands that read a
// cluster as a user (status, diagnose): --kubeconfig, --context,
// --cluster, --user, -n, --server, --token, --as, --as-group, --as-uid,
// the TLS flags and --request-timeout (kubeconfig.Flags).
//
// They are client-go's clientcmd override flags, the set cli-runtime's
// genericclioptions.ConfigFlags binds, rather than ConfigFlags itself:
// that package links kustomize, whose plugin loader imports Go's plugin
// package, and a binary that links it together with go-nvml stops at
// start with "undefined symbol: nvmlDevice..." where libnvidia-ml is not
// installed (go-nvml leaves those symbols to be found when it opens the
// library). Output goes through cli-runtime's printers package, which
// links neither.
type kubeFlags struct {
	Config kubeconfig.Flags
}

func init() { clientVerbosity = setKlogVerbosity }

// setKlogVerbosity sets client-go's log verbosity (klog's -v): at 6 and
// above it logs each API request, as kubectl does.
func setKlogVerbosity(v int) error {
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	return fs.Set("v", strconv.Itoa(v))
}

// defaultRequestTimeout is --request-timeout's default on every command:
// the deadline of each call to the API server.
const defaultRequestTimeout = "30s"

// register adds the flags to c; persistent, they are also its
// subcommands'.
func (k *kubeFlags) register(c *cobra.Command, persistent bool) {
	fs := c.Flags()
	if persistent {
		fs = c.PersistentFlags()
	}
	k.Config.AddFlags(fs, defaultRequestTimeout, true)
	registerKubeCompletions(c)
}

// namespaceFlag is -n, "" when not given.
func (k *kubeFlags) namespaceFlag() string { return k.Config.Overrides.Context.Namespace }

// requestTimeout is --request-timeout as kubectl reads it (a duration, or
// a number of seconds; 0: none).
func (k *kubeFlags) requestTimeout() (time.Duration, error) {
	d, err := clientcmd.ParseTimeout(k.Config.Overrides.Timeout)
	if err != nil || d < 0 {
		return 0, usagef("--request-timeout %q: want a duration like 30s (0: no deadline)", k.Config.Overrides.Timeout)
	}
	return d, nil
}

// withTimeout bounds ctx by --request-timeout when it is not 0.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d == 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// connect builds the API clients for a user's command from the
// connection flags and returns the default namespace with them (-n, else
// the kubeconfig context's); tests replace it.
var connect = func(f *kubeconfig.Flags) (*cluster.Live, string, error) {
	cfg, ns, err := kubeconfig.FromFlags(f, "rankgate/"+Version)
	if err != nil {
		return nil, "", err
	}
	l, err := cluster.NewLive(cfg)
	if err != nil {
		return nil, "", err
	}
	return l, ns, nil
}

// kubeconfigNamespace is the default namespace of the connection flags
// (diagnose, whose clients come from liveSource); tests replace it.
var kubeconfigNamespace = func(f *kubeconfig.Flags) (string, error) {
	_, ns, err := kubeconfig.FromFlags(f, "")
	return ns, err
}

// contextNamespace is the default namespace: the kubeconfig context's.
func (k *kubeFlags) contextNamespace() (string, error) {
	ns, err := kubeconfigNamespace(&k.Config)
	if err != nil {
		return "", kubeconfigError(err)
	}
	return ns, nil
}

// kubeconfigError: a kubeconfig that cannot be loaded is the
// environment's fault.
func kubeconfigError(err error) error {
	return verdict.Exitf(verdict.ExitEnvironment, "kubeconfig: %v", err)
}

// deadlineError names the flag to raise when the API server was too slow.
func deadlineError(err error, timeout time.Duration) error {
	if errors.Is(err, context.DeadlineExceeded) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) {
		return verdict.Exitf(verdict.ExitEnvironment, "the API server did not answer within %s (--request-timeout): %v", timeout, err)
	}
	return err
}
