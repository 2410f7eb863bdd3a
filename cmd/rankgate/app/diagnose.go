//go:build !rankgate_node

package app

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubeflow/ncclsettings"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource/dra"
	"github.com/rankgate/rankgate/integrations/kubernetes/kubeconfig"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/preflight/ncclenv"
	"github.com/rankgate/rankgate/preflight/schedule"
	"github.com/rankgate/rankgate/verdict"
)

// liveSource builds the API clients of live diagnose; tests replace it with
// client-go fakes.
var liveSource = func(f *kubeconfig.Flags) (*cluster.Live, error) {
	cfg, _, err := kubeconfig.FromFlags(f, "rankgate-diagnose/"+Version)
	if err != nil {
		return nil, err
	}
	return cluster.NewLive(cfg)
}

// diagnoseOptions are diagnose's flags (the live ones on its job and pod
// subcommands).
type diagnoseOptions struct {
	Output          string
	Catalog         string
	KnownBadDrivers string
	Offline         bool
	Filenames       []string
	Kind            string
	kubeFlags
}

func (a *App) newDiagnoseCommand() *cobra.Command {
	o := &diagnoseOptions{}
	cmd := &cobra.Command{
		Use:   "diagnose (JOB | job JOB | pod [NAMESPACE/]NAME) [-n NAMESPACE] | diagnose --offline -f FILE... [JOB]",
		Short: "Explain why a GPU job or pod is Pending: wrong shape, busy GPUs, or something else",
		Long: `diagnose decides whether a PyTorchJob, MPIJob or GPU pod can ever be placed,
all its pods at once, and says why not: the GPU or MIG shape it asks for
exists on no node (SHAPE_MISMATCH, with the nearest shapes and their SMs),
exists under the other MIG strategy (STRATEGY_MISMATCH), only after a MIG
layout change (RECONFIGURABLE), or is excluded by the pod's own rules
(NODE_CONSTRAINTS), or the whole gang is larger than the cluster
(GANG_TOO_LARGE); or it only waits for busy devices (WAIT_CAPACITY) or a
mig-manager change (MIG_RECONFIG_PENDING). Pods bound with their DRA
claims allocated are judged from the allocated devices, as their driver
publishes them in ResourceSlices: the rank rules per pod, and, once every
rank of a job is known, the gang verdict the controller records.

Live, it reads the cluster through your kubeconfig (nodes, pods, the job).
JOB is ` + jobRefForms + `, as status takes it ('diagnose JOB' and
'diagnose job JOB' are the same); the namespace comes from -n or
NAMESPACE/NAME, else from the kubeconfig context.
Offline, it reads 'kubectl get -o yaml' or '-o json' dumps (single objects,
Lists, multi-document YAML) and judges every job in them and every GPU pod
not yet bound, or only the JOB named. A TrainJob's pods are made from its
(Cluster)TrainingRuntime: dump the runtimes with it.

Exit 0: schedulable now or waiting; 1: hopeless as it is; 2: bad input or
usage; 3: the API server could not be reached.`,
		Example: `  rankgate diagnose ml/llm-finetune
  rankgate diagnose pytorchjob/llm-finetune -n ml
  rankgate diagnose job mpijob llm-finetune --context prod
  rankgate diagnose pod research/notebook-3g -o json
  kubectl get nodes,pods,pytorchjobs -A -o yaml > dump.yaml
  rankgate diagnose --offline -f dump.yaml
  rankgate diagnose --offline -f nodes.json -f job.yaml
  kubectl get nodes,pods,trainjobs,trainingruntimes,clustertrainingruntimes,jobsets -A -o yaml > dump.yaml
  rankgate diagnose --offline -f dump.yaml trainjob/fine-tune -n ml`,
		Args:              cobra.MaximumNArgs(2),
		ValidArgsFunction: completeJobArgs,
	}
	pf := cmd.PersistentFlags()
	addOutputFlag(pf, &o.Output, " (offline: one list of reports, one per workload)")
	pf.StringVar(&o.Catalog, "catalog", "", "MIG profile catalog file replacing the embedded one")
	pf.StringVar(&o.KnownBadDrivers, "known-bad-drivers", "", "known-bad driver table file replacing the embedded one")
	cmd.Flags().BoolVar(&o.Offline, "offline", false, "judge the objects in files instead of a live cluster")
	cmd.Flags().StringArrayVarP(&o.Filenames, "filename", "f", nil, "with --offline: a kubectl get -o yaml|json dump (repeatable; - for stdin)")

	pf.StringVar(&o.Kind, "kind", "", kubeflow.KindList("or")+", when several kinds use the job's name")
	o.register(cmd, true)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		switch {
		case o.Offline && len(args) > 0:
			ref, err := parseJobRef(args)
			if err != nil {
				return err
			}
			return a.diagnoseOffline(cmd.Context(), o, &ref)
		case o.Offline:
			return a.diagnoseOffline(cmd.Context(), o, nil)
		case len(args) == 0:
			return usagef("diagnose needs a job (JOB or 'job JOB': %s), 'pod [NAMESPACE/]NAME' or --offline -f FILE", jobRefForms)
		}
		return a.diagnoseLive(cmd.Context(), o, args, parseJobRef, a.diagnoseLiveJob)
	}
	live := func(use, short string, args cobra.PositionalArgs, parse func([]string) (jobRef, error), run liveRun) *cobra.Command {
		return &cobra.Command{
			Use:   use,
			Short: short,
			Args:  args,
			RunE: func(cmd *cobra.Command, args []string) error {
				return a.diagnoseLive(cmd.Context(), o, args, parse, run)
			},
		}
	}
	jobCmd := live("job JOB", "Diagnose a "+kubeflow.KindList("or")+" on a live cluster (JOB: "+jobRefForms+"); the same as diagnose JOB",
		cobra.RangeArgs(1, 2), parseJobRef, a.diagnoseLiveJob)
	jobCmd.ValidArgsFunction = completeJobArgs
	podCmd := live("pod [NAMESPACE/]NAME", "Diagnose a pod (its job when it belongs to one) on a live cluster",
		cobra.ExactArgs(1), func(args []string) (jobRef, error) { return parsePodRef(args[0]) }, a.diagnoseLivePod)
	cmd.AddCommand(jobCmd, podCmd)
	return cmd
}

// liveRun judges one job or pod of a live cluster.
type liveRun func(ctx context.Context, o *diagnoseOptions, l *cluster.Live, ns string, ref jobRef) error

// diagnoseLive reads a job or pod from the arguments and judges it on
// the cluster of the connection flags.
func (a *App) diagnoseLive(ctx context.Context, o *diagnoseOptions, args []string, parse func([]string) (jobRef, error), run liveRun) error {
	if err := checkFormat(o.Output); err != nil {
		return err
	}
	if len(o.Filenames) > 0 {
		return usagef("-f FILE is read with --offline only: add --offline, or drop -f to read the cluster")
	}
	timeout, err := o.requestTimeout()
	if err != nil {
		return err
	}
	ref, err := parse(args)
	if err != nil {
		return err
	}
	ns, err := jobNamespace(ref, o.namespaceFlag(), o.contextNamespace)
	if err != nil {
		return err
	}
	l, err := liveSource(&o.Config)
	if err != nil {
		return kubeconfigError(err)
	}
	// --request-timeout bounds each call (the clients' own timeout);
	// the whole read gets one per kind it lists at most.
	ctx, cancel := withTimeout(ctx, 4*timeout)
	defer cancel()
	return deadlineError(run(ctx, o, l, ns, ref), timeout)
}

// diagnoseTables loads the configured data tables.
func (a *App) diagnoseTables(ctx context.Context, o *diagnoseOptions) (diagnoseTables, error) {
	cat, drivers, err := preflight.LoadTables(ctx, o.Catalog, o.KnownBadDrivers)
	if err != nil {
		return diagnoseTables{}, inputError(ctx, err)
	}
	return diagnoseTables{catalog: cat, drivers: drivers}, nil
}

// diagnoseEngine builds the engine with the configured data tables.
func (a *App) diagnoseEngine(ctx context.Context, o *diagnoseOptions) (*schedule.Engine, diagnoseTables, error) {
	t, err := a.diagnoseTables(ctx, o)
	if err != nil {
		return nil, t, err
	}
	return schedule.New(schedule.WithCatalog(t.catalog), schedule.WithDriverTable(t.drivers)), t, nil
}

// diagnoseOffline judges what the files hold: every job and unbound GPU
// pod, or with ref the one job it names.
func (a *App) diagnoseOffline(ctx context.Context, o *diagnoseOptions, ref *jobRef) error {
	format := o.Output
	if err := checkFormat(format); err != nil {
		return err
	}
	files := o.Filenames
	if len(files) == 0 {
		return verdict.Exitf(verdict.ExitUsage, "--offline needs at least one -f FILE (kubectl get -o yaml|json output, or a node's labels as kubectl get node NAME -o jsonpath='{.metadata.labels}' prints them; - for stdin)")
	}
	e, tables, err := a.diagnoseEngine(ctx, o)
	if err != nil {
		return err
	}
	b := cluster.NewBuilder()
	var stats cluster.LoadStats
	for _, f := range files {
		if err := cluster.LoadFile(ctx, b, f, a.Streams.In, &stats); err != nil {
			return inputError(ctx, err)
		}
	}
	for _, ln := range stats.LabelsNodes {
		fmt.Fprintf(a.Streams.Err, "rankgate: note: node %s read from its labels alone (name from %s): GPU resources from its GPU feature discovery labels; cpu, memory and pods unknown, taken as enough\n", ln.Name, ln.NameFrom)
	}
	for _, k := range sortedCountKeys(stats.Skipped) {
		a.Log.Info("skipped objects of a kind diagnose does not use", zap.String("kind", k), zap.Int("count", stats.Skipped[k]))
	}
	c := e.NewCluster(b.Nodes())
	noteLabelErrors(a, c)
	ws, err := offlineWorkloads(b, ref, o)
	if err != nil {
		return err
	}
	src := tables.draSource(b.DRAObjects())
	if len(ws) == 0 && len(b.BoundDRAPods()) > 0 {
		return a.offlineDRAPods(ctx, src, b, format)
	}
	if len(ws) == 0 {
		dra := ""
		if n := b.RunningDRAPods(); n > 0 {
			dra = fmt.Sprintf("; %d pod(s) with DRA resource claims are bound and running: their devices came through DRA claims", n)
		}
		return verdict.Exitf(verdict.ExitUsage, "nothing to diagnose: the files hold no PyTorchJob, MPIJob or unbound GPU pod (%d objects read, %d nodes)%s", stats.Objects, c.NodeCount(), dra)
	}
	if n := b.OrphanNodes(); n > 0 {
		a.Log.Warn("bound pods name nodes that are not in the files; their usage is ignored", zap.Int("nodes", n))
	}
	if c.NodeCount() == 0 {
		fmt.Fprintln(a.Streams.Err, "rankgate: warning: the files hold no Node: every workload is judged against an empty cluster (add `kubectl get nodes -o yaml` output)")
	}
	reports := make([]shownReport, 0, len(ws))
	code := verdict.ExitPass
	for _, w := range ws {
		res := e.Diagnose(c, w)
		r := shownReport{Report: withSuspended(res.Report, w)}
		if j := jobOf(b.Jobs(), w); j != nil {
			// The job's NCCL settings against what its templates ask
			// for (a TrainJob's: its runtime's, resolved).
			if rj, err := b.Resolve(j); err == nil {
				j = rj
			}
			if r, err = judgeAllocations(ctx, src, b, j, r.Report); err != nil {
				return inputError(ctx, err)
			}
			r.Report = ncclenv.Merge(r.Report, ncclsettings.Judge(j))
		}
		reports = append(reports, r)
		code = max(code, res.ExitCode(), r.ExitCode())
	}
	if err := writeReports(a.Streams.Out, reports, format); err != nil {
		return err
	}
	if code != verdict.ExitPass {
		return verdict.Silent(code)
	}
	return nil
}

// jobOf is the job a workload was built from; nil for a workload of bare
// pods.
func jobOf(jobs []kubeflow.Job, w schedule.Workload) kubeflow.Job {
	for _, j := range jobs {
		if j.Kind() == w.Kind && j.Namespace() == w.Namespace && j.Name() == w.Name {
			return j
		}
	}
	return nil
}

// writeReports prints several reports: text one after another, JSON or
// YAML as one ReportList document (a single live report is printed as one
// Report, like preflight's).
func writeReports(w io.Writer, rs []shownReport, format string) error {
	if isDocument(format) {
		list := make([]verdict.Report, len(rs))
		for i, r := range rs {
			list[i] = r.Report
		}
		return verdict.WriteDocument(w, verdict.NewDocumentList(list), format)
	}
	for i, r := range rs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if err := writeShown(w, r, format); err != nil {
			return err
		}
	}
	return nil
}

func withSuspended(r verdict.Report, w schedule.Workload) verdict.Report {
	if w.Suspended {
		r.Subject += " (suspended: judged as if resumed)"
	}
	return r
}

func (a *App) diagnoseLiveJob(ctx context.Context, o *diagnoseOptions, l *cluster.Live, ns string, ref jobRef) error {
	kind, err := jobKind(ref, o.Kind)
	if err != nil {
		return err
	}
	j, err := l.Job(ctx, ns, ref.Name, kind)
	if err != nil {
		return err
	}
	return a.judgeLive(ctx, o, l, j, nil)
}

func (a *App) diagnoseLivePod(ctx context.Context, o *diagnoseOptions, l *cluster.Live, ns string, ref jobRef) error {
	name := ref.Name
	p, err := l.Pod(ctx, ns, name)
	if err != nil {
		return err
	}
	if p.Spec.NodeName != "" && dra.UsesClaims(p) {
		return a.diagnoseLiveDRAPod(ctx, o, l, p)
	}
	if p.Spec.NodeName != "" {
		r := verdict.NewReport("Pod "+ns+"/"+name, []verdict.Finding{{
			Rule: verdict.RuleSchedulable, Severity: verdict.SeverityInfo,
			Message: fmt.Sprintf("The pod is already bound to node %s (phase %s): the scheduler placed it. If it does not start, look at its events and at the node.", p.Spec.NodeName, p.Status.Phase),
			Nodes:   []string{p.Spec.NodeName}, Pods: []string{ns + "/" + name},
		}})
		return a.printReport(r, o.Output)
	}
	j, ok, err := l.JobOfPod(ctx, p)
	if err != nil {
		return err
	}
	if ok {
		a.Log.Info("the pod belongs to a job: judging the whole job", zap.String("job", j.Kind()+" "+j.Namespace()+"/"+j.Name()))
		return a.judgeLive(ctx, o, l, j, nil)
	}
	return a.judgeLive(ctx, o, l, nil, &podRef{ns, name})
}

type podRef struct{ ns, name string }

func (a *App) judgeLive(ctx context.Context, o *diagnoseOptions, l *cluster.Live, j kubeflow.Job, pod *podRef) error {
	e, tables, err := a.diagnoseEngine(ctx, o)
	if err != nil {
		return err
	}
	b := cluster.NewBuilder()
	if err := l.LoadCluster(ctx, b); err != nil {
		return err
	}
	for _, n := range l.Notes {
		fmt.Fprintln(a.Streams.Err, "rankgate: note: "+n)
	}
	c := e.NewCluster(b.Nodes())
	noteLabelErrors(a, c)
	var w schedule.Workload
	if j != nil {
		if err := l.LoadRuntime(ctx, b, j); err != nil {
			return err
		}
		if err := b.AddJob(j); err != nil {
			return verdict.Exitf(verdict.ExitUsage, "%s %s/%s: %v", j.Kind(), j.Namespace(), j.Name(), err)
		}
		rj, err := b.Resolve(j)
		if err != nil {
			return verdict.Exitf(verdict.ExitUsage, "%s %s/%s: %v", j.Kind(), j.Namespace(), j.Name(), err)
		}
		j = rj
		if w, err = b.WorkloadFor(j); err != nil {
			return verdict.Exitf(verdict.ExitUsage, "%s %s/%s: %v", j.Kind(), j.Namespace(), j.Name(), err)
		}
	} else {
		var ok bool
		if w, ok = b.PodWorkload(pod.ns, pod.name); !ok {
			return verdict.Exitf(verdict.ExitUsage, "pod %s/%s is gone or bound since it was read; run again", pod.ns, pod.name)
		}
	}
	res := e.Diagnose(c, w)
	r := shownReport{Report: withSuspended(res.Report, w)}
	if j != nil {
		if r, err = judgeAllocations(ctx, tables.draSource(b.DRAObjects()), b, j, r.Report); err != nil {
			return err
		}
		r.Report = ncclenv.Merge(r.Report, ncclsettings.Judge(j))
	}
	if err := writeShown(a.Streams.Out, r, o.Output); err != nil {
		return err
	}
	if code := max(res.ExitCode(), r.ExitCode()); code != verdict.ExitPass {
		return verdict.Silent(code)
	}
	return nil
}

func sortedCountKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// offlineWorkloads: every workload of the files, or the one job ref
// names (its namespace from ref or -n; any namespace when neither says).
func offlineWorkloads(b *cluster.Builder, ref *jobRef, o *diagnoseOptions) ([]schedule.Workload, error) {
	if ref == nil {
		ws, err := b.Workloads()
		if err != nil {
			return nil, verdict.Exitf(verdict.ExitUsage, "%v", err)
		}
		return ws, nil
	}
	kind, err := jobKind(*ref, o.Kind)
	if err != nil {
		return nil, err
	}
	ns := ref.Namespace
	if ns == "" {
		ns = o.namespaceFlag()
	}
	var found []kubeflow.Job
	for _, j := range b.Jobs() {
		if j.Name() == ref.Name && (ns == "" || j.Namespace() == ns) && (kind == "" || j.Kind() == kind) {
			found = append(found, j)
		}
	}
	switch len(found) {
	case 0:
		what := ref.String()
		if ns != "" {
			what += " in namespace " + ns
		}
		return nil, usagef("no job %s in the files (they hold %d job(s)): dump it with the rest (kubectl get KIND NAME -n NAMESPACE -o yaml)", what, len(b.Jobs()))
	case 1:
		j := found[0]
		rj, err := b.Resolve(j)
		if err != nil {
			return nil, verdict.Exitf(verdict.ExitUsage, "%s %s/%s: %v", j.Kind(), j.Namespace(), j.Name(), err)
		}
		w, err := b.WorkloadFor(rj)
		if err != nil {
			return nil, verdict.Exitf(verdict.ExitUsage, "%s %s/%s: %v", j.Kind(), j.Namespace(), j.Name(), err)
		}
		return []schedule.Workload{w}, nil
	}
	names := make([]string, len(found))
	for i, j := range found {
		names[i] = j.Kind() + " " + j.Namespace() + "/" + j.Name()
	}
	return nil, usagef("%s names %d jobs in the files (%s): give the kind (KIND/NAME) or the namespace (-n)", ref.String(), len(found), strings.Join(names, ", "))
}

// noteLabelErrors notes, on stderr, the nodes whose GPU labels cannot be
// read. The engine judges them from their allocatable alone and calls no
// job hopeless while any exists (NODE_LABELS_UNREADABLE), as the
// validating webhook and the controller do.
func noteLabelErrors(a *App, c *schedule.Cluster) {
	for _, le := range c.LabelErrors {
		fmt.Fprintf(a.Streams.Err, "rankgate: note: GPU labels ignored, judged from allocatable alone: %v\n", le)
	}
}
