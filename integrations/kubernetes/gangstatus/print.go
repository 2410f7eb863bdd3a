package gangstatus

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
	"github.com/rankgate/rankgate/verdict"
)

// TableOptions choose the table's columns.
type TableOptions struct {
	// AllNamespaces adds the NAMESPACE column.
	AllNamespaces bool
	// Wide adds ATTEMPT, DEADLINE, DECIDED-BY and MISSING.
	Wide bool
	// Now is the clock AGE and DEADLINE are measured against.
	Now time.Time
}

// none is an empty cell.
const none = "-"

// narrowReason is the longest REASON a plain table shows; -o wide and the
// detail view show all of it.
const narrowReason = 64

// WriteTable prints the gangs as kubectl get prints resources: upper-case
// headers, columns aligned with spaces.
func WriteTable(w io.Writer, gs []v1alpha1.Gang, o TableOptions) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	var head []string
	if o.AllNamespaces {
		head = append(head, "NAMESPACE")
	}
	head = append(head, "JOB")
	if o.Wide {
		head = append(head, "ATTEMPT")
	}
	head = append(head, "PHASE", "RANKS", "VERDICT", "REASON", "AGE")
	if o.Wide {
		head = append(head, "DEADLINE", "DECIDED-BY", "MISSING")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for i := range gs {
		g := &gs[i]
		var row []string
		if o.AllNamespaces {
			row = append(row, esc(g.Namespace))
		}
		row = append(row, esc(JobName(g)))
		if o.Wide {
			row = append(row, strconv.Itoa(int(g.Spec.Attempt)))
		}
		reason := oneLine(g.Status.Reason)
		if !o.Wide {
			reason = cut(reason, narrowReason)
		}
		row = append(row, orNone(esc(string(g.Status.Phase))), esc(Progress(g)), orNone(esc(g.Status.Verdict)), orNone(reason), age(g.CreationTimestamp, o.Now))
		if o.Wide {
			row = append(row, TimeLeft(g, o.Now), orNone(esc(g.Status.DecidedBy)), strconv.Itoa(int(Missing(g))))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// JobName is the gang's job as KIND/NAME, kind in lower case
// (pytorchjob/train), the form rankgate status and kubectl take.
func JobName(g *v1alpha1.Gang) string {
	kind := strings.ToLower(g.Spec.Job.Kind)
	if kind == "" {
		return g.Spec.Job.Name
	}
	return kind + "/" + g.Spec.Job.Name
}

// Progress is "reported/expected".
func Progress(g *v1alpha1.Gang) string {
	if g.Status.Progress != "" {
		return g.Status.Progress
	}
	return fmt.Sprintf("%d/%d", g.Status.ReportedRanks, g.Spec.ExpectedRanks)
}

// Decided tells whether the gang has its verdict.
func Decided(g *v1alpha1.Gang) bool {
	return g.Status.Verdict != "" || g.Status.Phase == v1alpha1.PhasePassed || g.Status.Phase == v1alpha1.PhaseFailed
}

// Missing counts the ranks that have not reported: those the verdict was
// decided without, or, while the gang is open, the ones still awaited.
func Missing(g *v1alpha1.Gang) int32 {
	if Decided(g) {
		return g.Status.MissingCount
	}
	return max(g.Spec.ExpectedRanks-g.Status.ReportedRanks, 0)
}

// TimeLeft is how long an open gang still waits for its ranks ("4m12s
// left", "overdue 3s"); "-" for a decided gang or one without deadline.
func TimeLeft(g *v1alpha1.Gang, now time.Time) string {
	if Decided(g) || g.Status.Deadline == nil {
		return none
	}
	left := g.Status.Deadline.Sub(now)
	if left < 0 {
		return "overdue " + duration.HumanDuration(-left)
	}
	return duration.HumanDuration(left) + " left"
}

// WriteDetail prints one gang in full: what kubectl describe would, and a
// line per reported rank. Every stored string is escaped for the terminal.
func WriteDetail(w io.Writer, g *v1alpha1.Gang, now time.Time, wide bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	field := func(name, value string) {
		if value != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", name, esc(value))
		}
	}
	field("Gang", g.Namespace+"/"+g.Name)
	field("Job", fmt.Sprintf("%s %s/%s, attempt %d", g.Spec.Job.Kind, g.Namespace, g.Spec.Job.Name, g.Spec.Attempt))
	field("Phase", string(g.Status.Phase))
	ranks := fmt.Sprintf("%s reported", Progress(g))
	if n := Missing(g); n > 0 {
		ranks += fmt.Sprintf(", %d missing", n)
	}
	field("Ranks", ranks)
	field("First report", stamp(g.Status.FirstReportAt, now))
	field("Deadline", stamp(g.Status.Deadline, now))
	field("Waiting for", oneLine(g.Status.WaitingFor))
	verdictLine := g.Status.Verdict
	if len(g.Status.Rules) > 0 {
		verdictLine += " (" + strings.Join(g.Status.Rules, ", ") + ")"
	}
	field("Verdict", verdictLine)
	field("Reason", oneLine(g.Status.Reason))
	field("Action", g.Status.Action)
	decided := stamp(g.Status.DecidedAt, now)
	if decided != "" && g.Status.DecidedBy != "" {
		decided += " by " + g.Status.DecidedBy
	}
	field("Decided", decided)
	if err := tw.Flush(); err != nil {
		return err
	}
	if msg := strings.TrimSpace(g.Status.Message); msg != "" && msg != strings.TrimSpace(g.Status.Reason) {
		fmt.Fprintln(w, "Message:")
		for _, l := range strings.Split(msg, "\n") {
			fmt.Fprintln(w, "  "+esc(l))
		}
	}
	if err := writeRanks(w, g, wide); err != nil {
		return err
	}
	if len(g.Status.MissingRanks) > 0 {
		ids := make([]string, len(g.Status.MissingRanks))
		for i, r := range g.Status.MissingRanks {
			ids[i] = strconv.Itoa(int(r))
		}
		more := ""
		if extra := int(g.Status.MissingCount) - len(ids); extra > 0 {
			more = fmt.Sprintf(" and %d more", extra)
		}
		fmt.Fprintf(w, "Missing ranks: %s%s\n", strings.Join(ids, ", "), more)
	}
	return nil
}

func writeRanks(w io.Writer, g *v1alpha1.Gang, wide bool) error {
	if len(g.Status.Ranks) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	head := "RANK\tPOD\tNODE\tVERDICT\tRULES"
	// FROM shows where a rank's report comes from once one comes from a
	// DRA allocation.
	from := slices.ContainsFunc(g.Status.Ranks, func(r v1alpha1.RankStatus) bool { return r.Source != "" })
	if from {
		head += "\tFROM"
	}
	if wide {
		head += "\tDEVICES"
	}
	fmt.Fprintln(tw, head)
	for _, r := range g.Status.Ranks {
		row := fmt.Sprintf("%d\t%s\t%s\t%s\t%s", r.Rank, esc(r.Pod), orNone(esc(r.Node)), orNone(esc(r.Verdict)), orNone(esc(strings.Join(r.Rules, ","))))
		if from {
			row += "\t" + rankSource(r)
		}
		if wide {
			row += "\t" + orNone(esc(rankDevices(r)))
		}
		fmt.Fprintln(tw, row)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if g.Status.RanksOmitted > 0 {
		fmt.Fprintf(w, "(%d more reported ranks not listed: the Gang lists at most %d)\n", g.Status.RanksOmitted, v1alpha1.MaxRankEntries)
	}
	return nil
}

// Output formats of WriteList.
const (
	FormatJSON = "json"
	FormatYAML = "yaml"
)

// WriteList prints the gangs as one document, a List like kubectl get -o
// json|yaml prints: apiVersion v1, kind List, the Gangs as items (with
// their apiVersion and kind, without managedFields).
func WriteList(w io.Writer, gs []v1alpha1.Gang, format string) error {
	items := make([]v1alpha1.Gang, len(gs))
	for i := range gs {
		g := *gs[i].DeepCopy()
		g.APIVersion = v1alpha1.GroupVersion.String()
		g.Kind = "Gang"
		g.ManagedFields = nil
		items[i] = g
	}
	doc := struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		Metadata   metav1.ListMeta `json:"metadata"`
		Items      []v1alpha1.Gang `json:"items"`
	}{"v1", "List", metav1.ListMeta{}, items}
	var (
		data []byte
		err  error
	)
	switch format {
	case FormatJSON:
		data, err = json.MarshalIndent(doc, "", "    ")
		data = append(data, '\n')
	case FormatYAML:
		data, err = yaml.Marshal(doc)
	default:
		return fmt.Errorf("output format %q: want json or yaml", format)
	}
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

func age(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// stamp is a time in UTC with how long ago (or how far ahead) it is.
func stamp(t *metav1.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	d := now.Sub(t.Time)
	rel := duration.HumanDuration(d) + " ago"
	if d < 0 {
		rel = "in " + duration.HumanDuration(-d)
	}
	return t.UTC().Format(time.RFC3339) + " (" + rel + ")"
}

func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}

// oneLine keeps a table row on one line, escaped for the terminal.
func oneLine(s string) string {
	return esc(strings.Join(strings.Fields(s), " "))
}

// esc escapes what a Gang stores for the terminal: a Gang written by an
// older controller may still hold a rank's raw control characters.
func esc(s string) string { return verdict.EscapeText(s) }

func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// rankSource says where the rank's report comes from.
func rankSource(r v1alpha1.RankStatus) string {
	if r.Source == "dra" {
		return "DRA allocation"
	}
	return "rank report"
}

// rankDevices lists the rank's devices: those that came through DRA as
// pool/device (UUID, profile), the others by UUID.
func rankDevices(r v1alpha1.RankStatus) string {
	if len(r.DRADevices) == 0 {
		return strings.Join(r.Devices, ",")
	}
	out := make([]string, len(r.DRADevices))
	for i, d := range r.DRADevices {
		var facts []string
		for _, f := range []string{d.UUID, d.Profile} {
			if f != "" {
				facts = append(facts, f)
			}
		}
		out[i] = d.Pool + "/" + d.Device
		if len(facts) > 0 {
			out[i] += " (" + strings.Join(facts, ", ") + ")"
		}
	}
	return strings.Join(out, ",")
}
