package app

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

var update = flag.Bool("update", false, "rewrite golden files")

// run executes a command line in-process and returns exit code and output.
func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	clear := []string{"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "POD_NAME", "POD_NAMESPACE", "KUBECONFIG"}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "RANKGATE_") {
			clear = append(clear, kv[:strings.IndexByte(kv, '=')])
		}
	}
	for _, k := range clear {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	var out, errb bytes.Buffer
	code := Run(context.Background(), Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, args)
	return code, out.String(), errb.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(p, []byte(got), 0o644))
	}
	want, err := os.ReadFile(p)
	require.NoError(t, err, "run go test ./cmd/rankgate/app -update to create %s", p)
	require.Equal(t, string(want), got)
}

// decodeReportList decodes a ReportList document (offline diagnose, demo)
// and returns its reports.
func decodeReportList(t *testing.T, s string) []verdict.Report {
	t.Helper()
	var l struct {
		APIVersion string           `json:"apiVersion"`
		Kind       string           `json:"kind"`
		Items      []verdict.Report `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(s), &l), s)
	require.Equal(t, verdict.APIVersion, l.APIVersion)
	require.Equal(t, verdict.KindReportList, l.Kind)
	return l.Items
}

func decodeReport(t *testing.T, s string) verdict.Report {
	t.Helper()
	var r verdict.Report
	require.NoError(t, json.Unmarshal([]byte(s), &r), s)
	return r
}

func TestDemo(t *testing.T) {
	code, out, stderr := run(t, nil, "demo")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "verdict: FAIL")
	require.Contains(t, out, "MIG_SPANS_GPUS")
	require.Contains(t, out, "verdict: PASS")
	golden(t, "demo.golden", out)
}

func TestPreflightSampleJSON(t *testing.T) {
	code, out, _ := run(t, nil, "preflight", "--sample", "h100-mig", "--devices", "0:0,1:0", "-o", "json")
	require.Equal(t, verdict.ExitFail, code)
	r := decodeReport(t, out)
	require.Equal(t, verdict.VerdictFail, r.Verdict)
	require.ElementsMatch(t, []string{"MIG_SPANS_GPUS", "MIG_MULTIPLE_PER_PROCESS"}, r.RuleIDs())
	require.Len(t, r.Devices, 2)

	code, out, _ = run(t, nil, "preflight", "--sample", "h100-mig", "--devices", "1:1", "--expect-profile", "3g.40gb", "-o", "json")
	require.Equal(t, 0, code)
	require.Equal(t, verdict.VerdictPass, decodeReport(t, out).Verdict)
}

func TestPreflightDevicesFromEnv(t *testing.T) {
	code, out, _ := run(t, map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}, "preflight", "--sample", "h100-mig", "-o", "json")
	require.Equal(t, verdict.ExitFail, code) // all six MIG devices of two GPUs
	r := decodeReport(t, out)
	require.Contains(t, r.RuleIDs(), "MIG_SPANS_GPUS")
	require.Contains(t, r.Subject, "NVIDIA_VISIBLE_DEVICES")

	code, out, _ = run(t, map[string]string{"CUDA_VISIBLE_DEVICES": "0"}, "preflight", "--sample", "a100-full", "-o", "json")
	require.Equal(t, 0, code, out)

	code, out, _ = run(t, map[string]string{"NVIDIA_VISIBLE_DEVICES": "void"}, "preflight", "--sample", "a100-full", "-o", "json")
	require.Equal(t, verdict.ExitFail, code)
	require.Equal(t, []string{"NO_DEVICES"}, decodeReport(t, out).RuleIDs())
}

func TestTerminationLog(t *testing.T) {
	p := filepath.Join(t.TempDir(), "termination-log")
	code, _, _ := run(t, nil, "preflight", "--sample", "h100-mig", "--devices", "0:0,0:1", "--termination-log", p)
	require.Equal(t, verdict.ExitFail, code)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Contains(t, string(b), "MIG_MULTIPLE_PER_PROCESS")
	require.LessOrEqual(t, len(b), 4096)
}

func TestInspectRoundTrip(t *testing.T) {
	code, out, _ := run(t, nil, "inspect", "--sample", "a100-full", "-o", "json")
	require.Equal(t, 0, code)
	inv, err := topology.DecodeSnapshot("out", []byte(out))
	require.NoError(t, err)
	require.Len(t, inv.GPUs, 8)
	require.Len(t, inv.Links, 28)

	p := filepath.Join(t.TempDir(), "node.json")
	require.NoError(t, os.WriteFile(p, []byte(out), 0o644))
	code, out2, _ := run(t, nil, "preflight", "--inventory", p, "--devices", "0,1,2,3", "--require-p2p", "-o", "json")
	require.Equal(t, 0, code, out2)

	code, text, _ := run(t, nil, "inspect", "--sample", "h100-mig")
	require.Equal(t, 0, code)
	require.Contains(t, text, "3g.40gb")
	require.Contains(t, text, "NV18")
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "junk.txt")
	require.NoError(t, os.WriteFile(bad, []byte("hello\nthis is not nvidia-smi\n"), 0o644))
	badJSON := filepath.Join(dir, "node.json")
	require.NoError(t, os.WriteFile(badJSON, []byte("{\n  \"version\": \"rankgate.io/v1\",\n  \"gpus\": [ }\n"), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"not nvidia-smi", []string{"preflight", "--inventory", bad}, "junk.txt"},
		{"broken snapshot", []string{"inspect", "--inventory", badJSON}, "node.json:3"},
		{"missing file", []string{"preflight", "--inventory", filepath.Join(dir, "nope")}, "nope"},
		{"bad devices", []string{"preflight", "--sample", "a100-full", "--devices", "zero"}, "--devices"},
		{"unknown sample", []string{"preflight", "--sample", "x"}, "unknown sample"},
		{"both sources", []string{"preflight", "--sample", "a100-full", "--inventory", bad}, "exclude"},
		{"bad output", []string{"preflight", "--sample", "a100-full", "-o", "xml"}, `output format "xml": want text, json or yaml`},
		{"unknown flag", []string{"preflight", "--nope"}, "unknown flag"},
		{"bad duration", []string{"preflight", "--sample", "a100-full", "--nvml-timeout", "soon"}, "nvml-timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, nil, tc.args...)
			require.Equal(t, verdict.ExitUsage, code)
			require.Contains(t, stderr, tc.want)
		})
	}
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rankgate.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("version: rankgate.io/v1\nexpect-profile: 2g.20gb\ndevices: \"0:0\"\n"), 0o644))
	args := []string{"preflight", "--config", cfg, "--sample", "h100-mig", "-o", "json"}

	// File alone: 0:0 is a 3g.40gb, the file expects 2g.20gb.
	code, out, _ := run(t, nil, args...)
	require.Equal(t, verdict.ExitFail, code)
	require.Equal(t, []string{"PROFILE_MISMATCH"}, decodeReport(t, out).RuleIDs())

	// Environment beats the file.
	code, _, _ = run(t, map[string]string{"RANKGATE_EXPECT_PROFILE": "3g.40gb"}, args...)
	require.Equal(t, 0, code)

	// A flag beats the environment.
	code, _, _ = run(t, map[string]string{"RANKGATE_EXPECT_PROFILE": "3g.40gb"}, append(args, "--expect-profile", "1g.10gb")...)
	require.Equal(t, verdict.ExitFail, code)

	// The config file can come from RANKGATE_CONFIG.
	code, _, _ = run(t, map[string]string{"RANKGATE_CONFIG": cfg}, "preflight", "--sample", "h100-mig")
	require.Equal(t, verdict.ExitFail, code)
}

func TestConfigFileStrict(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown key": "version: rankgate.io/v1\nexpect-profil: 2g.20gb\n",
		"no version":  "expect-profile: 2g.20gb\n",
		"not yaml":    "version: [\n",
		"bad level":   "version: rankgate.io/v1\nlog-level: loud\n",
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
			require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
			code, _, stderr := run(t, nil, "preflight", "--config", p, "--sample", "a100-full")
			require.Equal(t, verdict.ExitUsage, code, stderr)
		})
	}
	p := filepath.Join(dir, "ok.yaml")
	require.NoError(t, os.WriteFile(p, configExample, 0o644))
	code, _, stderr := run(t, nil, "preflight", "--config", p, "--sample", "a100-full", "--devices", "0")
	require.Equal(t, 0, code, stderr)
}

// Without a driver on this machine, live discovery must fail cleanly with
// an NVML_* rule and exit 3, never hang or panic.
func TestPreflightWithoutDriver(t *testing.T) {
	for _, dir := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"} {
		if _, err := os.Stat(filepath.Join(dir, "libnvidia-ml.so.1")); err == nil {
			t.Skip("an NVIDIA driver is installed here")
		}
	}
	code, out, _ := run(t, nil, "preflight", "-o", "json")
	require.Equal(t, verdict.ExitEnvironment, code)
	r := decodeReport(t, out)
	require.Equal(t, verdict.VerdictFail, r.Verdict)
	require.Equal(t, "NVML_LIBRARY_NOT_FOUND", r.Findings[0].Rule)
	require.NotContains(t, r.Findings[0].Message, "NVML_LIBRARY_NOT_FOUND", "the rule ID is its own field, not repeated in the message")
	// Off a GPU node, the fix names the ways to judge a node from outputs.
	require.Contains(t, r.Findings[0].Remediation, "--inventory")
	require.Contains(t, r.Findings[0].Remediation, "--sample")
}

// A list flag's values are taken as given: a file name may hold a comma.
// From the environment, a list is comma-separated.
func TestInventoryListSources(t *testing.T) {
	data, err := os.ReadFile("../../../configs/samples/a100-full.json")
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "node,a100.json")
	require.NoError(t, os.WriteFile(p, data, 0o644))
	code, _, stderr := run(t, nil, "preflight", "--inventory", p, "--devices", "0")
	require.Equal(t, 0, code, stderr)

	smi := "../../../testdata/fixtures/nvidia-smi/"
	code, out, stderr := run(t, map[string]string{"RANKGATE_INVENTORY": smi + "01_smi-L_h100-80gb-hbm3_mig-mixed_590.48.01.txt," + smi + "03_smi-table_h100-80gb-hbm3_mig-mixed_590.48.01.txt"},
		"inspect", "-o", "json")
	require.Equal(t, 0, code, stderr)
	inv, err := topology.DecodeSnapshot("out", []byte(out))
	require.NoError(t, err)
	require.Equal(t, 60, inv.GPUs[0].MIGDevices[0].SMs) // SMs come from the table, UUIDs from -L
	require.NotEmpty(t, inv.GPUs[0].MIGDevices[0].UUID)
}
