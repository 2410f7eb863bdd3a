// Package kubeconfig finds the API server the way kubectl does, for every
// rankgate command that talks to one (diagnose, status, controller): the
// kubectl connection flags are cli-runtime's ConfigFlags, read here.
package kubeconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/cli-runtime/pkg/genericclioptions"
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
	f := genericclioptions.NewConfigFlags(false)
	f.KubeConfig, f.Context = &path, &context
	return FromFlags(f, userAgent)
}

// FromFlags is Load with every kubectl connection flag that f carries
// (--kubeconfig, --context, --server, --token, --as, --request-timeout...),
// and the default namespace (-n, else as LoadWithNamespace picks it).
// Unlike kubectl, no file and no in-cluster config is an error, not a
// guess at localhost:8080. Errors name the kubeconfig files tried.
func FromFlags(f *genericclioptions.ConfigFlags, userAgent string) (*rest.Config, string, error) {
	cc, rules := loader(f)
	if err := guessing(f, rules); err != nil {
		return nil, "", err
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", sourceError(rules, err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", sourceError(rules, err)
	}
	cfg.UserAgent = userAgent
	return cfg, ns, nil
}

// Contexts lists the context names of the kubeconfig that Load would read
// (path, $KUBECONFIG or ~/.kube/config), sorted; none for the in-cluster
// config.
func Contexts(path string) ([]string, error) {
	f := genericclioptions.NewConfigFlags(false)
	f.KubeConfig = &path
	cc, rules := loader(f)
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, sourceError(rules, err)
	}
	out := make([]string, 0, len(raw.Contexts))
	for name := range raw.Contexts {
		out = append(out, name)
	}
	sort.Strings(out)
	return out, nil
}

// loader is f's client config with its loading rules adjusted: the home
// directory as it is now, not as it was when the process started
// (clientcmd.RecommendedHomeFile), and no default server to fall back on.
func loader(f *genericclioptions.ConfigFlags) (clientcmd.ClientConfig, *clientcmd.ClientConfigLoadingRules) {
	cc := f.ToRawKubeConfigLoader()
	rules, ok := cc.ConfigAccess().(*clientcmd.ClientConfigLoadingRules)
	if !ok {
		return cc, nil
	}
	rules.DefaultClientConfig = nil
	if os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		rules.Precedence = []string{filepath.Join(homedir.HomeDir(), clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)}
	}
	return cc, rules
}

// guessing refuses what kubectl does with no kubeconfig file, no
// --server and outside a pod: talk to http://localhost:8080.
func guessing(f *genericclioptions.ConfigFlags, rules *clientcmd.ClientConfigLoadingRules) error {
	if rules == nil || rules.GetExplicitFile() != "" || (f.APIServer != nil && *f.APIServer != "") {
		return nil
	}
	for _, p := range rules.GetLoadingPrecedence() {
		if _, err := os.Stat(p); err == nil {
			return nil
		}
	}
	if _, err := rest.InClusterConfig(); err == nil {
		return nil
	}
	return sourceError(rules, clientcmd.ErrEmptyConfig)
}

// sourceError names the files a failed load read or looked for.
func sourceError(rules *clientcmd.ClientConfigLoadingRules, err error) error {
	if rules == nil {
		return err
	}
	if p := rules.GetExplicitFile(); p != "" {
		if strings.Contains(err.Error(), p) {
			return err
		}
		return fmt.Errorf("%s: %w", p, err)
	}
	files := rules.GetLoadingPrecedence()
	var found []string
	for _, p := range files {
		if _, statErr := os.Stat(p); statErr == nil {
			found = append(found, p)
		}
	}
	from := ""
	if os.Getenv(clientcmd.RecommendedConfigPathEnvVar) != "" {
		from = " ($" + clientcmd.RecommendedConfigPathEnvVar + ")"
	}
	if len(found) == 0 {
		if clientcmd.IsEmptyConfig(err) || errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no kubeconfig at %s%s and not in a pod: give --kubeconfig, set $KUBECONFIG, or --server and --token", strings.Join(files, ", "), from)
		}
		return fmt.Errorf("%s%s: %w", strings.Join(files, ", "), from, err)
	}
	return fmt.Errorf("%s%s: %w", strings.Join(found, ", "), from, err)
}
