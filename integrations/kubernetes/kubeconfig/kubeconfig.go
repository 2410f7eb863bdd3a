// Package kubeconfig finds the API server the way kubectl does, for every
// rankgate command that talks to one (diagnose, status, controller), with
// kubectl's connection flags.
package kubeconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/pflag"
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
	return FromFlags(&Flags{Kubeconfig: path, Overrides: clientcmd.ConfigOverrides{CurrentContext: context}}, userAgent)
}

// Flags are kubectl's connection flags: --kubeconfig and client-go's
// override flags (clientcmd.RecommendedConfigOverrideFlags, the set
// kubectl's own ConfigFlags offers): --context, --cluster, --user, -n,
// --server, --token, --as, --as-group, --as-uid, the TLS flags and
// --request-timeout.
type Flags struct {
	Kubeconfig string
	Overrides  clientcmd.ConfigOverrides
}

// AddFlags registers the flags on fs, --request-timeout with the
// default timeout ("30s"; kubectl's form: a duration or seconds, 0 for
// none), or without --request-timeout when timeout is "" (a long-running
// watcher). withNamespace false leaves -n to the command.
func (f *Flags) AddFlags(fs *pflag.FlagSet, timeout string, withNamespace bool) {
	fs.StringVar(&f.Kubeconfig, clientcmd.RecommendedConfigPathFlag, f.Kubeconfig, "kubeconfig file (default $KUBECONFIG, ~/.kube/config, or in-cluster)")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	// Basic auth is gone from Kubernetes; no proxy or compression knobs.
	names.AuthOverrideFlags.Username.LongName, names.AuthOverrideFlags.Password.LongName = "", ""
	names.ClusterOverrideFlags.ProxyURL.LongName, names.ClusterOverrideFlags.DisableCompression.LongName = "", ""
	if !withNamespace {
		names.ContextOverrideFlags.Namespace.LongName, names.ContextOverrideFlags.Namespace.ShortName = "", ""
	}
	if timeout == "" {
		names.Timeout.LongName = ""
	}
	names.Timeout.Default = timeout
	names.Timeout.Description = "deadline of each call to the API server: a duration like 30s, or seconds (0: none)"
	clientcmd.BindOverrideFlags(&f.Overrides, fs, names)
}

// FromFlags is Load with every connection flag of f, and the default
// namespace (-n, else as LoadWithNamespace picks it). Errors name the
// kubeconfig files tried.
func FromFlags(f *Flags, userAgent string) (*rest.Config, string, error) {
	cc, rules := loader(f)
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
	cc, rules := loader(&Flags{Kubeconfig: path})
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

// loader reads the kubeconfig in kubectl's order, with the home directory
// as it is now, not as it was when the process started
// (clientcmd.RecommendedHomeFile).
func loader(f *Flags) (clientcmd.ClientConfig, *clientcmd.ClientConfigLoadingRules) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		rules.Precedence = []string{filepath.Join(homedir.HomeDir(), clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)}
	}
	rules.ExplicitPath = f.Kubeconfig
	overrides := f.Overrides
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &overrides), rules
}

// sourceError names the files a failed load read or looked for.
func sourceError(rules *clientcmd.ClientConfigLoadingRules, err error) error {
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
