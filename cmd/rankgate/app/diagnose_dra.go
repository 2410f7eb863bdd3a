//go:build !rankgate_node

package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource/dra"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// A pod whose claims the scheduler has allocated is judged from its
// allocation, as the controller judges it (integrations/kubernetes/
// controller/allocations.go): the DRA device source resolves the pod's
// claims to the devices their driver publishes and runs the rank rules on
// them; a job whose rank pods are all known so gets the gang rules, with
// the rank count of its spec, and the verdict the controller records.

// diagnoseTables are the data tables diagnose judges with.
type diagnoseTables struct {
	catalog *topology.Catalog
	drivers *preflight.DriverTable
}

// draSource is the DRA device source over objs with the tables.
func (t diagnoseTables) draSource(objs dra.Objects) *dra.Source {
	return &dra.Source{Objects: objs, Drivers: t.drivers, Catalog: t.catalog}
}

// shownReport is a report as diagnose prints it; ranks are the ranks
// judged from their DRA allocations, whose devices the text lists with
// their pools.
type shownReport struct {
	verdict.Report
	ranks []preflight.RankReport
}

// writeShown prints one report: text with the DRA ranks' devices, or one
// JSON or YAML document.
func writeShown(w io.Writer, r shownReport, format string) error {
	if isDocument(format) || len(r.ranks) == 0 {
		return verdict.Write(w, r.Report, format)
	}
	subject := ""
	if r.Subject != "" {
		subject = "  " + verdict.EscapeText(r.Subject)
	}
	fmt.Fprintf(w, "verdict: %s%s\n\n", strings.ToUpper(string(r.Verdict)), subject)
	if err := writeDRADevices(w, r.ranks); err != nil {
		return err
	}
	if len(r.Findings) == 0 {
		_, err := fmt.Fprintln(w, "\nno findings")
		return err
	}
	fmt.Fprintln(w)
	for _, f := range r.Findings {
		verdict.WriteFinding(w, f)
	}
	return nil
}

// writeDRADevices lists the ranks' devices: UUID, shape and the pool and
// device their driver publishes them as.
func writeDRADevices(w io.Writer, ranks []preflight.RankReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tPOD\tDEVICE\tKIND\tPROFILE\tSMS\tMEMORY\tPOOL/DEVICE")
	for _, rr := range ranks {
		rank := "-"
		if rr.Rank >= 0 {
			rank = fmt.Sprint(rr.Rank)
		}
		for _, d := range rr.Report.Devices {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", rank, verdict.EscapeText(rr.Pod), verdict.EscapeText(d.ID), verdict.EscapeText(d.Kind),
				orDash(verdict.EscapeText(d.Profile)), countOrDash(uint64(d.SMs), ""), countOrDash(d.MemoryMiB, " MiB"), orDash(verdict.EscapeText(poolDevice(d.DRA))))
		}
	}
	return tw.Flush()
}

// poolDevice is pool/device of a driver/pool/device name (a driver's name
// has no slash; a pool's may).
func poolDevice(name string) string {
	if _, rest, ok := strings.Cut(name, "/"); ok {
		return rest
	}
	return name
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func countOrDash(n uint64, unit string) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n) + unit
}

// podRank names a pod's rank in its job: "rank N of Kind ns/name", and N;
// rank -1 for a pod of no job, or whose rank its labels do not give.
func podRank(j kubeflow.Job, p *corev1.Pod) (string, int) {
	if j == nil {
		return "", -1
	}
	job := j.Kind() + " " + j.Namespace() + "/" + j.Name()
	rank, err := kubeflow.RankOf(j, p)
	switch {
	case errors.Is(err, kubeflow.ErrNoRank):
		return "a pod of " + job + " that runs no rank", -1
	case err != nil:
		return "a pod of " + job + " whose rank is unknown (" + err.Error() + ")", -1
	}
	return fmt.Sprintf("rank %d of %s", rank, job), rank
}

// draPodReport judges one bound pod from its DRA allocation: the rank
// rules on its devices, or DRA_NOT_JUDGED saying what it waits for. j is
// its job (nil: none).
func draPodReport(ctx context.Context, src devicesource.Source, bp cluster.BoundDRAPod, j kubeflow.Job) (shownReport, error) {
	of, rank := podRank(j, bp.Pod)
	r, err := src.Rank(ctx, bp.Pod, rank)
	if err != nil {
		return shownReport{}, fmt.Errorf("pod %s/%s: reading its DRA allocation: %w", bp.Namespace, bp.Name, err)
	}
	subject := "Pod " + bp.Namespace + "/" + bp.Name
	if of != "" {
		subject += " (" + of + ")"
	}
	if !r.Known {
		return shownReport{Report: verdict.NewReport(subject, []verdict.Finding{waitingFinding(cluster.BoundDRAMessage(bp, r.Waiting), []string{bp.Node}, []string{bp.Namespace + "/" + bp.Name})})}, nil
	}
	out := r.Report.Report
	out.Subject = fmt.Sprintf("%s on %s: %d device(s) from its DRA allocation", subject, r.Report.Node, len(out.Devices))
	return shownReport{Report: out, ranks: []preflight.RankReport{r.Report}}, nil
}

// waitingFinding: DRA_NOT_JUDGED, the pods' devices are not known yet
// from their allocations.
func waitingFinding(msg string, nodes, pods []string) verdict.Finding {
	return verdict.Finding{
		Rule: verdict.RuleDRANotJudged, Severity: verdict.SeverityWarn, Message: msg, Nodes: nodes, Pods: pods,
		Remediation: "offline, dump the pods' ResourceClaims and the ResourceSlices with them (kubectl get resourceclaims,resourceslices -A -o yaml); live, run again: the scheduler allocates a pod's claims before it binds it. " +
			"A device that stays unpublished: read the DRA driver's kubelet plugin log on the node (kubectl describe resourceclaim shows the allocation)",
	}
}

// allocGang is what the DRA allocations of a job's bound rank pods say.
type allocGang struct {
	expected int
	// multiNodeNVLink: the job expects one multi-node NVLink domain (its
	// annotation, as the controller's gang reads it).
	multiNodeNVLink bool
	// known: the ranks whose devices their allocations give, by rank.
	known []preflight.RankReport
	// waiting says, rank by rank, what a bound rank pod waits for.
	waiting      []string
	nodes, pods  []string // of the waiting ranks
	waitingRanks []int
}

// gangFromAllocations reads the allocations of j's bound rank pods as the
// controller does (fromAllocations): a pod that is being deleted, or whose
// labels and name are not those of one of j's rank pods, is left out; a
// rank taken by an earlier pod is not taken again.
func gangFromAllocations(ctx context.Context, src devicesource.Source, j kubeflow.Job, pods []*corev1.Pod) (allocGang, error) {
	g := allocGang{expected: kubeflow.RankPods(j),
		multiNodeNVLink: contract.GateEnabled(strings.ToLower(j.Object().GetAnnotations()[contract.AnnotationMultiNodeNVLink]))}
	held := map[int]bool{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || !dra.UsesClaims(p) {
			continue
		}
		typ := kubeflow.ReplicaTypeOf(j, p)
		if typ == "" || j.PodNameFits(p, typ) != nil {
			continue
		}
		rank, err := kubeflow.RankOf(j, p)
		if err != nil || held[rank] {
			continue
		}
		r, err := src.Rank(ctx, p, rank)
		if err != nil {
			return g, fmt.Errorf("pod %s/%s: reading its DRA allocation: %w", p.Namespace, p.Name, err)
		}
		held[rank] = true
		switch {
		case r.Known:
			g.known = append(g.known, r.Report)
		case r.Waiting != "":
			g.waiting = append(g.waiting, fmt.Sprintf("rank %d (pod %s on %s): %s", rank, p.Name, p.Spec.NodeName, r.Waiting))
			g.waitingRanks = append(g.waitingRanks, rank)
			g.nodes = append(g.nodes, p.Spec.NodeName)
			g.pods = append(g.pods, p.Namespace+"/"+p.Name)
		}
	}
	sort.Slice(g.known, func(a, b int) bool { return g.known[a].Rank < g.known[b].Rank })
	return g, nil
}

// maxListedWaiting bounds the waiting ranks a finding names.
const maxListedWaiting = 8

// report merges what the allocations say into sched, the job's report
// from the scheduling judgement. Every rank known: the gang rules decide,
// with the job's rank count, as the controller does. Some known: the gang
// rules run on them and stand when they already fail (the controller
// decides such a gang early). A bound rank pod whose allocation is not
// known yet adds a DRA_NOT_JUDGED warning saying what it waits for. When
// every rank pod is bound, the scheduling judgement's SCHEDULABLE and
// DRA_NOT_JUDGED findings are dropped: they only say the pods were placed,
// or that their placement is not judged.
func (g allocGang) report(job string, sched verdict.Report) shownReport {
	if len(g.known) == 0 && len(g.waiting) == 0 {
		return shownReport{Report: sched}
	}
	findings := append([]verdict.Finding(nil), sched.Findings...)
	if len(g.known)+len(g.waiting) == g.expected {
		// Every rank pod is placed: whether it could be, and that its
		// placement is not judged, is moot.
		findings = withoutRule(withoutRule(findings, verdict.RuleSchedulable), verdict.RuleDRANotJudged)
	}
	subject := sched.Subject
	var devices []verdict.DeviceSummary
	for _, rr := range g.known {
		devices = append(devices, rr.Report.Devices...)
	}
	if len(g.known) > 0 {
		subject += fmt.Sprintf(": %d of %d ranks known from their DRA allocations", len(g.known), g.expected)
		complete := len(g.known) == g.expected
		in := preflight.GangInput{Job: job, Ranks: g.known, ExpectMultiNodeNVLink: g.multiNodeNVLink}
		if complete {
			in.Expected = g.expected
		}
		gang := preflight.GangRules(in)
		if complete || gang.Failed() {
			findings = append(gang.Findings, findings...)
		}
		if !complete && gang.Failed() {
			subject += ", and they already fail together"
		}
	}
	if len(g.waiting) > 0 {
		shown := g.waiting[:min(len(g.waiting), maxListedWaiting)]
		msg := strings.Join(shown, "; ")
		if n := len(g.waiting) - len(shown); n > 0 {
			msg += fmt.Sprintf("; and %d more", n)
		}
		msg += fmt.Sprintf(". The job is judged from its ranks' DRA allocations once every rank pod's claims are allocated and their devices published (%d of %d ranks known)", len(g.known), g.expected)
		f := waitingFinding(msg, dedupe(g.nodes), g.pods)
		f.Ranks = g.waitingRanks
		findings = append(findings, f)
	}
	out := verdict.NewReport(subject, findings)
	out.Mode, out.Devices = sched.Mode, append(append([]verdict.DeviceSummary(nil), sched.Devices...), devices...)
	return shownReport{Report: out, ranks: g.known}
}

func withoutRule(fs []verdict.Finding, rule string) []verdict.Finding {
	var out []verdict.Finding
	for _, f := range fs {
		if f.Rule != rule {
			out = append(out, f)
		}
	}
	return out
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// judgeAllocations adds to r, job j's report, what its bound rank pods'
// DRA allocations say (allocGang.report). j is resolved (a TrainJob with
// its runtime).
func judgeAllocations(ctx context.Context, src devicesource.Source, b *cluster.Builder, j kubeflow.Job, r verdict.Report) (shownReport, error) {
	pods := b.DRAPodsOf(j)
	if len(pods) == 0 {
		return shownReport{Report: r}, nil
	}
	g, err := gangFromAllocations(ctx, src, j, pods)
	if err != nil {
		return shownReport{}, err
	}
	return g.report(j.Kind()+" "+j.Namespace()+"/"+j.Name(), r), nil
}

// diagnoseLiveDRAPod judges a bound pod that uses claims from its
// allocation: the cluster's claims and slices, and its job for its rank.
func (a *App) diagnoseLiveDRAPod(ctx context.Context, o *diagnoseOptions, l *cluster.Live, p *corev1.Pod) error {
	tables, err := a.diagnoseTables(ctx, o)
	if err != nil {
		return err
	}
	b := cluster.NewBuilder()
	if err := l.LoadDRA(ctx, b); err != nil {
		return err
	}
	for _, n := range l.Notes {
		fmt.Fprintln(a.Streams.Err, "rankgate: note: "+n)
	}
	j, ok, err := l.JobOfPod(ctx, p)
	if err != nil {
		return err
	}
	if ok {
		if err := l.LoadRuntime(ctx, b, j); err != nil {
			return err
		}
		if rj, err := b.Resolve(j); err == nil {
			j = rj
		}
	}
	r, err := draPodReport(ctx, tables.draSource(b.DRAObjects()), cluster.BoundDRAPodOf(p), j)
	if err != nil {
		return err
	}
	if err := writeShown(a.Streams.Out, r, o.Output); err != nil {
		return err
	}
	if code := r.ExitCode(); code != verdict.ExitPass {
		return verdict.Silent(code)
	}
	return nil
}

// offlineDRAPods judges the bound pods with claims of files that hold no
// workload (so no job either), each from its allocation.
func (a *App) offlineDRAPods(ctx context.Context, src devicesource.Source, b *cluster.Builder, format string) error {
	reports := make([]shownReport, 0, len(b.BoundDRAPods()))
	code := verdict.ExitPass
	for _, bp := range b.BoundDRAPods() {
		r, err := draPodReport(ctx, src, bp, nil)
		if err != nil {
			return inputError(ctx, err)
		}
		reports = append(reports, r)
		code = max(code, r.ExitCode())
	}
	if err := writeReports(a.Streams.Out, reports, format); err != nil {
		return err
	}
	if code != verdict.ExitPass {
		return verdict.Silent(code)
	}
	return nil
}
