//go:build !rankgate_node

package app

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/kubeconfig"
	"github.com/rankgate/rankgate/verdict"
)

// kubeFlags are the flags of the commands that read a cluster as a user
// (status, diagnose job|pod), named as kubectl's.
type kubeFlags struct {
	Kubeconfig     string
	Context        string
	Namespace      string
	RequestTimeout time.Duration
}

// defaultRequestTimeout bounds every API call of status (and completion).
const defaultRequestTimeout = 30 * time.Second

func (k *kubeFlags) register(c *cobra.Command, timeout time.Duration, timeoutUsage string) {
	f := c.Flags()
	f.StringVar(&k.Kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, ~/.kube/config, or in-cluster)")
	f.StringVar(&k.Context, "context", "", "kubeconfig context to use")
	f.StringVarP(&k.Namespace, "namespace", "n", "", "namespace of the job (default: the kubeconfig context's, else default)")
	f.DurationVar(&k.RequestTimeout, "request-timeout", timeout, timeoutUsage)
	registerKubeCompletions(c)
}

// connect builds the API clients for a user's command and returns the
// kubeconfig context's namespace with them; tests replace it.
var connect = func(path, context string, timeout time.Duration) (*cluster.Live, string, error) {
	cfg, ns, err := kubeconfig.LoadWithNamespace(path, context, "rankgate/"+Version)
	if err != nil {
		return nil, "", err
	}
	cfg.Timeout = timeout
	l, err := cluster.NewLive(cfg)
	if err != nil {
		return nil, "", err
	}
	return l, ns, nil
}

// kubeconfigNamespace is the kubeconfig context's namespace (diagnose,
// whose clients come from liveSource); tests replace it.
var kubeconfigNamespace = func(path, context string) (string, error) {
	_, ns, err := kubeconfig.LoadWithNamespace(path, context, "")
	return ns, err
}

// contextNamespace is the default namespace: the kubeconfig context's.
func (k *kubeFlags) contextNamespace() (string, error) {
	ns, err := kubeconfigNamespace(k.Kubeconfig, k.Context)
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
