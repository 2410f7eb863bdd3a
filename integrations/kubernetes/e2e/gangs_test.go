package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// jobKind is the kind of a typed job.
func jobKind(t testing.TB, o client.Object) string {
	t.Helper()
	gvk, err := k8s.GroupVersionKindFor(o)
	require.NoError(t, err, "unknown job kind %T", o)
	return gvk.Kind
}

// gangOf reads the Gang of the job's current attempt (nil when there is
// none).
func gangOf(t testing.TB, job client.Object) *v1alpha1.Gang {
	t.Helper()
	fresh := job.DeepCopyObject().(client.Object)
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(job), fresh))
	attempt := int32(1)
	if s := fresh.GetAnnotations()[contract.AnnotationAttempt]; s != "" {
		var n int
		_, err := fmt.Sscan(s, &n)
		require.NoError(t, err)
		attempt = int32(n)
	}
	g := &v1alpha1.Gang{}
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: job.GetNamespace(), Name: v1alpha1.GangName(jobKind(t, job), job.GetName(), attempt)}, g)
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(t, err)
	return g
}

// firstReportAt is the first report the job's Gang records ("" when none).
func firstReportAt(t testing.TB, job client.Object) string {
	t.Helper()
	g := gangOf(t, job)
	if g == nil || g.Status.FirstReportAt == nil {
		return ""
	}
	return g.Status.FirstReportAt.UTC().Format(time.RFC3339)
}

// recordGang writes, as an earlier leader would have, the Gang of job's
// attempt 1 with rep recorded as its verdict (decided, not applied), in
// namespace ns. owned: the job is its controller owner.
func recordGang(t testing.TB, job client.Object, ns string, uid string, owned bool, rep verdict.Report, action, by string, at time.Time) *v1alpha1.Gang {
	t.Helper()
	kind := jobKind(t, job)
	apiVersion := "kubeflow.org/v1"
	if kind == "MPIJob" {
		apiVersion = "kubeflow.org/v2beta1"
	}
	rb, err := json.Marshal(rep)
	require.NoError(t, err)
	g := &v1alpha1.Gang{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.GangName(kind, job.GetName(), 1), Namespace: ns},
		Spec: v1alpha1.GangSpec{Job: v1alpha1.JobReference{APIVersion: apiVersion, Kind: kind, Name: job.GetName(), UID: types.UID(uid)},
			Attempt: 1, ExpectedRanks: 2},
	}
	if owned {
		g.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: job.GetName(), UID: types.UID(uid), Controller: ptr.To(true)}}
	}
	ensureNamespace(t, ns)
	require.NoError(t, k8s.Create(context.Background(), g))
	phase := v1alpha1.PhasePassed
	if rep.Failed() {
		phase = v1alpha1.PhaseFailed
	}
	g.Status = v1alpha1.GangStatus{Phase: phase, Progress: "1/2", Verdict: string(rep.Verdict), Rules: rep.RuleIDs(), Reason: rep.Reason(200),
		Message: rep.Reason(0), Report: string(rb), Action: action, DecidedAt: &metav1.Time{Time: at}, DecidedBy: by,
		Conditions: []metav1.Condition{{Type: contract.ConditionDecided, Status: metav1.ConditionTrue, Reason: string(phase), Message: "recorded",
			LastTransitionTime: metav1.Now()}}}
	require.NoError(t, k8s.Status().Update(context.Background(), g))
	return g
}

// gangTable lists Gangs in all namespaces as kubectl get gangs -A asks for
// them (a Table), and returns the rows of namespace ns by column name.
func gangTable(t testing.TB, ns string) (columns []string, rows []map[string]string) {
	t.Helper()
	hc, err := rest.HTTPClientFor(restCfg)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(restCfg.Host, "/")+"/apis/rankgate.io/v1alpha1/gangs?limit=500", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")
	res, err := hc.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	var tab struct {
		Kind              string `json:"kind"`
		ColumnDefinitions []struct {
			Name string `json:"name"`
		} `json:"columnDefinitions"`
		Rows []struct {
			Cells  []any `json:"cells"`
			Object struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			} `json:"object"`
		} `json:"rows"`
	}
	require.NoError(t, json.Unmarshal(body, &tab), string(body))
	require.Equal(t, "Table", tab.Kind)
	for _, c := range tab.ColumnDefinitions {
		columns = append(columns, c.Name)
	}
	for _, r := range tab.Rows {
		if r.Object.Metadata.Namespace != ns {
			continue
		}
		row := map[string]string{}
		for i, c := range r.Cells {
			row[columns[i]] = fmt.Sprint(c)
		}
		rows = append(rows, row)
	}
	return columns, rows
}

// rowOf is the table row of job name (nil when none).
func rowOf(rows []map[string]string, job string) map[string]string {
	for _, r := range rows {
		if r["Job"] == job {
			return r
		}
	}
	return nil
}

// `kubectl get gangs -A` (a Table from the API server, with the CRD's
// printer columns) shows gated jobs: one waiting at 0/8 before any rank
// reports, one at 3/8 while its ranks report, then passed at 8/8 with its
// verdict and reason.
func TestE2EGangsTable(t *testing.T) {
	ns := newNamespace(t, "e2e-gangs-table", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute})
	idle := pytorchJob(t, ns, "idle", false, 8, nil)
	job := pytorchJob(t, ns, "train", false, 8, nil)
	var pods []*corev1.Pod
	for i := 0; i < 8; i++ {
		pods = append(pods, rankPod(t, job, "worker", i, fmt.Sprintf("node-%d", i), ""))
	}
	var ranks []*rank
	for _, p := range pods[:3] {
		ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), fullGPURank...))
	}
	var cols []string
	var row, idleRow map[string]string
	require.Eventually(t, func() bool {
		var rows []map[string]string
		cols, rows = gangTable(t, ns)
		row, idleRow = rowOf(rows, job.Name), rowOf(rows, idle.Name)
		return row != nil && idleRow != nil && row["Ranks"] == "3/8" && idleRow["Ranks"] == "0/8"
	}, 30*time.Second, 100*time.Millisecond, "table rows: %v %v", row, idleRow)
	require.Equal(t, []string{"Name", "Job", "Kind", "Attempt", "Phase", "Ranks", "Verdict", "Reason", "Deadline", "Decided-By", "Age"}, cols)
	require.Equal(t, "WaitingForRanks", row["Phase"])
	require.Equal(t, "waiting for 5 more of 8 ranks", row["Reason"])
	require.Equal(t, "<nil>", row["Verdict"], "no verdict yet")
	require.Equal(t, "WaitingForRanks", idleRow["Phase"])
	require.Equal(t, v1alpha1.GangName("PyTorchJob", job.Name, 1), row["Name"])

	g := gangOf(t, job)
	require.Len(t, g.Status.Ranks, 3)
	for _, r := range g.Status.Ranks {
		require.Equal(t, "pass", r.Verdict)
		require.Equal(t, fmt.Sprintf("node-%d", r.Rank), r.Node)
		require.Equal(t, pods[r.Rank].Name, r.Pod)
		require.Len(t, r.Devices, 4)
	}
	require.NotNil(t, g.Status.Deadline)
	require.NotNil(t, g.Status.FirstReportAt)
	require.Equal(t, g.Status.FirstReportAt.Add(time.Minute).Unix(), g.Status.Deadline.Unix())

	for _, p := range pods[3:] {
		ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), fullGPURank...))
	}
	for _, r := range ranks {
		require.Equal(t, 0, r.wait(t, time.Minute), joinRanks(ranks))
	}
	appliedVerdict(t, job)
	_, rows := gangTable(t, ns)
	row = rowOf(rows, job.Name)
	require.NotNil(t, row)
	require.Equal(t, "Passed", row["Phase"])
	require.Equal(t, "8/8", row["Ranks"])
	require.Equal(t, "pass", row["Verdict"])
	require.Equal(t, "all ranks passed", row["Reason"])
	g = gangOf(t, job)
	require.Equal(t, "replica-"+t.Name(), g.Status.DecidedBy)
	require.Len(t, g.Status.Ranks, 8)
	require.True(t, meta.IsStatusConditionTrue(g.Status.Conditions, contract.ConditionDecided))
	require.True(t, meta.IsStatusConditionTrue(g.Status.Conditions, contract.ConditionApplied))
	require.Len(t, g.OwnerReferences, 1)
	require.Equal(t, job.UID, g.OwnerReferences[0].UID)
	require.NotContains(t, c.logs.String(), "retrying", "a write failed")

	// rankgate status reads the Gangs the controller wrote.
	kc := kubeconfigFile(t)
	status := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(binary, append([]string{"status", "--kubeconfig", kc}, args...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		t.Logf("$ rankgate status %s\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	table := status("-n", ns)
	require.Regexp(t, `(?m)^pytorchjob/train +Passed +8/8 +pass +all ranks passed`, table)
	require.Regexp(t, `(?m)^pytorchjob/idle +WaitingForRanks +0/8 `, table)
	detail := status("pytorchjob/train", "-n", ns)
	for i := range pods {
		require.Regexp(t, fmt.Sprintf(`(?m)^ *%d +%s +node-%d +pass`, i, regexp.QuoteMeta(pods[i].Name), i), detail)
	}
	var list struct {
		Kind  string          `json:"kind"`
		Items []v1alpha1.Gang `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(status("train", "-n", ns, "-o", "json")), &list))
	require.Equal(t, "List", list.Kind)
	require.Len(t, list.Items, 1)
	require.Equal(t, "pass", list.Items[0].Status.Verdict)
}

// countingTransport counts the API requests that match.
type countingTransport struct {
	next  http.RoundTripper
	match func(*http.Request) bool
	n     atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.match(r) {
		c.n.Add(1)
	}
	return c.next.RoundTrip(r)
}

// A burst of reports does not multiply Gang writes: 40 ranks of one job
// report within a moment (and re-send, as waiting ranks do), and the
// controller writes the Gang's status a few times, not once per report.
func TestE2EGangProgressWritesBatched(t *testing.T) {
	ns := newNamespace(t, "e2e-gangs-batched", true)
	const ranks = 41
	job := pytorchJob(t, ns, "burst", false, ranks, nil)
	name := v1alpha1.GangName("PyTorchJob", job.Name, 1)
	counter := &countingTransport{match: func(r *http.Request) bool {
		return r.Method != http.MethodGet && strings.Contains(r.URL.Path, "/namespaces/"+ns+"/gangs")
	}}
	cfg := rest.CopyConfig(restCfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	c := startController(t, controller.Options{Config: cfg, GangTimeout: time.Minute})
	require.Eventually(t, func() bool { return gangOf(t, job) != nil }, 20*time.Second, 50*time.Millisecond, "no Gang for the job")

	var clients []*gate.Client
	var pods []*corev1.Pod
	for i := 0; i < ranks-1; i++ {
		p := rankPod(t, job, "worker", i, fmt.Sprintf("node-%d", i), "")
		gc, err := gate.NewClient(gate.ClientOptions{URL: c.URL, CAFile: certs.CAFile, TokenFile: token(t, p, gate.Audience)})
		require.NoError(t, err)
		clients, pods = append(clients, gc), append(pods, p)
	}
	before := counter.n.Load()
	reports := atomic.Int64{}
	var wg sync.WaitGroup
	for round := 0; round < 3; round++ {
		for i := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := &gate.ReportRequest{APIVersion: gate.APIVersion, Namespace: ns, Pod: pods[i].Name, Report: verdict.NewReport("node", nil)}
				resp, err := clients[i].Report(context.Background(), req, 0)
				if err == nil && resp.State == gate.StateWaiting {
					reports.Add(1)
				}
			}()
		}
		wg.Wait()
	}
	require.EqualValues(t, 3*(ranks-1), reports.Load())
	g := &v1alpha1.Gang{}
	require.Eventually(t, func() bool {
		require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, g))
		return g.Status.Progress == fmt.Sprintf("%d/%d", ranks-1, ranks)
	}, 10*time.Second, 50*time.Millisecond, "progress %q", g.Status.Progress)
	time.Sleep(2 * time.Second) // any write still to come
	writes := counter.n.Load() - before
	t.Logf("%d reports, %d Gang writes", reports.Load(), writes)
	require.GreaterOrEqual(t, writes, int64(1))
	require.LessOrEqual(t, writes, int64(6), "Gang writes for %d reports", reports.Load())
	require.Len(t, g.Status.Ranks, ranks-1)
}

// Two replicas that both believe they lead (a deposed leader still
// finishing) race to record different verdicts for one gang: one gets
// both ranks' passing reports, the other a failing report of rank 0. One
// verdict stands: every rank on either replica hears the same one, and it
// is the one the Gang records and the job carries.
func TestE2EGangRaceOneVerdictStands(t *testing.T) {
	ns := newNamespace(t, "e2e-gangs-race", true)
	a := startController(t, controller.Options{GangTimeout: time.Minute, Identity: "replica-a"})
	b := startController(t, controller.Options{GangTimeout: time.Minute, Identity: "replica-b"})
	fail := verdict.NewReport("node", []verdict.Finding{{Rule: verdict.RuleDriverKnownBad, Severity: verdict.SeverityFail, Message: "bad driver"}})
	pass := verdict.NewReport("node", nil)
	seen := map[verdict.Verdict]int{}
	// Both replicas serving (their sweeps done) before the race starts.
	warm := pytorchJob(t, ns, "warm", false, 2, nil)
	wp := rankPod(t, warm, "worker", 0, "node-0", "")
	for _, url := range []string{a.URL, b.URL} {
		gc, err := gate.NewClient(gate.ClientOptions{URL: url, CAFile: certs.CAFile, TokenFile: token(t, wp, gate.Audience)})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			_, err := gc.Verdict(context.Background(), ns, wp.Name, 0)
			return err == nil
		}, 20*time.Second, 50*time.Millisecond)
	}
	for round := 0; round < 4; round++ {
		job := pytorchJob(t, ns, fmt.Sprintf("race-%d", round), false, 2, nil)
		var reqs []*gate.ReportRequest
		var toks []string
		for i := 0; i < 2; i++ {
			p := rankPod(t, job, "worker", i, fmt.Sprintf("node-%d", i), "")
			toks = append(toks, token(t, p, gate.Audience))
			reqs = append(reqs, &gate.ReportRequest{APIVersion: gate.APIVersion, Namespace: ns, Pod: p.Name, Report: pass})
		}
		failing := *reqs[0]
		failing.Report = fail
		type call struct {
			url string
			tok string
			req *gate.ReportRequest
		}
		calls := []call{{a.URL, toks[0], reqs[0]}, {a.URL, toks[1], reqs[1]}, {b.URL, toks[0], &failing}}
		got := make([]*gate.Response, len(calls))
		var wg sync.WaitGroup
		for i, cl := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if (round%2 == 0) == (cl.url == b.URL) {
					time.Sleep(20 * time.Millisecond) // each replica ahead in turn
				}
				gc, err := gate.NewClient(gate.ClientOptions{URL: cl.url, CAFile: certs.CAFile, TokenFile: cl.tok})
				if err != nil {
					return
				}
				// Until both replicas have loaded the recorded verdicts.
				for try := 0; try < 100 && got[i] == nil; try++ {
					if got[i], err = gc.Report(context.Background(), cl.req, 20*time.Second); err != nil {
						time.Sleep(100 * time.Millisecond)
					}
				}
			}()
		}
		wg.Wait()
		var v verdict.Verdict
		for i, r := range got {
			require.NotNil(t, r, "call %d got no answer", i)
			require.Equal(t, gate.StateDecided, r.State, "call %d", i)
			if i == 0 {
				v = r.Verdict.Verdict
			}
			require.Equal(t, v, r.Verdict.Verdict, "replicas answered different verdicts")
		}
		seen[v]++
		ann := appliedVerdict(t, job)
		require.Equal(t, string(v), ann[contract.AnnotationVerdict])
		g := gangOf(t, job)
		require.Equal(t, string(v), g.Status.Verdict)
		require.Equal(t, ann[contract.AnnotationDecidedBy], g.Status.DecidedBy)
	}
	t.Logf("verdicts that stood: %v; decisions: a %d, b %d", seen, a.Decisions(), b.Decisions())
	require.EqualValues(t, 4, a.Decisions()+b.Decisions(), "a verdict recorded twice, or none")
}

// Each gated attempt has its own Gang. A job the gate suspended is resumed
// by a person: the controller counts attempt 2 (rankgate.io/attempt) in the
// patch that clears the verdict, and the new gang is decided in a new
// Gang; attempt 1's stays, failed. A job whose verdict a person removed
// (after on-fail annotate) is gated again as a new attempt.
func TestE2EGangAttempts(t *testing.T) {
	ns := newNamespace(t, "e2e-gangs-attempts", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute})
	report := func(job client.Object, rep verdict.Report) []*gate.Response {
		var out []*gate.Response
		for i := 0; i < 2; i++ {
			p := &corev1.Pod{}
			require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("%s-worker-%d", job.GetName(), i)}, p))
			gc, err := gate.NewClient(gate.ClientOptions{URL: c.URL, CAFile: certs.CAFile, TokenFile: token(t, p, gate.Audience)})
			require.NoError(t, err)
			var resp *gate.Response
			require.Eventually(t, func() bool {
				resp, err = gc.Report(context.Background(), &gate.ReportRequest{APIVersion: gate.APIVersion, Namespace: ns, Pod: p.Name, Report: rep}, 0)
				return err == nil
			}, 20*time.Second, 100*time.Millisecond)
			out = append(out, resp)
		}
		return out
	}
	bad := verdict.NewReport("node", []verdict.Finding{{Rule: verdict.RuleDriverKnownBad, Severity: verdict.SeverityFail, Message: "bad driver"}})
	good := verdict.NewReport("node", nil)

	job := pytorchJob(t, ns, "resumed", false, 2, nil)
	for i := 0; i < 2; i++ {
		rankPod(t, job, "worker", i, fmt.Sprintf("node-%d", i), "")
	}
	report(job, bad)
	require.Equal(t, "fail", appliedVerdict(t, job)[contract.AnnotationVerdict])
	require.Eventually(t, func() bool { return suspended(t, job) }, 10*time.Second, 50*time.Millisecond)
	first := gangOf(t, job)
	require.Equal(t, v1alpha1.PhaseFailed, first.Status.Phase)

	patch := []byte(`{"spec":{"runPolicy":{"suspend":false}}}`)
	require.NoError(t, k8s.Patch(context.Background(), job.DeepCopy(), client.RawPatch(types.MergePatchType, patch)))
	require.Eventually(t, func() bool {
		a := jobAnnotations(t, job)
		return a[contract.AnnotationAttempt] == "2" && a[contract.AnnotationVerdict] == ""
	}, 20*time.Second, 50*time.Millisecond, "not re-gated: %v", jobAnnotations(t, job))
	require.Contains(t, jobAnnotations(t, job)[contract.AnnotationPreviousVerdict], "fail ")
	var resp []*gate.Response
	require.Eventually(t, func() bool {
		resp = report(job, good)
		return resp[1].State == gate.StateDecided
	}, 20*time.Second, 200*time.Millisecond)
	require.Equal(t, verdict.VerdictPass, resp[1].Verdict.Verdict)
	require.Equal(t, "pass", appliedVerdict(t, job)[contract.AnnotationVerdict])
	second := gangOf(t, job)
	require.Equal(t, v1alpha1.GangName("PyTorchJob", job.Name, 2), second.Name)
	require.EqualValues(t, 2, second.Spec.Attempt)
	require.Equal(t, v1alpha1.PhasePassed, second.Status.Phase)
	kept := &v1alpha1.Gang{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(first), kept))
	require.Equal(t, v1alpha1.PhaseFailed, kept.Status.Phase, "attempt 1's Gang changed")

	// on-fail annotate: a person removes the verdict to gate again.
	ann := pytorchJob(t, ns, "annotated", false, 2, map[string]string{contract.AnnotationOnFail: controller.ActionAnnotate})
	for i := 0; i < 2; i++ {
		rankPod(t, ann, "worker", i, fmt.Sprintf("node-%d", i), "")
	}
	report(ann, bad)
	require.Equal(t, "fail", appliedVerdict(t, ann)[contract.AnnotationVerdict])
	clear := []byte(`{"metadata":{"annotations":{"rankgate.io/verdict":null}}}`)
	require.NoError(t, k8s.Patch(context.Background(), ann.DeepCopy(), client.RawPatch(types.MergePatchType, clear)))
	require.Eventually(t, func() bool {
		resp = report(ann, good)
		return resp[1].State == gate.StateDecided
	}, 20*time.Second, 200*time.Millisecond)
	require.Equal(t, verdict.VerdictPass, resp[1].Verdict.Verdict, "the removed verdict was adopted again")
	require.Equal(t, "pass", appliedVerdict(t, ann)[contract.AnnotationVerdict])
	require.Equal(t, "2", jobAnnotations(t, ann)[contract.AnnotationAttempt])
	require.Equal(t, v1alpha1.PhasePassed, gangOf(t, ann).Status.Phase)
}

// The Gang's Applied condition is written AppliedDelay after the job
// carries the verdict (out of a burst of completing gangs): Decided at
// once, Applied later.
func TestE2EGangAppliedLater(t *testing.T) {
	ns := newNamespace(t, "e2e-gang-applied-later", true)
	const delay = 1500 * time.Millisecond
	c := startController(t, controller.Options{GangTimeout: time.Minute, AppliedDelay: ptr.To(delay)})
	job := pytorchJob(t, ns, "train", false, 1, nil)
	p := rankPod(t, job, "worker", 0, "node-0", "")
	r := startRank(t, c.URL, p, token(t, p, gate.Audience), fullGPURank...)
	require.Equal(t, 0, r.wait(t, time.Minute), r.String())
	require.Eventually(t, func() bool { return jobAnnotations(t, job)[contract.AnnotationVerdict] == "pass" },
		10*time.Second, 20*time.Millisecond, "the verdict was not applied to the job")
	onJob := time.Now()
	g := gangOf(t, job)
	require.True(t, meta.IsStatusConditionTrue(g.Status.Conditions, contract.ConditionDecided))
	require.False(t, meta.IsStatusConditionTrue(g.Status.Conditions, contract.ConditionApplied), "Applied written before its delay")
	require.Eventually(t, func() bool {
		return meta.IsStatusConditionTrue(gangOf(t, job).Status.Conditions, contract.ConditionApplied)
	}, 10*time.Second, 50*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(onJob), delay/2, "Applied came too soon")
}
