package leader

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/metrics"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

func testRes(name string) *GangRecord {
	return &GangRecord{t: target{kind: "PyTorchJob", ns: "ml", name: name, uid: "6f1c2b3a-1111-4222-8333-444455556666", attempt: 2},
		apiVersion: "kubeflow.org/v1", expected: 4, timeout: time.Minute}
}

// A Gang names its job attempt, is owned by the job (controller, without
// blocking its deletion), and is acted on only when it belongs to the job
// it names: the same namespace, kind, name and UID, the job its controller.
func TestGangObjectOwnedByItsJob(t *testing.T) {
	r := testRes("pt")
	g := newGangObject(r)
	require.Equal(t, "pytorchjob-pt-2", g.Name)
	require.Equal(t, "ml", g.Namespace)
	require.Equal(t, map[string]string{contract.LabelJobKind: "PyTorchJob", contract.LabelJobUID: string(r.t.uid), contract.LabelJobName: "pt"}, g.Labels)
	require.Len(t, g.OwnerReferences, 1)
	ref := g.OwnerReferences[0]
	require.Equal(t, metav1.OwnerReference{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: "pt", UID: r.t.uid,
		Controller: ref.Controller, BlockOwnerDeletion: ref.BlockOwnerDeletion}, ref)
	require.True(t, *ref.Controller)
	require.False(t, *ref.BlockOwnerDeletion)
	require.Equal(t, v1alpha1.JobReference{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: "pt", UID: r.t.uid}, g.Spec.Job)
	require.EqualValues(t, 2, g.Spec.Attempt)
	require.EqualValues(t, 4, g.Spec.ExpectedRanks)
	require.Equal(t, time.Minute, g.Spec.Timeout.Duration)
	require.True(t, ownedBy(g, r.t))

	for name, mutate := range map[string]func(g *v1alpha1.Gang){
		"another job's uid":     func(g *v1alpha1.Gang) { g.Spec.Job.UID = "0c1d2e3f-0000-4000-8000-000000000000" },
		"in another namespace":  func(g *v1alpha1.Gang) { g.Namespace = "other" },
		"no owner reference":    func(g *v1alpha1.Gang) { g.OwnerReferences = nil },
		"owner not controller":  func(g *v1alpha1.Gang) { g.OwnerReferences[0].Controller = nil },
		"owned by another uid":  func(g *v1alpha1.Gang) { g.OwnerReferences[0].UID = "0c1d2e3f-0000-4000-8000-000000000000" },
		"another kind":          func(g *v1alpha1.Gang) { g.Spec.Job.Kind = "MPIJob" },
		"another job's name":    func(g *v1alpha1.Gang) { g.Spec.Job.Name = "other" },
		"owned by another kind": func(g *v1alpha1.Gang) { g.OwnerReferences[0].Kind = "MPIJob" },
	} {
		f := g.DeepCopy()
		mutate(f)
		require.False(t, ownedBy(f, r.t), name)
	}

	// A name too long for a label value is not a label.
	long := testRes(strings.Repeat("x", 80))
	require.NotContains(t, newGangObject(long).Labels, contract.LabelJobName)
}

func rankReport(rank int, v verdict.Verdict, devices int) preflight.RankReport {
	rep := verdict.Report{Verdict: v}
	if v != verdict.VerdictPass {
		sev := verdict.SeverityFail
		if v == verdict.VerdictWarn {
			sev = verdict.SeverityWarn
		}
		rep.Findings = []verdict.Finding{{Rule: "RULE_" + string(v), Severity: sev}, {Rule: "INFO_ONLY", Severity: verdict.SeverityInfo}}
	}
	for d := 0; d < devices; d++ {
		rep.Devices = append(rep.Devices, verdict.DeviceSummary{ID: fmt.Sprintf("GPU-%d-%d", rank, d)})
	}
	return preflight.RankReport{Rank: rank, Pod: fmt.Sprintf("pod-%d", rank), Node: fmt.Sprintf("node-%d", rank/8), Report: rep}
}

// Ranks in a Gang's status are bounded: at most MaxRankEntries, the
// failing ranks (then the warning ones) kept first when cut, in rank
// order, at most MaxRankDevices devices each, rule IDs of fail and warn
// findings only.
func TestRankStatusesBounded(t *testing.T) {
	var ranks []preflight.RankReport
	n := v1alpha1.MaxRankEntries + 500
	for i := 0; i < n; i++ {
		v := verdict.VerdictPass
		switch {
		case i >= n-3:
			v = verdict.VerdictFail
		case i == n-10:
			v = verdict.VerdictWarn
		}
		ranks = append(ranks, rankReport(i, v, 12))
	}
	out, omitted := rankStatuses(ranks)
	require.Len(t, out, v1alpha1.MaxRankEntries)
	require.EqualValues(t, 500, omitted)
	for i := 1; i < len(out); i++ {
		require.Less(t, out[i-1].Rank, out[i].Rank)
	}
	last := out[len(out)-4:]
	require.Equal(t, []int32{int32(n - 10), int32(n - 3), int32(n - 2), int32(n - 1)}, []int32{last[0].Rank, last[1].Rank, last[2].Rank, last[3].Rank})
	require.Equal(t, "warn", last[0].Verdict)
	require.Equal(t, []string{"RULE_fail"}, last[3].Rules)
	require.Equal(t, "fail", last[3].Verdict)
	require.Len(t, out[0].Devices, v1alpha1.MaxRankDevices)
	require.Equal(t, "GPU-0-0", out[0].Devices[0])
	require.Empty(t, out[0].Rules)

	out, omitted = rankStatuses(ranks[:3])
	require.Len(t, out, 3)
	require.Zero(t, omitted)
}

// An open gang's status: its progress, phase and reason; the first report
// never moves later; what the Pending watchdog says the job waits for.
// Its verdict: phase, rules, reason on one line, the missing ranks, the
// Decided condition, and read back as the decision.
func TestGangStatusProgressAndVerdict(t *testing.T) {
	first := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	snap := gangSnapshot{Expected: 8, Ranks: []preflight.RankReport{rankReport(0, verdict.VerdictPass, 1), rankReport(1, verdict.VerdictPass, 1), rankReport(5, verdict.VerdictPass, 1)},
		FirstAt: first, Deadline: first.Add(10 * time.Minute)}
	var st v1alpha1.GangStatus
	setProgress(&st, snap, "")
	require.Equal(t, v1alpha1.PhaseWaitingForRanks, st.Phase)
	require.Equal(t, "3/8", st.Progress)
	require.EqualValues(t, 3, st.ReportedRanks)
	require.Len(t, st.Ranks, 3)
	require.Equal(t, "waiting for 5 more of 8 ranks", st.Reason)
	require.True(t, st.FirstReportAt.Time.Equal(first))
	require.True(t, st.Deadline.Time.Equal(first.Add(10*time.Minute)))

	// A later first report (a new leader's) does not move it.
	later := snap
	later.FirstAt = first.Add(time.Minute)
	setProgress(&st, later, "WAIT_CAPACITY: 2 of 4 nodes busy\nsecond line")
	require.True(t, st.FirstReportAt.Time.Equal(first))
	require.Equal(t, v1alpha1.PhaseWaitingForPlacement, st.Phase)
	require.Equal(t, "WAIT_CAPACITY: 2 of 4 nodes busy", st.Reason)
	require.Contains(t, st.WaitingFor, "second line")

	rep := verdict.NewReport("ml/PyTorchJob/pt: 3 of 8 ranks reported", []verdict.Finding{
		{Rule: verdict.RuleGangMIGSpansGPUs, Severity: verdict.SeverityFail, Message: strings.Repeat("long ", 100) + "\nand more"},
		{Rule: "SOME_WARNING", Severity: verdict.SeverityWarn, Message: "w"},
	})
	d := &decision.Decision{Report: rep, DecidedAt: first.Add(2 * time.Minute), DecidedBy: "replica-a", Action: decision.ActionSuspend}
	setVerdict(&st, snap, d, 1)
	require.Equal(t, v1alpha1.PhaseFailed, st.Phase)
	require.Equal(t, "fail", st.Verdict)
	require.Equal(t, []string{verdict.RuleGangMIGSpansGPUs, "SOME_WARNING"}, st.Rules)
	require.Equal(t, decision.ActionSuspend, st.Action)
	require.Empty(t, st.WaitingFor)
	require.LessOrEqual(t, len(st.Reason), v1alpha1.MaxReasonLength)
	require.NotContains(t, st.Reason, "\n")
	require.True(t, strings.HasPrefix(st.Reason, verdict.RuleGangMIGSpansGPUs+": long"), st.Reason)
	require.Equal(t, []int32{2, 3, 4, 6, 7}, st.MissingRanks)
	require.EqualValues(t, 5, st.MissingCount)
	require.True(t, meta.IsStatusConditionTrue(st.Conditions, contract.ConditionDecided))
	require.Equal(t, "replica-a", st.DecidedBy)

	got, ok := gangDecision(&v1alpha1.Gang{Status: st})
	require.True(t, ok)
	require.Equal(t, rep.Verdict, got.Report.Verdict)
	require.Equal(t, rep.RuleIDs(), got.Report.RuleIDs())
	require.Equal(t, decision.ActionSuspend, got.Action)
	require.Equal(t, "replica-a", got.DecidedBy)
	require.True(t, got.Adopted)

	// Not decided: no verdict to adopt, whatever the fields say.
	meta.RemoveStatusCondition(&st.Conditions, contract.ConditionDecided)
	_, ok = gangDecision(&v1alpha1.Gang{Status: st})
	require.False(t, ok)

	pass := &decision.Decision{Report: verdict.NewReport("ok", nil), DecidedAt: first, DecidedBy: "r"}
	var ps v1alpha1.GangStatus
	snap.Ranks = append(snap.Ranks, rankReport(2, verdict.VerdictPass, 1), rankReport(3, verdict.VerdictPass, 1), rankReport(4, verdict.VerdictPass, 1),
		rankReport(6, verdict.VerdictPass, 1), rankReport(7, verdict.VerdictPass, 1))
	setVerdict(&ps, snap, pass, 1)
	require.Equal(t, v1alpha1.PhasePassed, ps.Phase)
	require.Equal(t, "8/8", ps.Progress)
	require.Equal(t, "all ranks passed", ps.Reason)
	require.Empty(t, ps.Action)
	require.Zero(t, ps.MissingCount)
}

// What a Gang shows of a held rank (its summary) is what it shows of the
// full report: verdict, the rules of fail and warn findings (each once, in
// order), the first devices.
func TestHeldSummaryShowsAsReport(t *testing.T) {
	g, _ := gangstore.New[decision.Decision](gangstore.Gauges{}).Ensure(gangstore.Spec{UID: "u", Key: "ml/PyTorchJob/pt", Kind: "PyTorchJob",
		Namespace: "ml", Name: "pt", Expected: 8, Timeout: time.Minute})
	var ranks, sums []preflight.RankReport
	for rank := 0; rank < 3; rank++ {
		var devs []verdict.DeviceSummary
		for i := 0; i < 4+4*rank; i++ { // up to 12 MIG devices: more than a Gang shows
			devs = append(devs, verdict.DeviceSummary{ID: fmt.Sprintf("MIG-%d-%d", rank, i), Kind: "mig", Profile: "1g.10gb"})
		}
		findings := []verdict.Finding{
			{Rule: "B_RULE", Severity: verdict.SeverityWarn}, {Rule: "A_INFO", Severity: verdict.SeverityInfo},
			{Rule: "C_FAIL", Severity: verdict.SeverityFail}, {Rule: "B_RULE", Severity: verdict.SeverityFail},
		}[:rank*2]
		rep := verdict.NewReport("node n", findings)
		rep.Devices = devs
		rr := preflight.RankReport{Rank: rank, Pod: fmt.Sprintf("p%d", rank), Node: "n", Report: rep}
		ranks = append(ranks, rr)
		g.Add(rr, fmt.Sprint("uid-", rank), time.Now())
	}
	sums = g.Snapshot().Ranks
	want, wantOmitted := rankStatuses(ranks)
	got, omitted := rankStatuses(sums)
	require.Equal(t, want, got)
	require.Equal(t, wantOmitted, omitted)
	require.Equal(t, []string{"B_RULE", "C_FAIL"}, got[2].Rules)
}

// A Gang shows a DRA device's UUID where the driver published one; a
// dynamic MIG placement has none until its instance exists (its ID is the
// rank's own GPU:index numbering).
func TestDRADeviceUUIDOnlyWhenPublished(t *testing.T) {
	d, ok := draDevice(verdict.DeviceSummary{DRA: "gpu.nvidia.com/node-a/gpu-0-mig-1g10gb-19-0", ID: "0:3", Profile: "1g.10gb"})
	require.True(t, ok)
	require.Equal(t, v1alpha1.DRADevice{Driver: "gpu.nvidia.com", Pool: "node-a", Device: "gpu-0-mig-1g10gb-19-0", Profile: "1g.10gb"}, d)
	d, ok = draDevice(verdict.DeviceSummary{DRA: "gpu.nvidia.com/node-a/gpu-1", ID: "GPU-8d116ece-1738-47d9-bd9c-172411e20b8f", Profile: "full"})
	require.True(t, ok)
	require.Equal(t, "GPU-8d116ece-1738-47d9-bd9c-172411e20b8f", d.UUID)
}

// The unapplied-verdicts gauge counts the verdicts recorded and not yet
// on their jobs.
func TestUnappliedGauge(t *testing.T) {
	w := New(Config{}, nil)
	r1 := &GangRecord{t: target{ns: "ml", uid: "u1"}}
	r2 := &GangRecord{t: target{ns: "ml", uid: "u2"}}
	w.book.adopt(r1, true)
	w.book.adopt(r2, true)
	d := &decision.Decision{Report: verdict.NewReport("", nil)}
	w.setPending(r1, d)
	w.setPending(r2, d)
	w.setPending(r2, d)
	require.Equal(t, 2.0, testutil.ToFloat64(metrics.Unapplied))
	got, ok := w.book.Pending("u1")
	require.True(t, ok)
	require.Same(t, d, got)
	r1.onJobAt = time.Now()
	w.countUnapplied()
	require.Equal(t, 1.0, testutil.ToFloat64(metrics.Unapplied))
	_, ok = w.book.Pending("u1")
	require.False(t, ok)
	w.book.drop("ml//", nil)
	w.countUnapplied()
	require.Zero(t, testutil.ToFloat64(metrics.Unapplied))
}
