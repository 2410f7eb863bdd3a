// Package kubeconfig finds the API server the way kubectl does, for every
// rankgate command that talks to one (diagnose, controller).
package kubeconfig

import (
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/homedir"
)

// Load returns the client config, looked up in kubectl's order:
//
//  1. path (the --kubeconfig flag), when given: only that file;
//  2. $KUBECONFIG (a list of files, merged);
//  3. ~/.kube/config;
//  4. the in-cluster config (the pod's service account), when none of the
//     files exists.
//
// context selects a kubeconfig context; "" keeps the current one.
// userAgent names the caller to the API server.
func Load(path, context, userAgent string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		// The home directory as it is now, not as it was when the process
		// started (clientcmd.RecommendedHomeFile).
		rules.Precedence = []string{filepath.Join(homedir.HomeDir(), clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)}
	}
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = userAgent
	return cfg, nil
}
