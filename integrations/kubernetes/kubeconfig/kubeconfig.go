// Package kubeconfig finds the API server the way kubectl does, for every
// rankgate command that talks to one (diagnose, status, controller).
package kubeconfig

import (
	"os"
	"path/filepath"
	"sort"

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
	cfg, _, err := LoadWithNamespace(path, context, userAgent)
	return cfg, err
}

// LoadWithNamespace is Load and the default namespace, as kubectl picks
// it: the context's namespace, else the pod's own namespace in a cluster,
// else "default".
func LoadWithNamespace(path, context, userAgent string) (*rest.Config, string, error) {
	cc := clientConfig(path, context)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", err
	}
	cfg.UserAgent = userAgent
	return cfg, ns, nil
}

// Contexts lists the context names of the kubeconfig that Load would read
// (path, $KUBECONFIG or ~/.kube/config), sorted; none for the in-cluster
// config.
func Contexts(path string) ([]string, error) {
	raw, err := clientConfig(path, "").RawConfig()
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(raw.Contexts))
	for name := range raw.Contexts {
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}

func clientConfig(path, context string) clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		// The home directory as it is now, not as it was when the process
		// started (clientcmd.RecommendedHomeFile).
		rules.Precedence = []string{filepath.Join(homedir.HomeDir(), clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)}
	}
	rules.ExplicitPath = path
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context})
}
