//go:build !rankgate_node

package app

import (
	"errors"
	"fmt"
	"github.com/rankgate/rankgate/integrations/kubernetes/kubeconfig"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/verdict"
)

// The scenario dumps are built around the posted fixtures by the cluster
// package's tests (one per verdict).
var scenarioDir = filepath.Join("..", "..", "..", "integrations", "kubernetes", "cluster", "testdata", "scenarios")

func TestDiagnoseOfflineScenarios(t *testing.T) {
	exits := map[string]int{
		"01-schedulable.yaml": 0, "02-wait-capacity.yaml": 0, "03-shape-mismatch.yaml": 1,
		"04-strategy-mismatch.yaml": 1, "05-mig-layout-invalid.yaml": 1, "06-mig-reconfig-pending.yaml": 0,
		"07-mig-reconfig-failed.yaml": 1, "08-driver-known-bad.yaml": 1, "09-gang-too-large.yaml": 1,
		"10-node-constraints.yaml": 1, "11-stale-mig-resources.yaml": 1, "12-scheduler-disagrees.yaml": 0,
		"13-mig-multi-pod.yaml": 0, "14-dra-not-judged.yaml": 0, "15-dra-device-unhealthy.yaml": 0,
		"16-node-labels-unreadable.yaml": 0,
	}
	notes := map[string]string{"16-node-labels-unreadable.yaml": "rankgate: note: GPU labels ignored, judged from allocatable alone: node dgx-a100-03: label nvidia.com/gpu.count=\"eight\" is not a non-negative integer\n"}
	files, err := filepath.Glob(filepath.Join(scenarioDir, "*.yaml"))
	require.NoError(t, err)
	require.Len(t, files, len(exits))
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			code, out, errOut := run(t, nil, "diagnose", "--offline", "-f", f)
			require.Equal(t, exits[name], code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			require.Equal(t, notes[name], errOut)
			golden(t, "diagnose-"+strings.TrimSuffix(name, ".yaml")+".golden", out)
		})
	}
}

func TestDiagnoseOfflineJSONAndStdin(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(scenarioDir, "03-shape-mismatch.yaml"))
	require.NoError(t, err)
	var out, errb strings.Builder
	code := Run(t.Context(), Streams{In: strings.NewReader(string(data)), Out: &out, Err: &errb},
		[]string{"diagnose", "--offline", "-f", "-", "-o", "json"})
	require.Equal(t, verdict.ExitFail, code, errb.String())
	rs := decodeReportList(t, out.String())
	require.Len(t, rs, 1)
	require.Equal(t, verdict.VerdictFail, rs[0].Verdict)
	require.Equal(t, "PyTorchJob ml/llm-finetune", rs[0].Subject)
	require.Equal(t, []string{"SHAPE_MISMATCH", "MIG_MULTI_POD", "NCCL_MIG_VERSION", "RECONFIGURABLE"}, rs[0].RuleIDs())
	require.Equal(t, []string{"dgx-a100-01", "dgx-a100-02"}, rs[0].Findings[3].Nodes)
	require.Contains(t, rs[0].Findings[0].Pods, "ml/llm-finetune-worker-2")
}

func TestDiagnoseOfflineSeveralFiles(t *testing.T) {
	// Nodes from one dump, the job from another: judged together.
	dir := t.TempDir()
	nodes := filepath.Join(dir, "nodes.yaml")
	job := filepath.Join(dir, "job.yaml")
	require.NoError(t, os.WriteFile(nodes, []byte(`apiVersion: v1
kind: NodeList
items:
- metadata: {name: h100-1, labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/mig.strategy: none}}
  status: {allocatable: {nvidia.com/gpu: "8", pods: "110", cpu: "128", memory: 2Ti}}
`), 0o644))
	require.NoError(t, os.WriteFile(job, []byte(`{"apiVersion":"kubeflow.org/v2beta1","kind":"MPIJob","metadata":{"name":"a","namespace":"hpc"},
"spec":{"mpiReplicaSpecs":{"Launcher":{"replicas":1,"template":{"spec":{"containers":[{"name":"l"}]}}},
"Worker":{"replicas":2,"template":{"spec":{"containers":[{"name":"w","resources":{"limits":{"nvidia.com/gpu":"4"}}}]}}}}}}`), 0o644))
	code, out, errOut := run(t, nil, "diagnose", "--offline", "-f", nodes, "-f", job)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "verdict: PASS  MPIJob hpc/a")
	require.Contains(t, out, "Launcher (1 pod)")
	require.Contains(t, out, "Worker (2 pods)")
}

func TestDiagnoseBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	bad := write("bad.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: gpu-7}\nstatus: {allocatable: {nvidia.com/gpu: \"-3\"}}\n")
	yamlErr := write("broken.yaml", "apiVersion: v1\nkind: Pod\nmetadata: [\n")
	onlyNodes := write("nodes.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n")
	badLabel := write("label.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: a, labels: {nvidia.com/gpu.count: eight}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ns}\nspec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1}}}]}\n")
	tests := []struct {
		args []string
		err  string
	}{
		{[]string{"diagnose"}, "diagnose needs a job (JOB or 'job JOB'"},
		{[]string{"diagnose", "--offline"}, "--offline needs at least one -f FILE"},
		{[]string{"diagnose", "--offline", "-f", bad}, "bad.yaml: document 1 (Node gpu-7): status.allocatable nvidia.com/gpu is -3: must not be negative"},
		{[]string{"diagnose", "--offline", "-f", yamlErr}, "broken.yaml: document 1: not valid YAML or JSON"},
		{[]string{"diagnose", "--offline", "-f", filepath.Join(dir, "missing.yaml")}, "missing.yaml: no such file or directory"},
		{[]string{"diagnose", "--offline", "-f", onlyNodes}, "nothing to diagnose"},
		{[]string{"diagnose", "--offline", "-f", onlyNodes, "-o", "xml"}, `output format "xml": want text, json or yaml`},
		{[]string{"diagnose", "job", "ml/a/b"}, `"a/b": not a job name`},
		{[]string{"diagnose", "job", "tfjobs.kubeflow.org/a"}, `not a job kind rankgate gates`},
		{[]string{"diagnose", "job", "ml/a", "-n", "other"}, `the job names namespace "ml", --namespace says "other"`},
		{[]string{"diagnose", "pod", "Bad_NS/p"}, `"Bad_NS" is not a namespace`},
		{[]string{"diagnose", "job"}, "accepts between 1 and 2 arg(s), received 0"},
		{[]string{"diagnose", "pod"}, "accepts 1 arg(s), received 0"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, errOut := run(t, nil, tc.args...)
			require.Equal(t, verdict.ExitUsage, code, errOut)
			require.Contains(t, errOut, tc.err)
		})
	}
	// A node whose GPU labels cannot be read is no usage error: it is
	// judged from its allocatable alone (here none), and the job that
	// would be hopeless is not called so (NODE_LABELS_UNREADABLE).
	code, out, errOut := run(t, nil, "diagnose", "--offline", "-f", badLabel)
	require.Equal(t, verdict.ExitPass, code, "%s\n%s", out, errOut)
	require.Contains(t, errOut, `rankgate: note: GPU labels ignored, judged from allocatable alone: node a: label nvidia.com/gpu.count="eight" is not a non-negative integer`)
	require.Contains(t, out, "NODE_LABELS_UNREADABLE")
	require.Contains(t, out, "SHAPE_MISMATCH")
}

// fakeLive serves objects from client-go fakes (unit tests only).
func fakeLive(t *testing.T, objs ...runtime.Object) (*cluster.Live, *fake.Clientset) {
	t.Helper()
	cs, dyn := clustertest.FakeClients(t, objs...)
	return &cluster.Live{Core: cs, Dynamic: dyn}, cs
}

func useLive(t *testing.T, l *cluster.Live) {
	old := liveSource
	liveSource = func(*kubeconfig.Flags) (*cluster.Live, error) { return l, nil }
	t.Cleanup(func() { liveSource = old })
}

func TestDiagnoseLive(t *testing.T) {
	node := func(name string) runtime.Object {
		return clustertest.MakeNode(name).Labels(map[string]string{
			"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "1", "nvidia.com/mig.strategy": "mixed",
			"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "success",
		}).Allocatable("nvidia.com/mig-1g.10gb", "7").Obj()
	}
	job := kubeflowtest.MakePyTorchJob("llm", "ml").Master().Workers(3).Request("nvidia.com/mig-2g.20gb", "1").Obj()
	pod := clustertest.MakePod("llm-worker-0", "ml").OwnedBy("kubeflow.org/v1", "PyTorchJob", "llm", "Worker").Request("nvidia.com/mig-2g.20gb", "1").Obj()
	lone := clustertest.MakePod("notebook", "research").Request("nvidia.com/mig-1g.10gb", "1").Obj()
	running := clustertest.MakePod("busy", "research").Request("nvidia.com/mig-1g.10gb", "1").Node("a100-1").Obj()
	l, cs := fakeLive(t, node("a100-1"), node("a100-2"), job, pod, lone, running)
	useLive(t, l)

	code, out, errOut := run(t, nil, "diagnose", "job", "ml/llm")
	require.Equal(t, verdict.ExitFail, code, errOut)
	require.Contains(t, out, "verdict: FAIL  PyTorchJob ml/llm")
	require.Contains(t, out, "SHAPE_MISMATCH")
	require.Contains(t, out, "RECONFIGURABLE")

	// A pod of the job: the whole job is judged.
	code, out, _ = run(t, nil, "diagnose", "pod", "ml/llm-worker-0", "-o", "json")
	require.Equal(t, verdict.ExitFail, code)
	r := decodeReport(t, out)
	require.Equal(t, "PyTorchJob ml/llm", r.Subject)

	code, out, _ = run(t, nil, "diagnose", "pod", "research/notebook", "-o", "json")
	require.Equal(t, 0, code)
	r = decodeReport(t, out)
	require.Equal(t, []string{"SCHEDULABLE"}, r.RuleIDs())

	code, out, _ = run(t, nil, "diagnose", "pod", "research/busy")
	require.Equal(t, 0, code)
	require.Contains(t, out, "already bound to node a100-1")

	code, _, errOut = run(t, nil, "diagnose", "job", "ml/missing")
	require.Equal(t, verdict.ExitUsage, code)
	require.Contains(t, errOut, "PyTorchJob, MPIJob, TrainJob or JobSet ml/missing (or its CRD is not installed) not found")

	code, _, errOut = run(t, nil, "diagnose", "job", "ml/llm", "--kind", "TFJob")
	require.Equal(t, verdict.ExitUsage, code)
	require.Contains(t, errOut, `kind "TFJob": want PyTorchJob, MPIJob, TrainJob or JobSet`)

	// The API server fails: environment error.
	cs.PrependReactor("list", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	code, _, errOut = run(t, nil, "diagnose", "job", "ml/llm")
	require.Equal(t, verdict.ExitEnvironment, code)
	require.Contains(t, errOut, "list nodes: connection refused")
}

// TestDiagnoseOfflineNCCLSettings: a pasted job manifest whose NCCL
// settings cannot work on what it asks for gets the findings before
// anything runs (no nodes needed).
func TestDiagnoseOfflineNCCLSettings(t *testing.T) {
	code, out, _ := run(t, nil, "diagnose", "--offline", "-f", filepath.Join("testdata", "nccl-nvls-mig-job.yaml"), "-o", "json")
	require.Equal(t, verdict.ExitFail, code, out)
	rs := decodeReportList(t, out)
	require.Len(t, rs, 1)
	byRule := map[string]verdict.Finding{}
	for _, f := range rs[0].Findings {
		byRule[f.Rule] = f
	}
	require.Equal(t, verdict.SeverityFail, byRule[verdict.RuleNCCLNVLSOnMIG].Severity, out)
	require.Equal(t, verdict.SeverityWarn, byRule[verdict.RuleNCCLMultiRankGPU].Severity, out)
	require.NotContains(t, byRule, verdict.RuleNCCLMIGVersion, "NCCL_VERSION 2.31.2 supports MIG")
	require.Contains(t, byRule[verdict.RuleNCCLNVLSOnMIG].Message, "Master (container pytorch)")
}

// pastedJob is a PyTorchJob manifest as a user pastes it: a Master and two
// Workers, each pod asking for one 1g.10gb MIG instance, with the given
// image and env.
func pastedJob(image string, master, worker []string) string {
	env := func(kv []string) string {
		if len(kv) == 0 {
			return ""
		}
		s := "            env:\n"
		for i := 0; i+1 < len(kv); i += 2 {
			s += fmt.Sprintf("            - name: %s\n              value: %q\n", kv[i], kv[i+1])
		}
		return s
	}
	replica := func(typ string, n int, kv []string) string {
		return fmt.Sprintf(`    %s:
      replicas: %d
      template:
        spec:
          containers:
          - name: pytorch
            image: %s
%s            resources:
              limits:
                nvidia.com/mig-1g.10gb: 1
`, typ, n, image, env(kv))
	}
	return "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: pasted\n  namespace: ml\nspec:\n  pytorchReplicaSpecs:\n" +
		replica("Master", 1, master) + replica("Worker", 2, worker)
}

// TestDiagnoseOfflinePastedManifestNCCLSettings: a user pastes a job
// manifest (stdin) with the cluster's nodes beside it, and `rankgate
// diagnose --offline` prints each NCCL settings finding a manifest alone
// can show, in its human output, before anything runs; the same job with
// the setting fixed has no such finding.
func TestDiagnoseOfflinePastedManifestNCCLSettings(t *testing.T) {
	nodes, err := os.ReadFile(filepath.Join("testdata", "nodes-h100-1g.yaml"))
	require.NoError(t, err)
	const image = "registry.example.com/train:1"
	v231 := []string{"NCCL_VERSION", "2.31.2"}
	with := func(kv ...string) []string { return append(append([]string(nil), v231...), kv...) }
	for _, tc := range []struct {
		name           string
		image          string
		master, worker []string
		rule           string
		sev            verdict.Severity
	}{
		{"NVLS forced on MIG", image, with("NCCL_NVLS_ENABLE", "1"), with("NCCL_NVLS_ENABLE", "1"), verdict.RuleNCCLNVLSOnMIG, verdict.SeverityFail},
		{"NVLS off on MIG", image, with("NCCL_NVLS_ENABLE", "0"), with("NCCL_NVLS_ENABLE", "0"), verdict.RuleNCCLNVLSOnMIG, ""},
		{"MIG on an NGC image before MIG support", "nvcr.io/nvidia/pytorch:24.05-py3", nil, nil, verdict.RuleNCCLMIGVersion, verdict.SeverityFail},
		{"MIG on NCCL 2.31", "nvcr.io/nvidia/pytorch:24.05-py3", v231, v231, verdict.RuleNCCLMIGVersion, ""},
		{"MNNVL forced on MIG", image, with("NCCL_MNNVL_ENABLE", "1"), with("NCCL_MNNVL_ENABLE", "1"), verdict.RuleNCCLMNNVLNoDomain, verdict.SeverityFail},
		{"CUDA_VISIBLE_DEVICES beyond the one MIG instance", image, with("CUDA_VISIBLE_DEVICES", "0,1"), with("CUDA_VISIBLE_DEVICES", "0,1"), verdict.RuleVisibleDevicesMismatch, verdict.SeverityFail},
		{"CUDA_VISIBLE_DEVICES naming the one MIG instance", image, with("CUDA_VISIBLE_DEVICES", "0"), with("CUDA_VISIBLE_DEVICES", "0"), verdict.RuleVisibleDevicesMismatch, ""},
		{"NIC mismatch ignored", image, with("NCCL_IGNORE_NET_MISMATCH", "1"), with("NCCL_IGNORE_NET_MISMATCH", "1"), verdict.RuleNCCLIgnoreNetMismatch, verdict.SeverityWarn},
		{"algorithms differ between Master and Workers", image, with("NCCL_ALGO", "Ring"), with("NCCL_ALGO", "Tree"), verdict.RuleNCCLSettingsDiffer, verdict.SeverityWarn},
		{"the same algorithm everywhere", image, with("NCCL_ALGO", "Ring"), with("NCCL_ALGO", "Ring"), verdict.RuleNCCLSettingsDiffer, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := pastedJob(tc.image, tc.master, tc.worker) + "---\n" + string(nodes)
			var out, errb strings.Builder
			code := Run(t.Context(), Streams{In: strings.NewReader(in), Out: &out, Err: &errb}, []string{"diagnose", "--offline", "-f", "-"})
			line := strings.ToUpper(string(tc.sev)) + "  " + tc.rule + "\n"
			switch tc.sev {
			case "":
				require.NotContains(t, out.String(), tc.rule, errb.String())
				require.Equal(t, verdict.ExitPass, code, "%s%s", out.String(), errb.String())
			case verdict.SeverityFail:
				require.Contains(t, out.String(), line, errb.String())
				require.Equal(t, verdict.ExitFail, code, out.String())
			default:
				require.Contains(t, out.String(), line, errb.String())
				require.Equal(t, verdict.ExitPass, code, "%s%s", out.String(), errb.String())
			}
			require.Contains(t, out.String(), "PyTorchJob ml/pasted")
		})
	}
}
