//go:build !rankgate_node

package app

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/envtestutil"
	"github.com/rankgate/rankgate/verdict"
)

// statusKubeconfig writes a kubeconfig for the test API server with the
// contexts admin (current, no namespace), ml (namespace ml) and alice (a
// user without any RBAC grant, by impersonation).
func statusKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	c := clientcmdapi.NewConfig()
	c.Clusters["env"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	admin := &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	alice := admin.DeepCopy()
	alice.Impersonate = "alice"
	c.AuthInfos["admin"], c.AuthInfos["alice"] = admin, alice
	c.Contexts["admin"] = &clientcmdapi.Context{Cluster: "env", AuthInfo: "admin"}
	c.Contexts["ml"] = &clientcmdapi.Context{Cluster: "env", AuthInfo: "admin", Namespace: "ml"}
	c.Contexts["alice"] = &clientcmdapi.Context{Cluster: "env", AuthInfo: "alice"}
	c.CurrentContext = "admin"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*c, path))
	return path
}

// gangFixture is one Gang as the controller would write it.
type gangFixture struct {
	ns, kind, job     string
	attempt, expected int32
	status            v1alpha1.GangStatus
}

func createGangs(t *testing.T, c client.Client, gs []gangFixture) {
	t.Helper()
	ctx := t.Context()
	for _, f := range gs {
		g := &v1alpha1.Gang{
			ObjectMeta: metav1.ObjectMeta{
				Name: v1alpha1.GangName(f.kind, f.job, f.attempt), Namespace: f.ns,
				Labels: map[string]string{contract.LabelJobName: f.job, contract.LabelJobKind: f.kind},
			},
			Spec: v1alpha1.GangSpec{
				Job:     v1alpha1.JobReference{APIVersion: "kubeflow.org/v1", Kind: f.kind, Name: f.job, UID: types.UID("uid-" + f.job)},
				Attempt: f.attempt, ExpectedRanks: f.expected,
			},
		}
		require.NoError(t, c.Create(ctx, g))
		g.Status = f.status
		require.NoError(t, c.Status().Update(ctx, g), "the status subresource")
	}
}

type gangList struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Items      []v1alpha1.Gang `json:"items"`
}

// firstFields is the first field of each line: the JOB (or NAMESPACE)
// column of a table.
func firstFields(out string) []string {
	var col []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			col = append(col, f[0])
		}
	}
	return col
}

// requireField: the detail view has the line "name: value" (aligned).
func requireField(t *testing.T, out, name, value string) {
	t.Helper()
	require.Regexp(t, `(?m)^`+regexp.QuoteMeta(name)+`: +`+regexp.QuoteMeta(value)+`$`, out)
}

func TestStatusOnAPIServer(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	cfg, _ := envtestutil.Start(t, envtestutil.WithoutGangCRD())
	kc := statusKubeconfig(t, cfg)
	status := func(args ...string) (int, string, string) {
		t.Helper()
		return run(t, nil, append([]string{"status", "--kubeconfig", kc}, args...)...)
	}

	// Before the CRD is installed: exit 3, and the command that installs it.
	for _, args := range [][]string{{"-n", "ml"}, {"-A", "-o", "json"}} {
		code, out, errOut := status(args...)
		require.Equal(t, verdict.ExitEnvironment, code, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, "the Gang CRD is not installed (kubectl apply -k configs/deploy installs it")
	}

	root, err := envtestutil.RepoRoot()
	require.NoError(t, err)
	_, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{filepath.Join(root, "configs", "deploy", "crds")}, ErrorIfPathMissing: true})
	require.NoError(t, err)
	scheme := envtestutil.Scheme()
	require.NoError(t, v1alpha1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	for _, ns := range []string{"ml", "research", "empty"} {
		require.NoError(t, c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}

	now := time.Now()
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(d).Truncate(time.Second)); return &t }
	decided := v1alpha1.GangStatus{
		Phase: v1alpha1.PhaseFailed, Progress: "3/4", ReportedRanks: 3,
		Ranks: []v1alpha1.RankStatus{
			{Rank: 0, Pod: "other-master-0", Node: "dgx-1", Devices: []string{"MIG-aaaa"}, Verdict: "pass"},
			{Rank: 1, Pod: "other-worker-0", Node: "dgx-1", Devices: []string{"MIG-bbbb", "MIG-cccc"}, Verdict: "fail", Rules: []string{verdict.RuleMIGSpansGPUs}},
			{Rank: 2, Pod: "other-worker-1", Node: "dgx-2", Verdict: "pass"},
		},
		MissingRanks: []int32{3}, MissingCount: 1,
		FirstReportAt: at(-10 * time.Minute), Deadline: at(-5 * time.Minute),
		Verdict: "fail", Rules: []string{verdict.RuleMIGSpansGPUs, verdict.RuleGangIncomplete},
		Reason:  "rank 1: MIG devices on two GPUs (MIG_SPANS_GPUS)",
		Message: "rank 1 (pod other-worker-0): MIG devices on two GPUs.\nGive each rank one MIG device.",
		Action:  "suspend", DecidedAt: at(-5 * time.Minute), DecidedBy: "rankgate-controller-7d9f-x2x4q",
		Conditions: []metav1.Condition{{Type: contract.ConditionDecided, Status: metav1.ConditionTrue, Reason: "Failed", Message: "recorded", LastTransitionTime: *at(-5 * time.Minute)}},
	}
	createGangs(t, c, []gangFixture{
		{"ml", "PyTorchJob", "other", 1, 4, decided},
		{"ml", "PyTorchJob", "train", 1, 4, v1alpha1.GangStatus{Phase: v1alpha1.PhaseFailed, Progress: "4/4", ReportedRanks: 4, Verdict: "fail", Rules: []string{verdict.RuleMIGSpansGPUs}, Reason: "rank 2: MIG devices on two GPUs (MIG_SPANS_GPUS)", DecidedBy: "rankgate-controller-7d9f-x2x4q", DecidedAt: at(-2 * time.Minute)}},
		{"ml", "PyTorchJob", "train", 2, 4, v1alpha1.GangStatus{
			Phase: v1alpha1.PhaseWaitingForRanks, Progress: "2/4", ReportedRanks: 2,
			Ranks:         []v1alpha1.RankStatus{{Rank: 0, Pod: "train-master-0", Node: "dgx-3", Verdict: "pass"}, {Rank: 1, Pod: "train-worker-0", Node: "dgx-3", Verdict: "warn", Rules: []string{"DRIVER_KNOWN_BAD"}}},
			FirstReportAt: at(-time.Minute), Deadline: at(5 * time.Minute),
		}},
		{"ml", "MPIJob", "train", 1, 2, v1alpha1.GangStatus{Phase: v1alpha1.PhasePassed, Progress: "2/2", ReportedRanks: 2, Verdict: "pass", DecidedBy: "rankgate-controller-7d9f-x2x4q"}},
		{"research", "MPIJob", "hpc", 1, 16, v1alpha1.GangStatus{Phase: v1alpha1.PhaseWaitingForPlacement, Progress: "0/16", WaitingFor: "capacity: 16 nvidia.com/gpu on 2 nodes, busy now"}},
	})

	t.Run("table", func(t *testing.T) {
		for _, args := range [][]string{{"-n", "ml"}, {"--namespace", "ml"}, {"--context", "ml"}} {
			code, out, errOut := status(args...)
			require.Equal(t, 0, code, errOut)
			require.Empty(t, errOut)
			lines := strings.Split(out, "\n")
			require.Regexp(t, `^JOB +PHASE +RANKS +VERDICT +REASON +AGE$`, lines[0])
			require.Equal(t, []string{"JOB", "pytorchjob/other", "mpijob/train", "pytorchjob/train", "pytorchjob/train"}, firstFields(out), "by job, kind, the latest attempt first")
			require.Regexp(t, `^pytorchjob/other +Failed +3/4 +fail +rank 1: MIG devices on two GPUs \(MIG_SPANS_GPUS\) +\d+s$`, lines[1])
			require.Regexp(t, `^pytorchjob/train +WaitingForRanks +2/4 +- +- +\d+s$`, lines[3])
		}
	})

	t.Run("wide and all namespaces", func(t *testing.T) {
		code, out, errOut := status("-n", "ml", "-o", "wide")
		require.Equal(t, 0, code, errOut)
		lines := strings.Split(out, "\n")
		require.Regexp(t, `^JOB +ATTEMPT +PHASE +RANKS +VERDICT +REASON +AGE +DEADLINE +DECIDED-BY +MISSING$`, lines[0])
		require.Regexp(t, `^pytorchjob/train +2 +WaitingForRanks +2/4 +- +- +\d+s +(4m5\ds|5m0s|5m) left +- +2$`, lines[3])
		require.Regexp(t, `^pytorchjob/train +1 +Failed +4/4 +fail .* +- +rankgate-controller-7d9f-x2x4q +0$`, lines[4])
		require.Regexp(t, `^pytorchjob/other +1 +Failed +3/4 .* +rankgate-controller-7d9f-x2x4q +1$`, lines[1])

		code, out, errOut = status("-A")
		require.Equal(t, 0, code, errOut)
		require.Regexp(t, `^NAMESPACE +JOB +PHASE`, out)
		require.Equal(t, []string{"NAMESPACE", "ml", "ml", "ml", "ml", "research"}, firstFields(out))
		require.Regexp(t, `\nresearch +mpijob/hpc +WaitingForPlacement +0/16 +- +- +\d+s\n`, out)
	})

	t.Run("one job, every form", func(t *testing.T) {
		for _, args := range [][]string{
			{"pytorchjob/train", "-n", "ml"},
			{"pytorchjob", "train", "-n", "ml"},
			{"PyTorchJobs.kubeflow.org/train", "--context", "ml"},
			{"pytorchjobs.v1.kubeflow.org", "train", "--context", "ml"},
		} {
			code, out, errOut := status(args...)
			require.Equal(t, 0, code, "%v: %s", args, errOut)
			table, detail, ok := strings.Cut(out, "\n\n")
			require.True(t, ok, out)
			require.Equal(t, []string{"JOB", "pytorchjob/train", "pytorchjob/train"}, firstFields(table))
			requireField(t, detail, "Gang", "ml/pytorchjob-train-2")
			requireField(t, detail, "Job", "PyTorchJob ml/train, attempt 2")
			requireField(t, detail, "Ranks", "2/4 reported, 2 missing")
			require.Regexp(t, `Deadline: +\S+ \(in (4m5\ds|5m0s|5m)\)\n`, detail)
			require.Regexp(t, `\nRANK +POD +NODE +VERDICT +RULES\n0 +train-master-0 +dgx-3 +pass +-\n1 +train-worker-0 +dgx-3 +warn +DRIVER_KNOWN_BAD\n$`, detail)
		}

		// NAME alone and NAMESPACE/NAME: both kinds, a detail for each.
		for _, args := range [][]string{{"train", "-n", "ml"}, {"ml/train"}, {"ml/train", "-n", "ml"}} {
			code, out, errOut := status(args...)
			require.Equal(t, 0, code, "%v: %s", args, errOut)
			parts := strings.Split(out, "\n\nGang:")
			require.Len(t, parts, 3, out)
			require.Equal(t, []string{"JOB", "mpijob/train", "pytorchjob/train", "pytorchjob/train"}, firstFields(parts[0]))
			require.Regexp(t, "^ +ml/mpijob-train-1\n", parts[1])
			requireField(t, parts[1], "Job", "MPIJob ml/train, attempt 1")
			require.Regexp(t, "^ +ml/pytorchjob-train-2\n", parts[2])
		}

		// A decided gang in full: verdict, rules, action, message, missing ranks.
		code, out, errOut := status("other", "-n", "ml", "-o", "wide")
		require.Equal(t, 0, code, errOut)
		_, detail, _ := strings.Cut(out, "\n\n")
		requireField(t, detail, "Phase", "Failed")
		requireField(t, detail, "Ranks", "3/4 reported, 1 missing")
		requireField(t, detail, "Verdict", "fail (MIG_SPANS_GPUS, GANG_INCOMPLETE)")
		requireField(t, detail, "Reason", "rank 1: MIG devices on two GPUs (MIG_SPANS_GPUS)")
		requireField(t, detail, "Action", "suspend")
		require.Regexp(t, `(?m)^Decided: +\S+ \(5m\d*s? ago\) by rankgate-controller-7d9f-x2x4q$`, detail)
		require.Contains(t, detail, "Message:\n  rank 1 (pod other-worker-0): MIG devices on two GPUs.\n  Give each rank one MIG device.\n")
		require.Contains(t, detail, "Missing ranks: 3\n")
		require.Regexp(t, `\n1 +other-worker-0 +dgx-1 +fail +MIG_SPANS_GPUS +MIG-bbbb,MIG-cccc\n`, detail, "-o wide adds the devices")
	})

	t.Run("json and yaml: one document", func(t *testing.T) {
		code, out, errOut := status("-n", "ml", "-o", "json")
		require.Equal(t, 0, code, errOut)
		var l gangList
		require.NoError(t, json.Unmarshal([]byte(out), &l), "the whole of stdout is one JSON document")
		require.Equal(t, "v1", l.APIVersion)
		require.Equal(t, "List", l.Kind)
		require.Len(t, l.Items, 4)
		require.Equal(t, "pytorchjob-other-1", l.Items[0].Name)
		require.Equal(t, "Gang", l.Items[0].Kind)
		require.Equal(t, "rankgate.io/v1alpha1", l.Items[0].APIVersion)
		require.Empty(t, l.Items[0].ManagedFields)
		require.Equal(t, decided.Ranks, l.Items[0].Status.Ranks)
		require.Equal(t, decided.Reason, l.Items[0].Status.Reason)
		require.Equal(t, []int32{3}, l.Items[0].Status.MissingRanks)

		code, out, errOut = status("pytorchjob/train", "-n", "ml", "-o", "yaml")
		require.Equal(t, 0, code, errOut)
		require.NotContains(t, out, "\n---")
		l = gangList{}
		require.NoError(t, yaml.Unmarshal([]byte(out), &l), out)
		require.Equal(t, "List", l.Kind)
		require.Len(t, l.Items, 2)
		require.Equal(t, int32(2), l.Items[0].Spec.Attempt, "the latest attempt first")
		require.Equal(t, v1alpha1.PhaseWaitingForRanks, l.Items[0].Status.Phase)

		code, out, errOut = status("-A", "-o", "json")
		require.Equal(t, 0, code, errOut)
		l = gangList{}
		require.NoError(t, json.Unmarshal([]byte(out), &l))
		require.Len(t, l.Items, 5)
	})

	t.Run("no gangs", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			msg  string
		}{
			{[]string{"-n", "empty"}, "No gangs found in empty namespace.\n"},
			{nil, "No gangs found in default namespace.\n"},
			{[]string{"-n", "does-not-exist"}, "No gangs found in does-not-exist namespace.\n"},
			{[]string{"nope", "-n", "ml"}, "No gangs found for nope in ml namespace"},
			{[]string{"mpijob/other", "-n", "ml"}, "No gangs found for mpijob/other in ml namespace"},
		} {
			code, out, errOut := status(tc.args...)
			require.Equal(t, 0, code, errOut)
			require.Empty(t, out)
			require.Contains(t, errOut, tc.msg)
		}
		code, out, _ := status("-n", "empty", "-o", "json")
		require.Equal(t, 0, code)
		var l gangList
		require.NoError(t, json.Unmarshal([]byte(out), &l), out)
		require.Equal(t, "List", l.Kind)
		require.Empty(t, l.Items)
	})

	t.Run("forbidden", func(t *testing.T) {
		code, out, errOut := status("--context", "alice", "-n", "ml")
		require.Equal(t, verdict.ExitEnvironment, code, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, "forbidden: you may not list gangs.rankgate.io in namespace ml; ask for the RBAC verb list on resource gangs in API group rankgate.io")
		code, _, errOut = status("--context", "alice", "-A")
		require.Equal(t, verdict.ExitEnvironment, code)
		require.Contains(t, errOut, "you may not list gangs.rankgate.io in every namespace")
	})

	t.Run("usage", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			msg  string
		}{
			{[]string{"-A", "train"}, "a job is named in one namespace"},
			{[]string{"-A", "-n", "ml"}, "-A lists every namespace"},
			{[]string{"-o", "table"}, `output format "table": want text, wide, json, yaml, name, jsonpath=TEMPLATE`},
			{[]string{"Train"}, `"Train": not a job name`},
			{[]string{"ml/train", "-n", "other"}, `the job names namespace "ml", --namespace says "other"`},
			{[]string{"a", "b", "c"}, "accepts at most 2 arg(s)"},
			{[]string{"--request-timeout", "soon"}, `--request-timeout "soon": want a duration like 30s`},
			{[]string{"-o", "jsonpath"}, "-o jsonpath needs a template: -o jsonpath=TEMPLATE or --template"},
			{[]string{"-o", "go-template={{.items"}, "-o go-template: "},
		} {
			code, out, errOut := status(tc.args...)
			require.Equal(t, verdict.ExitUsage, code, "%v: %s", tc.args, errOut)
			require.Empty(t, out)
			require.Contains(t, errOut, tc.msg)
		}
		code, _, errOut := status("--context", "nope")
		require.Equal(t, verdict.ExitEnvironment, code)
		require.Contains(t, errOut, "rankgate: kubeconfig: "+kc+": ", "names the file it read")
	})

	t.Run("kubectl printers", func(t *testing.T) {
		code, out, errOut := status("-n", "ml", "-o", "name")
		require.Equal(t, 0, code, errOut)
		require.Equal(t, "gang.rankgate.io/"+v1alpha1.GangName("PyTorchJob", "other", 1)+"\n", strings.SplitAfter(out, "\n")[0])
		require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 4)

		code, out, errOut = status("train", "--context", "ml", "-o", "jsonpath={.items[*].status.phase}")
		require.Equal(t, 0, code, errOut)
		require.Equal(t, "Passed WaitingForRanks Failed", out, "mpijob/train, then pytorchjob/train's attempts, latest first")

		code, out, errOut = status("pytorchjob/train", "-n", "ml", "-o", `go-template={{range .items}}{{.spec.attempt}}:{{.status.progress}} {{end}}`)
		require.Equal(t, 0, code, errOut)
		require.Equal(t, "2:2/4 1:4/4 ", out)

		code, out, errOut = status("pytorchjob/train", "-n", "ml", "-o", "go-template", "--template", `{{len .items}}`)
		require.Equal(t, 0, code, errOut)
		require.Equal(t, "2", out)

		code, out, errOut = status("-n", "ml", "-o", "json")
		require.Equal(t, 0, code, errOut)
		var l gangList
		require.NoError(t, json.Unmarshal([]byte(out), &l))
		require.Equal(t, "v1", l.APIVersion)
		require.Equal(t, "List", l.Kind)
	})

	t.Run("watch", func(t *testing.T) {
		old := statusWatchDeadline
		statusWatchDeadline = time.Second // each watch call ends after a second: status reconnects
		t.Cleanup(func() { statusWatchDeadline = old })
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var out, errOut syncBuffer
		done := make(chan int, 1)
		go func() {
			done <- Run(ctx, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut}, []string{"status", "--kubeconfig", kc, "-n", "research", "-w", "-o", "jsonpath={.items[*].status.phase}{\"\\n\"}"})
		}()
		require.Eventually(t, func() bool { return out.String() == "WaitingForPlacement\n" }, 20*time.Second, 50*time.Millisecond, "the first state: %q %q", out.String(), errOut.String())
		time.Sleep(2500 * time.Millisecond) // past two watch deadlines
		var g v1alpha1.Gang
		require.NoError(t, c.Get(t.Context(), client.ObjectKey{Namespace: "research", Name: v1alpha1.GangName("MPIJob", "hpc", 1)}, &g))
		g.Status.Phase, g.Status.Progress = v1alpha1.PhaseWaitingForRanks, "3/16"
		require.NoError(t, c.Status().Update(t.Context(), &g))
		require.Eventually(t, func() bool { return out.String() == "WaitingForPlacement\nWaitingForRanks\n" }, 20*time.Second, 50*time.Millisecond, "printed again on the change: %q", out.String())
		cancel()
		select {
		case code := <-done:
			require.Equal(t, 0, code, "Ctrl-C ends a watch: %s", errOut.String())
		case <-time.After(10 * time.Second):
			t.Fatal("status -w did not end with its context")
		}
		require.Empty(t, errOut.String())
	})
}

// syncBuffer is a bytes.Buffer a command writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
