//go:build !rankgate_node

package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstatus"
)

// The output formats of status of its own; the others are cli-runtime's
// printers (name, jsonpath, go-template...).
const (
	statusText = "text"
	statusWide = "wide"
	statusJSON = gangstatus.FormatJSON
	statusYAML = gangstatus.FormatYAML
)

var statusFormats = []string{statusText, statusWide, statusJSON, statusYAML}

// statusPrinterFormats are the -o values cli-runtime's printers take,
// for the help and the usage error.
var statusPrinterFormats = []string{"name", "jsonpath=TEMPLATE", "jsonpath-as-json=TEMPLATE", "jsonpath-file=FILE", "go-template=TEMPLATE", "go-template-file=FILE"}

type statusOptions struct {
	kubeFlags
	Output        string
	AllNamespaces bool
	Watch         bool
	// Template is --template, for -o go-template|jsonpath without "=".
	Template         string
	AllowMissingKeys bool
}

func (a *App) newStatusCommand() *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:   "status [JOB] [-n NAMESPACE | -A] [-o wide|json|yaml|name|jsonpath=...|go-template=...] [-w]",
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
and -o yaml print one List document of Gangs; -o name, -o jsonpath=...,
-o go-template=... (and their -file forms, --template) print it as
kubectl get does.

-w (--watch) prints again each time one of the gangs changes, until
Ctrl-C.

Exit 0, also when there are no gangs; 2: usage; 3: the kubeconfig, the
API server or the Gang CRD is missing, or access is denied.`,
		Example: `  rankgate status
  rankgate status -A -o wide
  rankgate status train -n ml
  rankgate status pytorchjob/train -w
  rankgate status mpijob train -o yaml
  rankgate status -n ml -o name
  rankgate status -n ml -o jsonpath='{.items[*].status.phase}'
  rankgate status train -n ml -o go-template='{{range .items}}{{.status.progress}}{{"\n"}}{{end}}'`,
		Args:              cobra.MaximumNArgs(2),
		Annotations:       map[string]string{outputFormatsAnnotation: strings.Join(append(slices.Clone(statusFormats), "name"), ",")},
		ValidArgsFunction: completeJobArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runStatus(cmd.Context(), o, args)
		},
	}
	o.register(cmd, false)
	cmd.Flags().BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "list the gangs of every namespace")
	cmd.Flags().BoolVarP(&o.Watch, "watch", "w", false, "after the first output, print again each time a gang changes, until Ctrl-C")
	cmd.Flags().StringVarP(&o.Output, "output", "o", statusText, "output format: text, wide, json, yaml, "+strings.Join(statusPrinterFormats, ", "))
	cmd.Flags().StringVar(&o.Template, "template", "", "the template of -o go-template or -o jsonpath, when not given after =")
	cmd.Flags().BoolVar(&o.AllowMissingKeys, "allow-missing-template-keys", true, "a missing field or key in a -o jsonpath or go-template template prints nothing instead of failing")
	return cmd
}

// printer is cli-runtime's printer for -o, nil for status's own formats.
func (o *statusOptions) printer() (printers.ResourcePrinter, error) {
	if slices.Contains(statusFormats, o.Output) {
		return nil, nil
	}
	format, tmpl, _ := strings.Cut(o.Output, "=")
	if tmpl == "" {
		tmpl = o.Template
	}
	wantTemplate := func() error {
		if tmpl == "" {
			return usagef("-o %s needs a template: -o %s=TEMPLATE or --template", format, format)
		}
		return nil
	}
	var (
		p   printers.ResourcePrinter
		err error
	)
	switch format {
	case "name":
		return &printers.NamePrinter{}, nil
	case "jsonpath", "jsonpath-as-json", "jsonpath-file":
		if err := wantTemplate(); err != nil {
			return nil, err
		}
		if format == "jsonpath-file" {
			if tmpl, err = readTemplate(tmpl); err != nil {
				return nil, err
			}
		}
		jp, jerr := printers.NewJSONPathPrinter(tmpl)
		if jerr == nil {
			jp.AllowMissingKeys(o.AllowMissingKeys)
			jp.EnableJSONOutput(format == "jsonpath-as-json")
		}
		p, err = jp, jerr
	case "go-template", "go-template-file":
		if err := wantTemplate(); err != nil {
			return nil, err
		}
		if format == "go-template-file" {
			if tmpl, err = readTemplate(tmpl); err != nil {
				return nil, err
			}
		}
		gp, gerr := printers.NewGoTemplatePrinter([]byte(tmpl))
		if gerr == nil {
			gp.AllowMissingKeys(o.AllowMissingKeys)
		}
		p, err = gp, gerr
	default:
		return nil, usagef("output format %q: want text, wide, json, yaml, %s", o.Output, strings.Join(statusPrinterFormats, ", "))
	}
	if err != nil {
		return nil, usagef("-o %s: %v", format, err)
	}
	return p, nil
}

// readTemplate reads the template file of -o jsonpath-file|go-template-file.
func readTemplate(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", usagef("template file: %v", err)
	}
	return string(data), nil
}

func (a *App) runStatus(ctx context.Context, o *statusOptions, args []string) error {
	p, err := o.printer()
	if err != nil {
		return err
	}
	timeout, err := o.requestTimeout()
	if err != nil {
		return err
	}
	var ref jobRef
	if len(args) > 0 {
		if ref, err = parseJobRef(args); err != nil {
			return err
		}
		if o.AllNamespaces {
			return usagef("a job is named in one namespace: drop -A, or the job to list every gang")
		}
	}
	if o.AllNamespaces && o.namespaceFlag() != "" {
		return usagef("-A lists every namespace: drop -n %s or -A", o.namespaceFlag())
	}
	if o.Watch {
		// A watch outlives any one request: each list call gets the
		// deadline from a context instead.
		o.Config.Overrides.Timeout = "0"
	}
	l, defaultNS, err := connect(&o.Config)
	if err != nil {
		return kubeconfigError(err)
	}
	ns := ""
	if !o.AllNamespaces {
		if ns, err = jobNamespace(ref, o.namespaceFlag(), func() (string, error) { return defaultNS, nil }); err != nil {
			return err
		}
	}
	sh := &gangShow{a: a, o: o, p: p, ns: ns, ref: ref}
	job := gangstatus.Job{Kind: ref.Kind, Name: ref.Name}
	if o.Watch {
		err := gangstatus.Watch(ctx, l.Dynamic, ns, job, gangstatus.WatchOptions{RequestTimeout: timeout, Deadline: statusWatchDeadline}, sh.show)
		return deadlineError(err, timeout)
	}
	lctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	gangs, err := gangstatus.List(lctx, l.Dynamic, ns, job)
	if err != nil {
		return deadlineError(err, timeout)
	}
	return sh.show(gangs)
}

// statusWatchDeadline is the life of one watch call of status -w; tests
// shorten it.
var statusWatchDeadline = gangstatus.DefaultWatchDeadline

// gangShow prints one state of the gangs, the first or, with -w, each
// one after.
type gangShow struct {
	a     *App
	o     *statusOptions
	p     printers.ResourcePrinter
	ns    string
	ref   jobRef
	shown int
}

func (s *gangShow) show(gangs []v1alpha1.Gang) error {
	out := s.a.Streams.Out
	if len(gangs) == 0 && s.shown == 0 {
		fmt.Fprintln(s.a.Streams.Err, noGangs(s.ns, s.ref))
	}
	human := s.p == nil && (s.o.Output == statusText || s.o.Output == statusWide)
	if s.shown > 0 && human {
		fmt.Fprintln(out)
	}
	s.shown++
	switch {
	case s.p != nil:
		return printGangs(s.p, gangs, out)
	case !human:
		return gangstatus.WriteList(out, gangs, s.o.Output)
	case len(gangs) == 0:
		if s.shown > 1 {
			fmt.Fprintln(out, noGangs(s.ns, s.ref))
		}
		return nil
	}
	now := time.Now()
	wide := s.o.Output == statusWide
	if err := gangstatus.WriteTable(out, gangs, gangstatus.TableOptions{AllNamespaces: s.o.AllNamespaces, Wide: wide, Now: now}); err != nil {
		return err
	}
	if s.ref.Name == "" {
		return nil
	}
	for _, g := range latestAttempts(gangs) {
		fmt.Fprintln(out)
		if err := gangstatus.WriteDetail(out, g, now, wide); err != nil {
			return err
		}
	}
	return nil
}

// printGangs prints the gangs with a cli-runtime printer: the name
// printer takes them one by one, the template printers as one List.
func printGangs(p printers.ResourcePrinter, gangs []v1alpha1.Gang, w io.Writer) error {
	l := printableList(gangs)
	if _, ok := p.(*printers.NamePrinter); !ok {
		return p.PrintObj(l, w)
	}
	for i := range l.Items {
		if err := p.PrintObj(&l.Items[i], w); err != nil {
			return err
		}
	}
	return nil
}

// printableList is the gangs as the List kubectl get prints, for cli-runtime's
// printers: each item with its apiVersion and kind.
func printableList(gangs []v1alpha1.Gang) *v1alpha1.GangList {
	l := &v1alpha1.GangList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}}
	for i := range gangs {
		g := *gangs[i].DeepCopy()
		g.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("Gang"))
		l.Items = append(l.Items, g)
	}
	return l
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
