package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordv1 "k8s.io/api/coordination/v1"

	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// A record names its job by labels and an annotation in the controller's
// namespace; any Lease elsewhere, or without the controller's labels, is
// not a record (it may have been written by anyone who may create Leases).
func TestRecordTargetOnlyOwnRecords(t *testing.T) {
	c := &Controller{opts: Options{Namespace: "rankgate-system"}}
	job := ptJob(false, 2)
	job.UID = "6f1c2b3a-1111-4222-8333-444455556666"
	k, _ := kindByName("PyTorchJob")
	d := &decision{Report: verdict.Report{Verdict: verdict.VerdictPass}, DecidedAt: time.Now(), DecidedBy: "r"}
	rec := c.newRecord(k, job, d)
	require.Equal(t, "rankgate-system", rec.Namespace)
	require.Equal(t, RecordNamePrefix+string(job.UID), rec.Name)
	require.Empty(t, rec.OwnerReferences, "no owner reference across namespaces")
	got, ok := c.recordTarget(rec)
	require.True(t, ok)
	require.Equal(t, target{kind: "PyTorchJob", ns: "ml", name: "pt", uid: job.UID}, got)

	for name, mutate := range map[string]func(l *coordv1.Lease){
		"in the job's namespace": func(l *coordv1.Lease) { l.Namespace = "ml" },
		"without managed-by":     func(l *coordv1.Lease) { delete(l.Labels, LabelManagedBy) },
		"without record label":   func(l *coordv1.Lease) { delete(l.Labels, LabelRecord) },
		"unknown kind":           func(l *coordv1.Lease) { l.Labels[LabelJobKind] = "Deployment" },
		"no job namespace":       func(l *coordv1.Lease) { delete(l.Labels, LabelJobNamespace) },
		"no job name":            func(l *coordv1.Lease) { delete(l.Annotations, KeyJobName) },
		"other name":             func(l *coordv1.Lease) { l.Name = "rankgate-controller" },
	} {
		l := rec.DeepCopy()
		mutate(l)
		_, ok := c.recordTarget(l)
		require.False(t, ok, name)
	}

	// A name too long for a label value stays in the annotation.
	job.Name = strings.Repeat("x", 80)
	rec = c.newRecord(k, job, d)
	require.NotContains(t, rec.Labels, KeyJobName)
	got, ok = c.recordTarget(rec)
	require.True(t, ok)
	require.Equal(t, job.Name, got.name)
}

// The first pod to report a rank holds it: another pod's report for the
// same rank is not added and names the holder; once released (the holder
// is gone) the other pod takes the rank.
func TestGangRankHeldByFirstPod(t *testing.T) {
	g := newGang(wrap(ptJob(false, 2)), time.Minute)
	pass := verdict.Report{Verdict: verdict.VerdictPass}
	fail := verdict.Report{Verdict: verdict.VerdictFail, Findings: []verdict.Finding{{Rule: "X", Severity: verdict.SeverityFail}}}
	isNew, decide, _, h := g.add(preflight.RankReport{Rank: 0, Pod: "a", Report: pass}, "uid-a", time.Now())
	require.True(t, isNew)
	require.False(t, decide)
	require.Nil(t, h)
	_, decide, _, h = g.add(preflight.RankReport{Rank: 0, Pod: "evil", Report: fail}, "uid-evil", time.Now())
	require.False(t, decide, "a second pod's failing report decided the gang")
	require.Equal(t, &holder{pod: "a", uid: "uid-a"}, h)
	require.Equal(t, pass, g.reports[0].Report)
	// The holder re-sends: fine.
	_, _, _, h = g.add(preflight.RankReport{Rank: 0, Pod: "a", Report: pass}, "uid-a", time.Now())
	require.Nil(t, h)
	require.False(t, g.release(0, "uid-other"))
	require.True(t, g.release(0, "uid-a"))
	isNew, _, _, h = g.add(preflight.RankReport{Rank: 0, Pod: "a2", Report: pass}, "uid-a2", time.Now())
	require.Nil(t, h)
	require.True(t, isNew)
}
