//go:build linux && !rankgate_node

package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/integrations/kubeflow/kubeflowtest"
	"github.com/rankgate/rankgate/integrations/kubernetes/cluster/clustertest"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate/gatetest"
	"github.com/rankgate/rankgate/topology/nvmlsource/nvmltest"
	"github.com/rankgate/rankgate/verdict"
)

// oneJSON decodes s as exactly one JSON value followed by nothing but
// white space, as json.load and jq take a whole stdout.
func oneJSON(t *testing.T, s string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	var v any
	require.NoError(t, dec.Decode(&v), "stdout is not JSON:\n%s", s)
	_, err := dec.Token()
	require.ErrorIs(t, err, io.EOF, "stdout holds more than one JSON document:\n%s", s)
	return v
}

// oneYAML decodes s as exactly one YAML document and returns it as JSON
// would decode it.
func oneYAML(t *testing.T, s string) any {
	t.Helper()
	require.NotRegexp(t, `(?m)^(---|\.\.\.)\s*$`, s, "stdout holds more than one YAML document")
	j, err := yaml.YAMLToJSON([]byte(s))
	require.NoError(t, err, "stdout is not YAML:\n%s", s)
	return oneJSON(t, string(j))
}

// passingGate is a gate that decides pass for ml/PyTorchJob/train once
// asked, and the pod identity init needs to reach it.
func passingGate(t *testing.T) (args []string, env map[string]string) {
	t.Helper()
	dir := t.TempDir()
	certs, err := gatetest.WriteCerts(dir, "127.0.0.1")
	require.NoError(t, err)
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte("rank-token"), 0o600))
	pass := verdict.NewReport("ml/PyTorchJob/train", nil)
	at := time.Date(2026, 11, 30, 12, 0, 3, 0, time.UTC)
	g, err := gatetest.StartGate(certs, "rank-token", func(r gatetest.Request, _ time.Time) (*gate.Response, *gate.ErrorBody) {
		return &gate.Response{State: gate.StateDecided, Job: "ml/PyTorchJob/train", Rank: 0, Expected: 2, Reported: 2, Verdict: &pass, DecidedAt: &at}, nil
	})
	require.NoError(t, err)
	t.Cleanup(g.Close)
	return []string{"--gate-url", g.URL, "--ca-file", certs.CAFile, "--token-file", tok},
		map[string]string{"POD_NAME": "train-master-0", "POD_NAMESPACE": "ml"}
}

// Every face with -o json prints exactly one JSON document on stdout, and
// with -o yaml the same document as YAML; a usage error prints nothing on
// stdout. (demo printed two JSON documents before.)
func TestOneDocumentOnStdout(t *testing.T) {
	node := clustertest.MakeNode("a100-1").Labels(map[string]string{
		"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "1", "nvidia.com/mig.strategy": "mixed",
		"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "success",
	}).Allocatable("nvidia.com/mig-1g.10gb", "7").Obj()
	job := kubeflowtest.MakePyTorchJob("llm", "ml").Master().Workers(3).Request("nvidia.com/mig-2g.20gb", "1").Obj()
	busy := clustertest.MakePod("busy", "research").Request("nvidia.com/mig-1g.10gb", "1").Node("a100-1").Obj()
	l, _ := fakeLive(t, []runtime.Object{node, job, busy}...)
	useLive(t, l)
	gateArgs, pod := passingGate(t)
	initArgs := append([]string{"init", "--timeout", "20s"}, gateArgs...)

	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
		// nvmlInitFails: NVML's init fails with the driver not loaded.
		nvmlInitFails bool
	}{
		{"preflight pass", nil, []string{"preflight", "--sample", "h100-mig", "--devices", "0:0"}, 0, false},
		{"preflight fail", nil, []string{"preflight", "--sample", "h100-mig", "--devices", "0:0,1:0"}, verdict.ExitFail, false},
		{"preflight, NVML fails", nil, []string{"preflight", "--devices", "0"}, verdict.ExitEnvironment, true},
		{"inspect", nil, []string{"inspect", "--sample", "a100-full"}, 0, false},
		{"demo", nil, []string{"demo"}, 0, false},
		{"diagnose offline", nil, []string{"diagnose", "--offline", "-f", filepath.Join(scenarioDir, "03-shape-mismatch.yaml")}, verdict.ExitFail, false},
		{"diagnose job", nil, []string{"diagnose", "job", "ml/llm"}, verdict.ExitFail, false},
		{"diagnose pod bound", nil, []string{"diagnose", "pod", "research/busy"}, 0, false},
		{"init gang pass", pod, append(initArgs, "--sample", "a100-full", "--devices", "0"), 0, false},
		{"init rank fails", pod, append(initArgs, "--sample", "h100-mig", "--devices", "0:0,1:0"), verdict.ExitFail, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.nvmlInitFails {
				s := nvmltest.NewServer(t, nvmltest.DGXA100)
				s.Fault("Init", nvml.ERROR_DRIVER_NOT_LOADED)
				nvmlLibrary = s.Interface()
				t.Cleanup(func() { nvmlLibrary = nil })
			}
			code, out, stderr := run(t, tc.env, append(tc.args, "-o", "json")...)
			require.Equal(t, tc.code, code, "stderr:\n%s", stderr)
			doc := oneJSON(t, out)
			m, ok := doc.(map[string]any)
			require.True(t, ok, "one object, not a bare list:\n%s", out)
			require.NotEmpty(t, m["apiVersion"], "every document names its apiVersion")
			require.NotEmpty(t, m["kind"], "every document names its kind")

			code, out, stderr = run(t, tc.env, append(tc.args, "-o", "yaml")...)
			require.Equal(t, tc.code, code, "stderr:\n%s", stderr)
			require.Equal(t, doc, oneYAML(t, out), "-o yaml is not -o json's document")
		})
	}

	// demo: one list of both reports, the failing one first.
	_, out, _ := run(t, nil, "demo", "-o", "json")
	rs := decodeReportList(t, out)
	require.Len(t, rs, 2)
	require.Equal(t, []verdict.Verdict{verdict.VerdictFail, verdict.VerdictPass}, []verdict.Verdict{rs[0].Verdict, rs[1].Verdict})

	// Errors without a report: nothing on stdout, the reason on stderr.
	for _, args := range [][]string{
		{"preflight", "--sample", "a100-full", "--devices", "zero", "-o", "json"},
		{"diagnose", "--offline", "-o", "yaml"},
		{"init", "-o", "json"},
		{"inspect", "--sample", "nope", "-o", "yaml"},
	} {
		code, out, stderr := run(t, pod, args...)
		require.Equal(t, verdict.ExitUsage, code, "%v: %s", args, stderr)
		require.Empty(t, out, args)
		require.Contains(t, stderr, "rankgate: ", args)
	}
}

// -o takes text, json or yaml on every face, from the flag or the
// environment; anything else is a usage error naming the three.
func TestOutputFormatChecked(t *testing.T) {
	for _, args := range [][]string{
		{"preflight", "--sample", "a100-full", "-o", "xml"},
		{"inspect", "-o", "JSON"},
		{"demo", "-o", "wide"},
		{"diagnose", "--offline", "-f", "x", "-o", "table"},
		{"init", "-o", "yml"},
		{"launch", "-o", "xml", "--", "true"},
	} {
		code, out, stderr := run(t, nil, args...)
		require.Equal(t, verdict.ExitUsage, code, "%v: %s", args, stderr)
		require.Empty(t, out)
		require.Contains(t, stderr, `want text, json or yaml`, args)
	}
	code, _, stderr := run(t, map[string]string{"RANKGATE_OUTPUT": "xml"}, "demo")
	require.Equal(t, verdict.ExitUsage, code, stderr)
	require.Contains(t, stderr, `output format "xml": want text, json or yaml`)
	code, out, _ := run(t, map[string]string{"RANKGATE_OUTPUT": "yaml"}, "demo")
	require.Equal(t, 0, code)
	doc, ok := oneYAML(t, out).(map[string]any)
	require.True(t, ok, out)
	require.Equal(t, verdict.KindReportList, doc["kind"])
	require.Len(t, doc["items"], 2)
}

// launch: stdout is CMD's alone; --report-file receives one document
// about the launch (JSON, YAML with -o yaml), also when rankgate stops it
// before CMD, and through a descriptor the caller opened.
func TestLaunchReportFile(t *testing.T) {
	dir := t.TempDir()
	cmd := []string{"--", "sh", "-c", `echo '{"not": "the report"}'; printf 'cmd-%s\n' err >&2`}

	p := filepath.Join(dir, "launch.json")
	code, out, stderr := run(t, nil, append([]string{"launch", "--sample", "a100-full", "--devices", "0", "-o", "json", "--report-file", p}, cmd...)...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "{\"not\": \"the report\"}\n", out, "stdout is CMD's")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	oneJSON(t, string(b))
	var rep launchReport
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Equal(t, "LaunchReport", rep.Kind)
	require.Equal(t, "rankgate.io/v1", rep.APIVersion)
	require.Equal(t, []string{"sh", "-c", `echo '{"not": "the report"}'; printf 'cmd-%s\n' err >&2`}, rep.Command)
	require.True(t, rep.Started)
	require.Equal(t, 0, rep.ExitCode)
	require.NotNil(t, rep.Preflight)
	require.Equal(t, verdict.VerdictPass, rep.Preflight.Verdict)
	require.NotContains(t, string(b), "cmd-err")
	leftovers, err := filepath.Glob(filepath.Join(dir, ".launch.json.tmp-*"))
	require.NoError(t, err)
	require.Empty(t, leftovers, "the temporary file is renamed")

	// The preflight fails: CMD never starts, the report says why.
	py := filepath.Join(dir, "launch.yaml")
	code, out, _ = run(t, nil, append([]string{"launch", "--sample", "h100-mig", "--devices", "0:0,1:0", "-o", "yaml", "--report-file", py}, cmd...)...)
	require.Equal(t, verdict.ExitFail, code)
	require.Empty(t, out)
	b, err = os.ReadFile(py)
	require.NoError(t, err)
	doc := oneYAML(t, string(b)).(map[string]any)
	require.Equal(t, "LaunchReport", doc["kind"])
	require.EqualValues(t, verdict.ExitFail, doc["exitCode"])
	require.Equal(t, false, doc["started"])
	require.Contains(t, doc["reason"], "MIG_SPANS_GPUS")
	require.Equal(t, "fail", doc["preflight"].(map[string]any)["verdict"])

	// CMD's own exit code, through a descriptor (as with 3>file).
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	code, _, stderr = run(t, nil, "launch", "--no-preflight", "--report-file", "/dev/fd/"+strconv.Itoa(int(w.Fd())), "--", "sh", "-c", "exit 7")
	require.NoError(t, w.Close())
	require.Equal(t, 7, code, stderr)
	var buf bytes.Buffer
	_, err = io.Copy(&buf, r)
	require.NoError(t, err)
	rep = launchReport{}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rep), buf.String())
	require.Equal(t, 7, rep.ExitCode)
	require.Empty(t, rep.Reason)
	require.Nil(t, rep.Preflight)

	// The gang fails: the gate's verdict is in the report.
	certs, err := gatetest.WriteCerts(dir, "127.0.0.1")
	require.NoError(t, err)
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte("launcher-token"), 0o600))
	fail := verdict.NewReport("ml/MPIJob/mpi", []verdict.Finding{{Rule: verdict.RuleGangMIGSpansGPUs, Severity: verdict.SeverityFail, Message: "ranks 0 and 1 sit on MIG instances of two GPUs"}})
	g, err := gatetest.StartGate(certs, "launcher-token", func(gatetest.Request, time.Time) (*gate.Response, *gate.ErrorBody) {
		return &gate.Response{State: gate.StateDecided, Job: "ml/MPIJob/mpi", Rank: -1, Expected: 2, Reported: 2, Verdict: &fail, Action: "suspend"}, nil
	})
	require.NoError(t, err)
	defer g.Close()
	pg := filepath.Join(dir, "gang.json")
	code, out, stderr = run(t, map[string]string{"POD_NAME": "mpi-launcher", "POD_NAMESPACE": "ml"}, "launch", "--gang", "--gate-url", g.URL, "--ca-file", certs.CAFile,
		"--token-file", tok, "--no-preflight", "--report-file", pg, "--", "echo", "never")
	require.Equal(t, verdict.ExitFail, code, stderr)
	require.Empty(t, out)
	b, err = os.ReadFile(pg)
	require.NoError(t, err)
	rep = launchReport{}
	require.NoError(t, json.Unmarshal(b, &rep))
	require.False(t, rep.Started)
	require.Equal(t, verdict.ExitFail, rep.ExitCode)
	require.Contains(t, rep.Reason, "gang verdict fail for ml/MPIJob/mpi (job action: suspend)")
	require.NotNil(t, rep.Gang)
	require.Equal(t, "ml/MPIJob/mpi", rep.Gang.Job)
	require.Equal(t, "suspend", rep.Gang.Action)
	require.Equal(t, []string{verdict.RuleGangMIGSpansGPUs}, rep.Gang.Verdict.RuleIDs())

	// "-" would mix the report into CMD's stdout.
	code, _, stderr = run(t, nil, "launch", "--no-preflight", "--report-file", "-", "--", "true")
	require.Equal(t, verdict.ExitUsage, code)
	require.Contains(t, stderr, "stdout is CMD's")

	// A report file that cannot be written is told; the exit code stands.
	code, _, stderr = run(t, nil, "launch", "--no-preflight", "--report-file", filepath.Join(dir, "missing", "r.json"), "--", "true")
	require.Equal(t, 0, code)
	require.Contains(t, stderr, "cannot write --report-file")
	_, err = os.Stat(filepath.Join(dir, "missing"))
	require.True(t, errors.Is(err, os.ErrNotExist))
}
