package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	mpiv2beta1 "github.com/kubeflow/mpi-operator/pkg/apis/kubeflow/v2beta1"
	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller"
	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// A full-GPU rank: four NVLink-connected A100s of the embedded sample node,
// checked with --require-p2p.
var fullGPURank = []string{"--sample", "a100-full", "--devices", "0,1,2,3", "--require-p2p"}

func decodeVerdict(t *testing.T, r *rank) verdict.Report {
	t.Helper()
	var rep verdict.Report
	require.NoError(t, json.Unmarshal(r.stdout.Bytes(), &rep), r.String())
	return rep
}

// (a) A PyTorchJob of four ranks (Master + 3 Workers, one pod per node) on
// full GPUs with P2P passes; every rank exits 0 with the same verdict.
func TestE2EPassFullGPUs(t *testing.T) {
	ns := newNamespace(t, "e2e-pass", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute})
	job := pytorchJob(t, ns, "resnet", true, 3, nil)
	pods := []*corev1.Pod{rankPod(t, job, "master", 0, "node-1", "")}
	for i := 0; i < 3; i++ {
		pods = append(pods, rankPod(t, job, "worker", i, fmt.Sprintf("node-%d", i+2), ""))
	}
	var ranks []*rank
	for _, p := range pods {
		ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), fullGPURank...))
	}
	for _, r := range ranks {
		require.Equal(t, 0, r.wait(t, time.Minute), r.String())
		v := decodeVerdict(t, r)
		require.Equal(t, verdict.VerdictPass, v.Verdict, r.String())
		require.Contains(t, v.Subject, "4 of 4 ranks")
	}
	a := appliedVerdict(t, job)
	require.Equal(t, "pass", a[contract.AnnotationVerdict])
	require.NotEmpty(t, a[contract.AnnotationDecidedAt])
	require.Empty(t, a[contract.AnnotationAction])
	require.EqualValues(t, 1, c.Decisions())
	require.Eventually(t, func() bool { return len(jobEvents(t, job)["GangPassed"]) == 1 }, 10*time.Second, 100*time.Millisecond)

	fresh := &kubeflowv1.PyTorchJob{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(job), fresh))
	require.False(t, ptr.Deref(fresh.Spec.RunPolicy.Suspend, false))
}

// (b) An MPIJob whose two workers sit on MIG instances of different
// physical GPUs fails: both ranks exit 1 with the reason in their
// termination message, the job is suspended, annotated, and has an Event.
func TestE2EMIGSpansGPUs(t *testing.T) {
	ns := newNamespace(t, "e2e-mig", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute})
	job := mpiJob(t, ns, "bert", 2)
	p0 := rankPod(t, job, "worker", 0, "h100-node", "nvidia.com/mig-3g.40gb")
	p1 := rankPod(t, job, "worker", 1, "h100-node", "nvidia.com/mig-3g.40gb")
	r0 := startRank(t, c.URL, p0, token(t, p0, gate.Audience), "--sample", "h100-mig", "--devices", "0:0")
	r1 := startRank(t, c.URL, p1, token(t, p1, gate.Audience), "--sample", "h100-mig", "--devices", "1:0")
	for _, r := range []*rank{r0, r1} {
		require.Equal(t, verdict.ExitFail, r.wait(t, time.Minute), r.String())
		require.Contains(t, decodeVerdict(t, r).RuleIDs(), verdict.RuleGangMIGSpansGPUs)
		require.Contains(t, r.termination(), "GANG_MIG_SPANS_GPUS", r.String())
		require.Contains(t, r.termination(), "job action: suspend")
	}
	a := appliedVerdict(t, job)
	fresh := &mpiv2beta1.MPIJob{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(job), fresh))
	require.True(t, ptr.Deref(fresh.Spec.RunPolicy.Suspend, false), "job not suspended")
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	require.Equal(t, "suspend", a[contract.AnnotationAction])
	require.Contains(t, a[contract.AnnotationRules], "GANG_MIG_SPANS_GPUS")
	require.Contains(t, a[contract.AnnotationReason], "physical GPUs")
	var rep verdict.Report
	require.NoError(t, json.Unmarshal([]byte(a[contract.AnnotationReport]), &rep))
	require.Equal(t, verdict.VerdictFail, rep.Verdict)
	require.Eventually(t, func() bool {
		ev := jobEvents(t, job)["GangFailed"]
		return len(ev) == 1 && strings.Contains(ev[0], "GANG_MIG_SPANS_GPUS") && strings.Contains(ev[0], "job suspended")
	}, 10*time.Second, 100*time.Millisecond, "no GangFailed event")
	require.EqualValues(t, 1, c.Decisions())
}

// An MPIJob with runLauncherAsWorker, its pods as mpi-operator v0.8
// creates them: the launcher (owned by a batch Job the MPIJob owns) is
// rank 0, workers labelled 1..n are ranks 1..n. The gang passes.
func TestE2EMPIJobLauncherAsWorker(t *testing.T) {
	ns := newNamespace(t, "e2e-launcher", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute})
	job := mpiJobWith(t, ns, "t5", 2, true)
	pods := []*corev1.Pod{launcherPod(t, job, "node-0"), rankPod(t, job, "worker", 1, "node-1", ""), rankPod(t, job, "worker", 2, "node-2", "")}
	var ranks []*rank
	for _, p := range pods {
		ranks = append(ranks, startRank(t, c.URL, p, token(t, p, gate.Audience), fullGPURank...))
	}
	for _, r := range ranks {
		require.Equal(t, 0, r.wait(t, time.Minute), joinRanks(ranks))
		resp := decodeVerdict(t, r)
		require.Equal(t, verdict.VerdictPass, resp.Verdict, r.String())
		require.Contains(t, resp.Subject, "3 of 3 ranks")
	}
	require.Equal(t, "pass", appliedVerdict(t, job)[contract.AnnotationVerdict])
	require.EqualValues(t, 1, c.Decisions())
}

// (c) One rank never reports: at the gang deadline the job fails, naming
// the missing rank and what its pod is doing (the scheduler's message).
// A second job whose missing rank can never be placed fails at once.
func TestE2EGangDeadline(t *testing.T) {
	ns := newNamespace(t, "e2e-deadline", true)
	gpuNode(t, "gpu-node-busy", "nvidia.com/gpu", 8)
	c := startController(t, controller.Options{GangTimeout: 3 * time.Second, ResendGrace: time.Second})
	job := pytorchJob(t, ns, "gpt", true, 2, nil)
	p0 := rankPod(t, job, "master", 0, "node-1", "")
	p1 := rankPod(t, job, "worker", 0, "node-2", "")
	p2 := rankPod(t, job, "worker", 1, "", "")
	markUnschedulable(t, p2, "0/5 nodes are available: 5 Insufficient nvidia.com/gpu.")
	start := time.Now()
	r0 := startRank(t, c.URL, p0, token(t, p0, gate.Audience), fullGPURank...)
	r1 := startRank(t, c.URL, p1, token(t, p1, gate.Audience), fullGPURank...)
	for _, r := range []*rank{r0, r1} {
		require.Equal(t, verdict.ExitFail, r.wait(t, 30*time.Second), r.String())
		v := decodeVerdict(t, r)
		require.Equal(t, []string{verdict.RuleGangIncomplete}, v.RuleIDs(), r.String())
		f := v.Findings[0]
		require.Equal(t, []int{2}, f.Ranks)
		require.Equal(t, []string{p2.Name}, f.Pods)
		require.Contains(t, f.Message, "Insufficient nvidia.com/gpu")
		require.Contains(t, r.termination(), "missing ranks 2")
	}
	require.GreaterOrEqual(t, time.Since(start), 2500*time.Millisecond, "decided before the deadline")
	a := appliedVerdict(t, job)
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	require.Contains(t, a[contract.AnnotationReason], p2.Name)

	// A rank requesting a MIG profile no node advertises: fail at once,
	// long before the deadline.
	c.Stop(t)
	c = startController(t, controller.Options{GangTimeout: time.Hour})
	job2 := pytorchJob(t, ns, "llama", false, 2, nil)
	q0 := rankPod(t, job2, "worker", 0, "node-1", "")
	q1 := rankPod(t, job2, "worker", 1, "", "nvidia.com/mig-7g.80gb")
	r := startRank(t, c.URL, q0, token(t, q0, gate.Audience), fullGPURank...)
	require.Eventually(t, func() bool { return firstReportAt(t, job2) != "" }, 20*time.Second, 50*time.Millisecond)
	markUnschedulable(t, q1, "0/5 nodes are available: 5 Insufficient nvidia.com/mig-7g.80gb.")
	require.Equal(t, verdict.ExitFail, r.wait(t, 30*time.Second), r.String())
	v := decodeVerdict(t, r)
	require.Equal(t, []string{verdict.RuleGangRankUnplaceable}, v.RuleIDs(), r.String())
	// The reason is the schedule engine's (diagnose's): the shape no node
	// offers, and the shapes the cluster has.
	require.Contains(t, v.Findings[0].Message, "SHAPE_MISMATCH: Worker (1 pod) asks nvidia.com/mig-7g.80gb")
	require.Contains(t, v.Findings[0].Message, "no node offers it. The cluster has nvidia.com/gpu")
}

// (d) The controller restarts mid-gang: the waiting ranks re-send their
// reports to the new replica, the verdict is reached once, and a later
// replica serves the recorded verdict without deciding again.
func TestE2EControllerRestart(t *testing.T) {
	ns := newNamespace(t, "e2e-restart", true)
	addr := freePort(t)
	a := startController(t, controller.Options{GateAddr: addr, GangTimeout: time.Minute})
	job := pytorchJob(t, ns, "vit", true, 3, nil)
	var pods []*corev1.Pod
	var toks []string
	for i := 0; i < 4; i++ {
		typ, idx := "worker", i-1
		if i == 0 {
			typ, idx = "master", 0
		}
		p := rankPod(t, job, typ, idx, fmt.Sprintf("node-%d", i), "")
		pods = append(pods, p)
		toks = append(toks, token(t, p, gate.Audience))
	}
	url := "https://" + addr
	early := []*rank{startRank(t, url, pods[0], toks[0], fullGPURank...), startRank(t, url, pods[1], toks[1], fullGPURank...)}
	require.Eventually(t, func() bool { return firstReportAt(t, job) != "" }, 20*time.Second, 50*time.Millisecond)
	firstReport := firstReportAt(t, job)
	time.Sleep(300 * time.Millisecond) // both early ranks in their long poll
	a.Stop(t)
	require.EqualValues(t, 0, a.Decisions())

	b := startController(t, controller.Options{GateAddr: addr, GangTimeout: time.Minute})
	late := []*rank{startRank(t, url, pods[2], toks[2], fullGPURank...), startRank(t, url, pods[3], toks[3], fullGPURank...)}
	all := append(early, late...)
	for _, r := range all {
		require.Equal(t, 0, r.wait(t, time.Minute), joinRanks(all))
		require.Equal(t, verdict.VerdictPass, decodeVerdict(t, r).Verdict)
	}
	require.EqualValues(t, 1, b.Decisions())
	ann := appliedVerdict(t, job)
	require.Equal(t, "pass", ann[contract.AnnotationVerdict])
	require.Equal(t, firstReport, firstReportAt(t, job), "the deadline clock was restarted")
	g := gangOf(t, job)
	require.Equal(t, g.Status.FirstReportAt.Add(time.Minute).Unix(), g.Status.Deadline.Unix(), "the deadline clock was restarted")
	decidedAt := ann[contract.AnnotationDecidedAt]
	require.Eventually(t, func() bool { return len(jobEvents(t, job)["GangPassed"]) == 1 }, 10*time.Second, 100*time.Millisecond)
	b.Stop(t)

	// A third replica; rank 1's pod restarts its init container: it gets the
	// recorded verdict and nothing is decided again.
	c := startController(t, controller.Options{GateAddr: addr, GangTimeout: time.Minute})
	again := startRank(t, url, pods[1], toks[1], fullGPURank...)
	require.Equal(t, 0, again.wait(t, 30*time.Second), again.String())
	require.EqualValues(t, 0, c.Decisions())
	require.Equal(t, decidedAt, jobAnnotations(t, job)[contract.AnnotationDecidedAt])
	time.Sleep(500 * time.Millisecond)
	require.Len(t, jobEvents(t, job)["GangPassed"], 1)
}

// A leader that crashed after recording a verdict (in the job's Gang)
// but before applying it to the job: the next leader answers ranks from
// the Gang at once, applies it (annotations, suspend, Event) and marks
// the Gang Applied, deciding nothing itself.
func TestE2ERecordedVerdictFinishedByNextLeader(t *testing.T) {
	ns := newNamespace(t, "e2e-record", true)
	job := pytorchJob(t, ns, "llama", false, 2, nil)
	p0 := rankPod(t, job, "worker", 0, "node-0", "")
	rankPod(t, job, "worker", 1, "node-1", "") // never reports: the verdict is recorded
	rep := verdict.NewReport("e2e-record/PyTorchJob/llama: 2 of 2 ranks reported", []verdict.Finding{{
		Rule: verdict.RuleGangMIGSpansGPUs, Severity: verdict.SeverityFail, Message: "ranks 0 and 1 use MIG instances on 2 physical GPUs",
	}})
	require.Equal(t, verdict.VerdictFail, rep.Verdict)
	at := time.Now().Add(-time.Second).Truncate(time.Second)
	decidedAt := at.UTC().Format(time.RFC3339Nano)
	holder := "replica-crashed"
	recordGang(t, job, ns, string(job.UID), true, rep, controller.ActionSuspend, holder, at)

	c := startController(t, controller.Options{GangTimeout: time.Minute})
	r0 := startRank(t, c.URL, p0, token(t, p0, gate.Audience), fullGPURank...)
	require.Equal(t, verdict.ExitFail, r0.wait(t, 30*time.Second), r0.String())
	require.Contains(t, decodeVerdict(t, r0).RuleIDs(), verdict.RuleGangMIGSpansGPUs)

	a := appliedVerdict(t, job)
	require.Eventually(t, func() bool { return gaugeValue(t, "rankgate_verdicts_unapplied") == 0 }, 5*time.Second, 20*time.Millisecond)
	require.Equal(t, holder, a[contract.AnnotationDecidedBy])
	require.Equal(t, decidedAt, a[contract.AnnotationDecidedAt])
	require.Equal(t, controller.ActionSuspend, a[contract.AnnotationAction])
	fresh := &kubeflowv1.PyTorchJob{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(job), fresh))
	require.True(t, ptr.Deref(fresh.Spec.RunPolicy.Suspend, false), "job not suspended")
	require.Eventually(t, func() bool {
		ev := jobEvents(t, job)["GangFailed"]
		return len(ev) == 1 && strings.Contains(ev[0], "job suspended")
	}, 10*time.Second, 100*time.Millisecond, "no GangFailed event")
	require.EqualValues(t, 0, c.Decisions())
	require.Equal(t, holder, gangOf(t, job).Status.DecidedBy, "the recorded verdict was overwritten")
}

// (e) A rank presenting another pod's token is rejected; so are a token
// for another audience and a job that is not opted in.
func TestE2ERejectsForeignToken(t *testing.T) {
	ns := newNamespace(t, "e2e-token", true)
	c := startController(t, controller.Options{GangTimeout: time.Minute})
	job := pytorchJob(t, ns, "t5", false, 2, nil)
	p0 := rankPod(t, job, "worker", 0, "node-1", "")
	p1 := rankPod(t, job, "worker", 1, "node-2", "")

	r := startRank(t, c.URL, p0, token(t, p1, gate.Audience), fullGPURank...)
	require.Equal(t, verdict.ExitEnvironment, r.wait(t, 30*time.Second), r.String())
	require.Contains(t, r.termination(), gate.CodeForbidden)
	require.Contains(t, r.termination(), "may only report for itself")

	r = startRank(t, c.URL, p0, token(t, p0, "some-other-service"), fullGPURank...)
	require.Equal(t, verdict.ExitEnvironment, r.wait(t, 30*time.Second), r.String())
	require.Contains(t, r.termination(), gate.CodeUnauthenticated)

	// Nothing was recorded for the forged reports.
	require.Empty(t, jobAnnotations(t, job)[contract.AnnotationFirstReport])

	other := newNamespace(t, "e2e-not-opted-in", false)
	job2 := pytorchJob(t, other, "t5", false, 1, nil)
	q := rankPod(t, job2, "worker", 0, "node-1", "")
	r = startRank(t, c.URL, q, token(t, q, gate.Audience), fullGPURank...)
	require.Equal(t, verdict.ExitUsage, r.wait(t, 30*time.Second), r.String())
	require.Contains(t, r.termination(), gate.CodeNotOptedIn)
}

// (f) The controller is unreachable when the ranks start: they retry with
// backoff and pass once it is up.
func TestE2EControllerUnreachableAtFirst(t *testing.T) {
	ns := newNamespace(t, "e2e-unreachable", true)
	job := mpiJob(t, ns, "gpt2", 2)
	addr := freePort(t)
	url := "https://" + addr
	var ranks []*rank
	for i := 0; i < 2; i++ {
		p := rankPod(t, job, "worker", i, fmt.Sprintf("node-%d", i), "")
		ranks = append(ranks, startRank(t, url, p, token(t, p, gate.Audience), fullGPURank...))
	}
	require.Eventually(t, func() bool {
		return strings.Count(ranks[0].stderr.String(), "retrying") >= 2 && strings.Count(ranks[1].stderr.String(), "retrying") >= 2
	}, 20*time.Second, 50*time.Millisecond, "ranks did not retry")
	for _, r := range ranks {
		require.True(t, r.running(), r.String())
	}
	startController(t, controller.Options{GateAddr: addr, GangTimeout: time.Minute})
	for _, r := range ranks {
		require.Equal(t, 0, r.wait(t, time.Minute), r.String())
	}
	require.Equal(t, "pass", appliedVerdict(t, job)[contract.AnnotationVerdict])
}

// twoReplicas starts replica-a, waits until it leads, then replica-b, the
// standby (leader election on the Lease named id, with short timings).
func twoReplicas(t *testing.T, id string) (leader, standby *ctrl) {
	t.Helper()
	le := controller.Options{GangTimeout: time.Minute, LeaderElection: true, LeaderElectionID: id,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}
	a := le
	a.Identity = "replica-a"
	leader = startController(t, a)
	require.Eventually(t, leader.IsLeader, 20*time.Second, 50*time.Millisecond)
	b := le
	b.Identity = "replica-b"
	standby = startController(t, b)
	time.Sleep(time.Second)
	require.False(t, standby.IsLeader())
	return leader, standby
}

// Two replicas with leader election: the one that is not the leader
// answers NotLeader (ranks retry); when the leader goes away it takes over
// and decides.
func TestE2ELeaderElection(t *testing.T) {
	ns := newNamespace(t, "e2e-leader", true)
	leader, standby := twoReplicas(t, "rankgate-e2e-leader")

	job := pytorchJob(t, ns, "moe", false, 2, nil)
	p0 := rankPod(t, job, "worker", 0, "node-1", "")
	p1 := rankPod(t, job, "worker", 1, "node-2", "")
	r0 := startRank(t, standby.URL, p0, token(t, p0, gate.Audience), fullGPURank...)
	require.Eventually(t, func() bool { return strings.Contains(r0.stderr.String(), gate.CodeNotLeader) }, 20*time.Second, 50*time.Millisecond, r0.String())

	leader.Stop(t) // releases the lease
	require.Eventually(t, standby.IsLeader, 20*time.Second, 50*time.Millisecond)
	r1 := startRank(t, standby.URL, p1, token(t, p1, gate.Audience), fullGPURank...)
	for _, r := range []*rank{r0, r1} {
		require.Equal(t, 0, r.wait(t, time.Minute), r.String())
	}
	require.EqualValues(t, 1, standby.Decisions())
	require.Equal(t, "replica-b", appliedVerdict(t, job)[contract.AnnotationDecidedBy])
}

// Two replicas behind a Service: kube-proxy spreads connections, not
// requests, over the endpoints, so a rank whose connection lands on the
// standby must get a new connection to reach the leader (the standby
// closes it with its NotLeader answer; the client also drops it). Ranks
// connect through a round-robin TCP proxy; every one gets the verdict.
func TestE2ETwoReplicasBehindService(t *testing.T) {
	ns := newNamespace(t, "e2e-service", true)
	leader, standby := twoReplicas(t, "rankgate-e2e-service")
	svc := "https://" + roundRobinProxy(t, standby.Addr, leader.Addr)

	job := pytorchJob(t, ns, "svc", false, 4, nil)
	var ranks []*rank
	for i := 0; i < 4; i++ {
		p := rankPod(t, job, "worker", i, fmt.Sprintf("node-%d", i), "")
		ranks = append(ranks, startRank(t, svc, p, token(t, p, gate.Audience), fullGPURank...))
	}
	for _, r := range ranks {
		require.Equal(t, 0, r.wait(t, 30*time.Second), joinRanks(ranks))
	}
	// The proxy alternates: half the ranks' first connections reached the
	// standby (a rank's first call may be its verdict check, which it does
	// not log), so the standby must have answered NotLeader.
	require.Contains(t, standby.logs.String(), gate.CodeNotLeader, "no rank reached the standby; the test proves nothing")
	require.EqualValues(t, 1, leader.Decisions())
	require.Equal(t, "replica-a", appliedVerdict(t, job)[contract.AnnotationDecidedBy])
}

// The manifests in configs/deploy and the examples are accepted by a real
// API server (the examples by the real Kubeflow CRDs' schemas), and the
// example init containers' flags by rankgate init.
func TestE2EDeployManifests(t *testing.T) {
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	dir := filepath.Join(root, "configs", "deploy")
	applyKustomization(t, root)
	newNamespace(t, "ml", false)
	checked := 0
	files := []string{"namespace.yaml", "rbac.yaml", "admission-policy.yaml", "flowschema.yaml", "networkpolicy.yaml", "../components/cert-manager/certificate.yaml", "service.yaml", "deployment.yaml", "webhooks.yaml", "examples/pytorchjob-label.yaml", "examples/pytorchjob-gated.yaml", "examples/mpijob-gated.yaml"}
	for _, f := range files {
		for _, u := range applyManifest(t, filepath.Join(dir, f)) {
			if u.GetKind() != "PyTorchJob" && u.GetKind() != "MPIJob" {
				continue
			}
			// Every init container's arguments parse (it then fails for
			// want of the mounted CA: exit 3, not 2).
			specs, _, _ := unstructured.NestedMap(u.Object, "spec")
			for _, rs := range specs {
				m, ok := rs.(map[string]any)
				if !ok {
					continue
				}
				for _, r := range m {
					inits, _, _ := unstructured.NestedSlice(r.(map[string]any), "template", "spec", "initContainers")
					for _, ic := range inits {
						args, _, _ := unstructured.NestedStringSlice(ic.(map[string]any), "args")
						var keep []string
						for _, a := range args {
							if !strings.HasPrefix(a, "--termination-log") {
								keep = append(keep, a)
							}
						}
						cmd := exec.Command(binary, append(keep, "--pod-name", "p", "--pod-namespace", "ml", "--sample", "a100-full", "--devices", "0", "--timeout", "1s")...)
						out, _ := cmd.CombinedOutput()
						require.Equal(t, verdict.ExitEnvironment, cmd.ProcessState.ExitCode(), "%s: %v\n%s", f, keep, out)
						require.Contains(t, string(out), "CA file")
						checked++
					}
				}
			}
		}
	}
	require.Equal(t, 3, checked, "init containers checked (PyTorchJob Master and Worker, MPIJob Worker)")
}

// applyKustomization builds configs/deploy and its overlays with the pinned
// kustomize (make test builds it: $RANKGATE_KUSTOMIZE) and has the API
// server accept every object (the overlays' in a dry run: they repeat the
// base's objects); the images are pinned to a version.
func applyKustomization(t *testing.T, root string) {
	t.Helper()
	kz := kustomizeBin(t, root)
	for _, dir := range []string{"configs/deploy", "configs/overlays/cert-manager", "configs/overlays/on-fail-delete", "configs/overlays/operator-pods"} {
		out, err := exec.Command(kz, "build", filepath.Join(root, dir)).Output()
		require.NoError(t, err, "kustomize build %s", dir)
		file := filepath.Join(t.TempDir(), "out.yaml")
		require.NoError(t, os.WriteFile(file, out, 0o600))
		applyBuilt(t, dir, decodeManifest(t, file), dir == "configs/deploy")
	}
}

// kustomizeBin is the pinned kustomize ($RANKGATE_KUSTOMIZE, else
// bin/tools); the test is skipped without it.
func kustomizeBin(t *testing.T, root string) string {
	t.Helper()
	kz := os.Getenv("RANKGATE_KUSTOMIZE")
	if kz == "" {
		kz = filepath.Join(root, "bin", "tools", "kustomize-v5.8.0")
	}
	if _, err := os.Stat(kz); err != nil {
		t.Skipf("kustomize v5.8.0 not built (make test builds it into bin/tools): %v", err)
	}
	return kz
}

// applyBuilt has the API server accept every object of a built install
// (what names it): created and deleted again when create, else in a dry
// run. The image is pinned to a release and the controller's flags exist;
// the Namespace enforces the restricted Pod Security Standard and is kept;
// the CRD is the one the API server was started with, accepted as an
// update.
func applyBuilt(t *testing.T, what string, objs []*unstructured.Unstructured, create bool) {
	t.Helper()
	ctx := context.Background()
	require.NotEmpty(t, objs)
	var created []*unstructured.Unstructured
	for _, u := range objs {
		switch u.GetKind() {
		case "Deployment":
			img, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			image := img[0].(map[string]any)["image"].(string)
			require.Regexp(t, `^ghcr\.io/rankgate/rankgate:v[0-9]`, image, "%s: image not pinned to a release", what)
			controllerFlagsKnown(t, what, u)
		case "CustomResourceDefinition":
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(u.GroupVersionKind())
			require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(u), cur), "%s: CRD %s not installed", what, u.GetName())
			u.SetResourceVersion(cur.GetResourceVersion())
			require.NoError(t, k8s.Update(ctx, u, client.DryRunAll), "%s: CRD %s", what, u.GetName())
			continue
		case "Namespace":
			require.Equal(t, "restricted", u.GetLabels()["pod-security.kubernetes.io/enforce"], what)
			if err := k8s.Create(ctx, u); !apierrors.IsAlreadyExists(err) {
				require.NoError(t, err)
			}
			continue
		}
		if !create {
			require.NoError(t, k8s.Create(ctx, u, client.DryRunAll), "%s: %s %s", what, u.GetKind(), u.GetName())
			continue
		}
		require.NoError(t, k8s.Create(ctx, u), "%s: %s %s", what, u.GetKind(), u.GetName())
		created = append(created, u)
	}
	for _, u := range created {
		require.NoError(t, k8s.Delete(ctx, u))
	}
}

// A controller deployed without the permission on Gangs (where it records
// verdicts): ranks are told why they wait, with the fix.
func TestE2EMissingGangPermissionIsExplained(t *testing.T) {
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	applyManifest(t, filepath.Join(root, "configs", "deploy", "namespace.yaml"))
	ctx := context.Background()
	var rules []rbacv1.PolicyRule
	for _, u := range decodeManifest(t, filepath.Join(root, "configs", "deploy", "rbac.yaml")) {
		if u.GetKind() != "ClusterRole" {
			continue
		}
		cr := &rbacv1.ClusterRole{}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cr))
		for _, r := range cr.Rules {
			if !slices.Contains(r.Resources, "gangs") && !slices.Contains(r.Resources, "gangs/status") {
				rules = append(rules, r)
			}
		}
	}
	require.NotEmpty(t, rules)
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "rankgate-old", Namespace: "rankgate-system"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "rankgate-old"}, Rules: rules},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "rankgate-old"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "rankgate-old"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "rankgate-old", Namespace: "rankgate-system"}}},
	}
	for _, o := range objs {
		require.NoError(t, k8s.Create(ctx, o))
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	}
	cfg := rest.CopyConfig(restCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:rankgate-system:rankgate-old",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:rankgate-system", "system:authenticated"}}
	c := startController(t, controller.Options{Config: cfg, GangTimeout: time.Minute})

	ns := newNamespace(t, "e2e-old-rbac", true)
	job := pytorchJob(t, ns, "w", false, 1, nil)
	p := rankPod(t, job, "worker", 0, "node-0", "")
	r := startRank(t, c.URL, p, token(t, p, gate.Audience), append(fullGPURank, "--timeout", "4s")...)
	require.Equal(t, verdict.ExitTimeout, r.wait(t, 30*time.Second), r.String())
	require.Contains(t, r.stderr.String(), "gangs.rankgate.io", r.String())
	require.Contains(t, r.stderr.String(), "configs/deploy/rbac.yaml", r.String())
}

// applyManifest creates every object of a YAML file (deleted when the test
// ends) and returns them.
func applyManifest(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	return applyObjects(t, path, decodeManifest(t, path))
}

// applyObjects creates objs (deleted when the test ends; namespaces are
// kept) and returns them; from names their source in failures.
func applyObjects(t *testing.T, from string, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			// envtest runs no namespace controller: a deleted namespace
			// stays Terminating. Namespaces are created once and kept.
			if err := k8s.Create(context.Background(), u); !apierrors.IsAlreadyExists(err) {
				require.NoError(t, err, "%s: Namespace %s", from, u.GetName())
			}
			out = append(out, u)
			continue
		}
		require.NoError(t, k8s.Create(context.Background(), u), "%s: %s %s", from, u.GetKind(), u.GetName())
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), u) })
		out = append(out, u)
	}
	return out
}

// decodeManifest reads every object of a YAML file.
func decodeManifest(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			require.ErrorIs(t, err, io.EOF, path)
			return out
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// The controller runs with exactly the permissions configs/deploy/rbac.yaml
// grants its service account (impersonated), under the job-write policy of
// admission-policy.yaml: it decides a passing and a failing gang
// (TokenReview, Gangs, job patch with suspend, Events), with
// leader election in its namespace.
func TestE2EShippedRBACIsEnough(t *testing.T) {
	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	var install []*unstructured.Unstructured
	for _, f := range []string{"namespace.yaml", "rbac.yaml", "admission-policy.yaml", "service.yaml"} {
		install = append(install, decodeManifest(t, filepath.Join(root, "configs", "deploy", f))...)
	}
	gangThroughInstall(t, install, controllerNS, controllerSA, "e2e-rbac")
}

// gangThroughInstall creates the objects of an install (its namespace,
// service account, RBAC, admission policies, Services), runs the
// controller as the install's service account sa in namespace ns (the
// shipped webhooks pointed at it, its own certificates, leader election),
// and has it decide a passing and a failing gang of jobs in a new
// namespace jobNS: every write it makes passes the install's RBAC and
// admission policies.
func gangThroughInstall(t *testing.T, install []*unstructured.Unstructured, ns, sa, jobNS string) {
	t.Helper()
	applyObjects(t, "install", install)
	waitJobWritePolicyAs(t, ns, sa)
	cfg := asServiceAccount(ns, sa)
	// With the webhooks and its own certificates, as shipped.
	whAddr := freePort(t)
	installWebhooks(t, "localhost:"+strings.Split(whAddr, ":")[1])
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rankgate-tls"}})
	})
	c := startController(t, controller.Options{Config: cfg, GangTimeout: time.Minute, LeaderElection: true,
		Namespace: ns, LeaderElectionNamespace: ns, LeaderElectionID: "rankgate-controller",
		GateService: "rankgate-gate", GateEndpointIP: "192.0.2.77",
		CertDir: t.TempDir(), WebhookOptions: controller.WebhookOptions{ManageCerts: true, WebhookAddr: whAddr, InitImage: initImage,
			CertDNS: []string{"localhost"}, CertInterval: 200 * time.Millisecond}})
	waitInjected(t, c)
	require.Eventually(t, c.IsLeader, 20*time.Second, 50*time.Millisecond)
	// The leader publishes itself as the gate Service's endpoint, owned by
	// the Service, with the shipped permissions.
	require.Eventually(t, func() bool {
		es := &discoveryv1.EndpointSlice{}
		if k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: controller.GateEndpointSliceName("rankgate-gate")}, es) != nil {
			return false
		}
		return len(es.Endpoints) == 1 && slices.Equal(es.Endpoints[0].Addresses, []string{"192.0.2.77"}) &&
			len(es.OwnerReferences) == 1 && es.OwnerReferences[0].Name == "rankgate-gate"
	}, 20*time.Second, 100*time.Millisecond, "the leader's gate EndpointSlice")
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: controller.GateEndpointSliceName("rankgate-gate")}})
	})

	// The gate serves the controller's own certificate (DNS name localhost).
	gateURL := "https://localhost:" + strings.Split(c.Addr, ":")[1]
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(caFile, c.Certificates().Current().CAPEM(), 0o600))
	jobs := newNamespace(t, jobNS, true)
	pass := pytorchJob(t, jobs, "ok", true, 1, nil)
	fail := mpiJob(t, jobs, "bad", 2)
	var ranks []*rank
	for _, p := range []*corev1.Pod{rankPod(t, pass, "master", 0, "node-0", ""), rankPod(t, pass, "worker", 0, "node-1", "")} {
		ranks = append(ranks, startRank(t, gateURL, p, token(t, p, gate.Audience), append([]string{"--ca-file", caFile}, fullGPURank...)...))
	}
	for i, dev := range []string{"0:0", "1:0"} {
		p := rankPod(t, fail, "worker", i, "h100-node", "nvidia.com/mig-3g.40gb")
		ranks = append(ranks, startRank(t, gateURL, p, token(t, p, gate.Audience), "--ca-file", caFile, "--sample", "h100-mig", "--devices", dev))
	}
	for i, r := range ranks {
		want := 0
		if i >= 2 {
			want = verdict.ExitFail
		}
		require.Equal(t, want, r.wait(t, time.Minute), joinRanks(ranks))
	}
	require.Equal(t, "pass", appliedVerdict(t, pass)[contract.AnnotationVerdict])
	require.Equal(t, "fail", appliedVerdict(t, fail)[contract.AnnotationVerdict])
	fresh := &mpiv2beta1.MPIJob{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(fail), fresh))
	require.True(t, ptr.Deref(fresh.Spec.RunPolicy.Suspend, false), "job not suspended")
	require.Eventually(t, func() bool { return len(jobEvents(t, fail)["GangFailed"]) == 1 }, 10*time.Second, 100*time.Millisecond)
	require.EqualValues(t, 2, c.Decisions())
	require.NotContains(t, c.logs.String(), "forbidden", "the controller hit a permission it lacks")
	require.NotContains(t, c.logs.String(), "Forbidden", "the controller hit a permission it lacks")
}
