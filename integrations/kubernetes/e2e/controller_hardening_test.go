package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// asUser is a client that acts as user name (impersonated), with only the
// permissions a test grants that user.
func asUser(t testing.TB, name string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(restCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: name, Groups: []string{"system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)
	return c
}

// grant gives user the verbs on resources (core or coordination.k8s.io)
// in namespace ns only.
func grant(t testing.TB, ns, user, group string, resources []string, verbs ...string) {
	t.Helper()
	name := "e2e-" + user + "-" + resources[0]
	objs := []client.Object{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{group}, Resources: resources, Verbs: verbs}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}},
	}
	for _, o := range objs {
		require.NoError(t, k8s.Create(context.Background(), o))
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	}
}

// readyz answers a replica's /readyz status code (0 when unreachable).
func readyz(addr string) int {
	r, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	r.Body.Close()
	return r.StatusCode
}

// leReplica starts a replica with leader election on the Lease id (short
// timings) and its probes on health.
func leReplica(t *testing.T, id, identity, health string) *ctrl {
	t.Helper()
	return startController(t, controller.Options{GangTimeout: time.Minute, LeaderElection: true, LeaderElectionID: id,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond,
		Identity: identity, HealthAddr: health})
}

// A standby is Ready once its caches are synced: a rolling update of two
// replicas goes through. The leader goes (the old pod is deleted), the
// standby takes over and decides a gang whose ranks reach the replicas
// through a Service (NotLeader from the new standby, then a new
// connection), and the new replica is Ready while it stands by.
func TestE2EStandbyReadyRollout(t *testing.T) {
	ns := newNamespace(t, "e2e-rollout", true)
	const id = "rankgate-e2e-rollout"
	healthA, healthB, healthC := freePort(t), freePort(t), freePort(t)
	a := leReplica(t, id, "replica-a", healthA)
	require.Eventually(t, a.IsLeader, 20*time.Second, 50*time.Millisecond)
	b := leReplica(t, id, "replica-b", healthB)
	require.Eventually(t, func() bool { return readyz(healthA) == 200 && readyz(healthB) == 200 }, 20*time.Second, 50*time.Millisecond,
		"readyz: leader %d, standby %d (want both 200)", readyz(healthA), readyz(healthB))
	require.False(t, b.IsLeader(), "the standby became leader; the test proves nothing")

	// Rollout: the new replica C comes up (Ready while standing by), then
	// the old leader goes and B takes over.
	c := leReplica(t, id, "replica-c", healthC)
	require.Eventually(t, func() bool { return readyz(healthC) == 200 }, 20*time.Second, 50*time.Millisecond, "new replica not Ready while standby")
	require.False(t, c.IsLeader())
	a.Stop(t)
	require.Eventually(t, func() bool { return b.IsLeader() || c.IsLeader() }, 20*time.Second, 50*time.Millisecond)
	leader, standby, leaderID, standbyHealth := b, c, "replica-b", healthC
	if c.IsLeader() {
		leader, standby, leaderID, standbyHealth = c, b, "replica-c", healthB
	}
	require.Equal(t, 200, readyz(standbyHealth), "the remaining standby is not Ready")

	svc := "https://" + roundRobinProxy(t, standby.Addr, leader.Addr)
	job := pytorchJob(t, ns, "roll", false, 4, nil)
	var ranks []*rank
	for i := 0; i < 4; i++ {
		p := rankPod(t, job, "worker", i, fmt.Sprintf("node-%d", i), "")
		ranks = append(ranks, startRank(t, svc, p, token(t, p, gate.Audience), fullGPURank...))
	}
	for _, r := range ranks {
		require.Equal(t, 0, r.wait(t, 30*time.Second), joinRanks(ranks))
	}
	require.Contains(t, standby.logs.String(), gate.CodeNotLeader, "no rank reached the standby; the test proves nothing")
	require.EqualValues(t, 1, leader.Decisions())
	require.EqualValues(t, 0, standby.Decisions())
	require.Equal(t, leaderID, appliedVerdict(t, job)[contract.AnnotationDecidedBy])
	require.Equal(t, 200, readyz(standbyHealth))
}

// forgedVerdict is the annotations of a fail verdict nobody decided.
func forgedVerdict(action string) map[string]string {
	rep := verdict.NewReport("forged", []verdict.Finding{{Rule: verdict.RuleGangMIGSpansGPUs, Severity: verdict.SeverityFail, Message: "forged"}})
	b, _ := json.Marshal(rep)
	return map[string]string{contract.AnnotationVerdict: "fail", contract.AnnotationRules: verdict.RuleGangMIGSpansGPUs, contract.AnnotationReason: "forged",
		contract.AnnotationDecidedAt: time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano), contract.AnnotationDecidedBy: "replica-forged",
		contract.AnnotationReport: string(b), contract.AnnotationAction: action}
}

// jobState reads whether the job exists, is being deleted, is suspended.
func jobState(t *testing.T, job *kubeflowv1.PyTorchJob) (exists, deleting, suspended bool) {
	t.Helper()
	fresh := &kubeflowv1.PyTorchJob{}
	err := k8s.Get(context.Background(), client.ObjectKeyFromObject(job), fresh)
	if apierrors.IsNotFound(err) {
		return false, false, false
	}
	require.NoError(t, err)
	return fresh.UID == job.UID, fresh.DeletionTimestamp != nil, ptr.Deref(fresh.Spec.RunPolicy.Suspend, false)
}

// Gangs that hold a recorded, unapplied fail verdict but do not belong to
// the job they name are never acted on: one naming an opted-in job with
// another UID (a job of that name deleted earlier, or forged), one in
// another namespace naming a job by its name and UID, one without the
// job's owner reference, one for a job that is not opted in (delete), one
// for a job that is gone. The healthy gang passes (the Gang in its way is
// replaced), nothing is suspended or deleted.
func TestE2EForgedGangIgnored(t *testing.T) {
	ns := newNamespace(t, "e2e-forged-gang", true)
	other := newNamespace(t, "e2e-forged-gang-off", false)
	elsewhere := newNamespace(t, "e2e-forged-gang-elsewhere", true)
	fail := verdict.NewReport("forged", []verdict.Finding{{Rule: verdict.RuleGangMIGSpansGPUs, Severity: verdict.SeverityFail, Message: "forged"}})
	at := time.Now().Add(-time.Second)

	job := pytorchJob(t, ns, "healthy", false, 2, nil)
	unowned := pytorchJob(t, ns, "unowned", false, 1, nil)
	off := pytorchJob(t, other, "bystander", false, 1, nil)
	gone := &kubeflowv1.PyTorchJob{ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: ns, UID: types.UID("0c1d2e3f-0000-4000-8000-000000000000")}}
	wrongUID := recordGang(t, job, ns, "0c1d2e3f-1111-4000-8000-000000000000", true, fail, controller.ActionSuspend, "replica-forged", at)
	recordGang(t, job, elsewhere, string(job.UID), true, fail, controller.ActionSuspend, "replica-forged", at)
	recordGang(t, unowned, ns, string(unowned.UID), false, fail, controller.ActionSuspend, "replica-forged", at)
	recordGang(t, off, other, string(off.UID), true, fail, controller.ActionDelete, "replica-forged", at)
	recordGang(t, gone, ns, string(gone.UID), true, fail, controller.ActionDelete, "replica-forged", at)

	c := startController(t, controller.Options{GangTimeout: time.Minute})
	var ranks []*rank
	for i := 0; i < 2; i++ {
		p := rankPod(t, job, "worker", i, fmt.Sprintf("node-%d", i), "")
		ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), fullGPURank...))
	}
	for _, r := range ranks {
		require.Equal(t, 0, r.wait(t, time.Minute), joinRanks(ranks))
		require.Equal(t, verdict.VerdictPass, decodeVerdict(t, r).Verdict)
	}
	a := appliedVerdict(t, job)
	require.Equal(t, "pass", a[contract.AnnotationVerdict])
	require.Equal(t, "replica-"+t.Name(), a[contract.AnnotationDecidedBy])
	require.EqualValues(t, 1, c.Decisions())
	g := gangOf(t, job)
	require.NotEqual(t, wrongUID.UID, g.UID, "the Gang of another job was kept")
	require.Equal(t, job.UID, g.Spec.Job.UID)
	time.Sleep(time.Second) // what an apply would do happens within milliseconds
	for _, j := range []*kubeflowv1.PyTorchJob{job, unowned, off} {
		exists, deleting, suspended := jobState(t, j)
		require.True(t, exists && !deleting, "job %s deleted", j.Name)
		require.False(t, suspended, "job %s suspended", j.Name)
	}
	for _, j := range []*kubeflowv1.PyTorchJob{unowned, off} {
		require.Empty(t, jobAnnotations(t, j)[contract.AnnotationVerdict], j.Name)
		require.Empty(t, jobEvents(t, j), j.Name)
	}
	require.Contains(t, c.logs.String(), "ignoring a Gang its job does not own")
	require.Contains(t, c.logs.String(), "ignoring a recorded verdict")
}

// A user who may patch jobs writes a fail verdict with action delete onto
// an opted-in job and onto one that is not opted in: the controller never
// decided it, and deletes nothing.
func TestE2EForgedAnnotationNoDeletion(t *testing.T) {
	ns := newNamespace(t, "e2e-forged-annotation", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute, OnFail: controller.ActionDelete})
	in := pytorchJob(t, ns, "opted-in", false, 1, nil)
	out := pytorchJob(t, ns, "opted-out", false, 1, map[string]string{contract.KeyGate: "disabled"})
	rankPod(t, in, "worker", 0, "node-0", "")
	for _, j := range []*kubeflowv1.PyTorchJob{in, out} {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": forgedVerdict(controller.ActionDelete)}})
		require.NoError(t, err)
		require.NoError(t, k8s.Patch(context.Background(), j.DeepCopy(), client.RawPatch(types.MergePatchType, patch)))
	}
	require.Eventually(t, func() bool { return strings.Contains(c.logs.String(), "leading") }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(3 * time.Second) // a deletion takes milliseconds once reconciled
	for _, j := range []*kubeflowv1.PyTorchJob{in, out} {
		exists, deleting, _ := jobState(t, j)
		require.True(t, exists && !deleting, "job %s deleted on a forged annotation", j.Name)
	}
	require.EqualValues(t, 0, c.Decisions())
}

// A user who may only create pods adds a pod that claims rank 0 of someone
// else's job (the job's controller owner reference, its rank labels) and
// reports a MIG device, which would fail the gang on mixed kinds. Rank 0
// is held by the pod that reported it first and still runs: the impostor
// is refused (Forbidden, named), named in the log and in an Event on the
// job, and the gang passes.
func TestE2EImpostorPodRefused(t *testing.T) {
	ns := newNamespace(t, "e2e-impostor", true)
	grant(t, ns, "mallory", "", []string{"pods"}, "create")
	c := startController(t, controller.Options{GangTimeout: time.Minute})
	job := pytorchJob(t, ns, "victim", false, 2, nil)
	p0 := rankPod(t, job, "worker", 0, "node-0", "")
	p1 := rankPod(t, job, "worker", 1, "node-1", "")
	r0 := startRank(t, c.URL, p0, token(t, p0, gate.Audience), fullGPURank...)
	require.Eventually(t, func() bool { return strings.Contains(c.logs.String(), `"pod"="`+p0.Name+`"`) }, 20*time.Second, 20*time.Millisecond, "rank 0 did not report")

	evil := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "victim-impostor", Namespace: ns, Labels: p0.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{ServiceAccountName: serviceAccount, NodeName: "node-9", Containers: p0.Spec.Containers},
	}
	require.NoError(t, asUser(t, "mallory").Create(context.Background(), evil))
	ri := startRank(t, c.URL, evil, token(t, evil, gate.Audience), "--sample", "h100-mig", "--devices", "0:0")
	require.Equal(t, verdict.ExitEnvironment, ri.wait(t, 30*time.Second), ri.String())
	require.Contains(t, ri.termination(), gate.CodeForbidden, ri.String())
	require.Contains(t, ri.termination(), evil.Name, ri.String())
	require.Contains(t, ri.termination(), "held by pod "+p0.Name, ri.String())

	r1 := startRank(t, c.URL, p1, token(t, p1, gate.Audience), fullGPURank...)
	for _, r := range []*rank{r0, r1} {
		require.Equal(t, 0, r.wait(t, time.Minute), joinRanks([]*rank{r0, r1, ri}))
		require.Equal(t, verdict.VerdictPass, decodeVerdict(t, r).Verdict)
	}
	require.Equal(t, "pass", appliedVerdict(t, job)[contract.AnnotationVerdict])
	require.Contains(t, c.logs.String(), evil.Name)
	require.Eventually(t, func() bool {
		ev := jobEvents(t, job)["RankClaimedTwice"]
		return len(ev) == 1 && strings.Contains(ev[0], evil.Name) && strings.Contains(ev[0], p0.Name)
	}, 10*time.Second, 100*time.Millisecond, "no RankClaimedTwice event naming the impostor")
}

// rankgate.io/first-report-at written an hour in the past (by anyone who
// may patch the job) does not fail the gang at once: its deadline starts
// no earlier than its oldest rank pod, and a rank that reports a few
// seconds later completes a passing gang.
func TestE2EFirstReportInThePast(t *testing.T) {
	ns := newNamespace(t, "e2e-first-report", true)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	job := pytorchJob(t, ns, "slow", false, 2, map[string]string{contract.AnnotationFirstReport: past})
	p0 := rankPod(t, job, "worker", 0, "node-0", "")
	p1 := rankPod(t, job, "worker", 1, "node-1", "")
	created := time.Now()
	c := startController(t, controller.Options{GangTimeout: 20 * time.Second, ResendGrace: time.Second})
	r0 := startRank(t, c.URL, p0, token(t, p0, gate.Audience), fullGPURank...)
	time.Sleep(5 * time.Second) // well past the resend grace: an hour-old clock would have failed the gang
	require.True(t, r0.running(), "the gang was decided at once: %s", r0.String())
	require.Empty(t, jobAnnotations(t, job)[contract.AnnotationVerdict])

	r1 := startRank(t, c.URL, p1, token(t, p1, gate.Audience), fullGPURank...)
	for _, r := range []*rank{r0, r1} {
		require.Equal(t, 0, r.wait(t, time.Minute), joinRanks([]*rank{r0, r1}))
		require.Equal(t, verdict.VerdictPass, decodeVerdict(t, r).Verdict)
	}
	require.Less(t, time.Since(created), 20*time.Second, "passed only because the test ran past the deadline")
	require.Equal(t, "pass", appliedVerdict(t, job)[contract.AnnotationVerdict])
}
