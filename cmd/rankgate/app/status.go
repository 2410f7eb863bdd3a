//go:build !rankgate_node

package app

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstatus"
)

// The output formats of status.
const (
	statusText = "text"
	statusWide = "wide"
	statusJSON = gangstatus.FormatJSON
	statusYAML = gangstatus.FormatYAML
)

var statusFormats = []string{statusText, statusWide, statusJSON, statusYAML}

type statusOptions struct {
	kubeFlags
	Output        string
	AllNamespaces bool
}

func (a *App) newStatusCommand() *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status [JOB] [-n NAMESPACE | -A] [-o wide|json|yaml]",
		Short: "Show the gangs of gated jobs: ranks reported, verdict, reason, time left",
		Long: `status lists the gangs the controller keeps (Gang resources,
gangs.rankgate.io): one per gated attempt of a PyTorchJob or MPIJob, with
its phase, the ranks reported of expected, the verdict and its reason.

JOB is ` + jobRefForms + `.
With a JOB, only its gangs are listed (latest attempt first) and the latest
one is shown in full: each reported rank with its pod, node, verdict and
rules, and the ranks that are missing.

-o wide adds the attempt, the time left before the gang deadline, the
controller replica that decided and the count of missing ranks. -o json
and -o yaml print one List document of Gangs.

Exit 0, also when there are no gangs; 2: usage; 3: the kubeconfig, the
API server or the Gang CRD is missing, or access is denied.`,
		Example: `  rankgate status
  rankgate status -A -o wide
  rankgate status train -n ml
  rankgate status pytorchjob/train
  rankgate status mpijob train -o yaml`,
		Args:              cobra.MaximumNArgs(2),
		Annotations:       map[string]string{outputFormatsAnnotation: strings.Join(statusFormats, ",")},
		ValidArgsFunction: completeJobArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runStatus(cmd.Context(), o, args)
		},
	}
	o.register(cmd, defaultRequestTimeout, "deadline of each call to the API server")
	cmd.Flags().BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "list the gangs of every namespace")
	cmd.Flags().StringVarP(&o.Output, "output", "o", statusText, "output format: text, wide, json or yaml")
	return cmd
}

func (a *App) runStatus(ctx context.Context, o *statusOptions, args []string) error {
	if !slices.Contains(statusFormats, o.Output) {
		return usagef("output format %q: want text, wide, json or yaml", o.Output)
	}
	if o.RequestTimeout <= 0 {
		return usagef("--request-timeout %s: want a positive duration", o.RequestTimeout)
	}
	var ref jobRef
	if len(args) > 0 {
		var err error
		if ref, err = parseJobRef(args); err != nil {
			return err
		}
		if o.AllNamespaces {
			return usagef("a job is named in one namespace: drop -A, or the job to list every gang")
		}
	}
	if o.AllNamespaces && o.Namespace != "" {
		return usagef("-A lists every namespace: drop -n %s or -A", o.Namespace)
	}
	l, defaultNS, err := connect(o.Kubeconfig, o.Context, o.RequestTimeout)
	if err != nil {
		return kubeconfigError(err)
	}
	ns := ""
	if !o.AllNamespaces {
		if ns, err = jobNamespace(ref, o.Namespace, func() (string, error) { return defaultNS, nil }); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.RequestTimeout)
	defer cancel()
	gangs, err := gangstatus.List(ctx, l.Dynamic, ns, gangstatus.Job{Kind: ref.Kind, Name: ref.Name})
	if err != nil {
		return deadlineError(err, o.RequestTimeout)
	}
	if len(gangs) == 0 {
		fmt.Fprintln(a.Streams.Err, noGangs(ns, ref))
	}
	switch o.Output {
	case statusJSON, statusYAML:
		return gangstatus.WriteList(a.Streams.Out, gangs, o.Output)
	}
	if len(gangs) == 0 {
		return nil
	}
	now := time.Now()
	wide := o.Output == statusWide
	if err := gangstatus.WriteTable(a.Streams.Out, gangs, gangstatus.TableOptions{AllNamespaces: o.AllNamespaces, Wide: wide, Now: now}); err != nil {
		return err
	}
	if ref.Name == "" {
		return nil
	}
	for _, g := range latestAttempts(gangs) {
		fmt.Fprintln(a.Streams.Out)
		if err := gangstatus.WriteDetail(a.Streams.Out, g, now, wide); err != nil {
			return err
		}
	}
	return nil
}

// latestAttempts picks the first gang of each job: the latest attempt, as
// the list is sorted (two jobs when a PyTorchJob and an MPIJob share the
// name).
func latestAttempts(gs []v1alpha1.Gang) []*v1alpha1.Gang {
	var out []*v1alpha1.Gang
	seen := map[string]bool{}
	for i := range gs {
		key := gs[i].Spec.Job.Kind + "/" + gs[i].Spec.Job.Name
		if !seen[key] {
			seen[key] = true
			out = append(out, &gs[i])
		}
	}
	return out
}

// noGangs is kubectl's "No resources found in NS namespace.", for gangs.
func noGangs(ns string, ref jobRef) string {
	switch {
	case ns == "":
		return "No gangs found."
	case ref.Name != "":
		return fmt.Sprintf("No gangs found for %s in %s namespace (a gang appears when the first rank of a gated job reports).", ref, ns)
	}
	return fmt.Sprintf("No gangs found in %s namespace.", ns)
}
