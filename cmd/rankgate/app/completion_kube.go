//go:build !rankgate_node

package app

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/kubeconfig"
	"github.com/rankgate/rankgate/integrations/kubernetes/webhook/validate"
)

// completionTimeout bounds the API calls of one completion: a shell
// waits for it.
const completionTimeout = 3 * time.Second

// completionListLimit bounds what one completion lists.
const completionListLimit = 500

// buildFlagValues are the word-valued flags of the cluster commands.
func buildFlagValues() map[string][]string {
	checks := make([]string, 0, 3*len(validate.Checks))
	for _, c := range validate.Checks {
		for _, mode := range []string{"deny", "warn", "off"} {
			checks = append(checks, c+"="+mode)
		}
	}
	return map[string][]string{
		"on-fail":         {controller.ActionSuspend, controller.ActionDelete, controller.ActionAnnotate},
		"mig-reconfigure": {controller.MIGReconfigureOff, controller.MIGReconfigureOnDemand},
		"admission-check": checks,
		"kind":            kubeflow.KindNames(),
	}
}

// registerKubeCompletions completes -n from the cluster's namespaces and
// --context from the kubeconfig.
func registerKubeCompletions(c *cobra.Command) {
	_ = c.RegisterFlagCompletionFunc("namespace", completeNamespaces)
	_ = c.RegisterFlagCompletionFunc("context", completeContexts)
}

func completeContexts(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	path, _ := cmd.Flags().GetString("kubeconfig")
	names, err := kubeconfig.Contexts(path)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return matching(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

func completeNamespaces(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	l, _, err := connect(completionConfigFlags(cmd))
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	list, err := l.Core.CoreV1().Namespaces().List(ctx, metav1.ListOptions{Limit: completionListLimit})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	names := make([]string, 0, len(list.Items))
	for _, ns := range list.Items {
		names = append(names, ns.Name)
	}
	return matching(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeJobArgs completes a job argument (status, diagnose job): the
// jobs of every supported kind in the namespace, as NAME, as KIND/NAME after
// "pytorchjob/", or as the NAME of KIND NAME. Any error offers nothing.
func completeJobArgs(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	const none = cobra.ShellCompDirectiveNoFileComp
	kinds := kubeflow.KindNames()
	prefix := ""
	switch len(args) {
	case 0:
		if word, _, ok := strings.Cut(toComplete, "/"); ok {
			kind, isKind, err := parseJobKind(word)
			if err != nil || !isKind {
				return nil, none
			}
			kinds, prefix = []string{kind}, word+"/"
		}
	case 1:
		kind, isKind, err := parseJobKind(args[0])
		if err != nil || !isKind || strings.Contains(args[0], "/") {
			return nil, none
		}
		kinds = []string{kind}
	default:
		return nil, none
	}
	var out []cobra.Completion
	for _, kj := range listJobs(cmd, kinds) {
		if name := prefix + kj.name; strings.HasPrefix(name, toComplete) {
			out = append(out, cobra.CompletionWithDesc(name, kj.kind))
		}
	}
	return out, none
}

// completionConfigFlags are the connection flags given so far on the
// command line being completed, with the completion's own deadline.
func completionConfigFlags(cmd *cobra.Command) *kubeconfig.Flags {
	var cf kubeconfig.Flags
	fs := pflag.NewFlagSet("completion", pflag.ContinueOnError)
	cf.AddFlags(fs, completionTimeout.String(), true)
	fs.VisitAll(func(f *pflag.Flag) {
		given := cmd.Flags().Lookup(f.Name)
		if given == nil || !given.Changed || f.Name == "request-timeout" {
			return
		}
		if sv, ok := given.Value.(pflag.SliceValue); ok {
			if dst, ok := f.Value.(pflag.SliceValue); ok {
				_ = dst.Replace(sv.GetSlice())
			}
			return
		}
		_ = f.Value.Set(given.Value.String())
	})
	return &cf
}

type kindName struct{ kind, name string }

// listJobs lists the jobs of the given kinds in the command's namespace
// (-n, else the kubeconfig context's); nil on any error.
func listJobs(cmd *cobra.Command, kinds []string) []kindName {
	l, ns, err := connect(completionConfigFlags(cmd))
	if err != nil {
		return nil
	}
	if given, _ := cmd.Flags().GetString("namespace"); given != "" {
		ns = given
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	var out []kindName
	for _, kind := range kinds {
		k, ok := kubeflow.ByName(kind)
		if !ok {
			continue
		}
		list, err := l.Dynamic.Resource(k.GVR()).Namespace(ns).List(ctx, metav1.ListOptions{Limit: completionListLimit})
		if err != nil {
			continue // that kind's CRD may not be installed
		}
		for _, u := range list.Items {
			out = append(out, kindName{kind, u.GetName()})
		}
	}
	return out
}
