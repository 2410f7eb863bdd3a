package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
	"github.com/rankgate/rankgate/verdict"
)

// evil holds what a rank could write to act on an operator's terminal:
// a window title, a screen clear, colours, a right-to-left override, an
// isolate, a C1 CSI and line breaks.
const evil = "\x1b]0;owned\x07\x1b[2J\x1b[31m\u202egnp.exe\u2066\u0085\u009b1m\r\nforged: line"

// requireNoTerminalControls fails when s holds a control character (other
// than the newlines of multi-line output, when lines is set), a bidi
// override, isolate or mark, or bytes that are not UTF-8.
func requireNoTerminalControls(t *testing.T, what, s string, lines bool) {
	t.Helper()
	require.True(t, utf8.ValidString(s), "%s: not UTF-8: %q", what, s)
	for _, r := range s {
		if lines && r == '\n' {
			continue
		}
		bidi := r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069 || r == 0x200E || r == 0x200F || r == 0x061C
		require.False(t, unicode.IsControl(r) || bidi, "%s holds %U: %q", what, r, s)
	}
}

// postRankReport sends one report body with a short long-poll.
func postRankReport(t *testing.T, hc *http.Client, url, tok string, body []byte) (int, gate.ErrorBody) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+gate.PathReport+"?wait=1s", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := hc.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	var e gate.ErrorBody
	if res.StatusCode != http.StatusOK {
		require.NoError(t, json.Unmarshal(data, &e), string(data))
	}
	return res.StatusCode, e
}

// Rank reports are the one place outside parties write text that reaches
// operators: the controller (its own process, the shipped memory limit)
// refuses a rule ID that is not one, and stores every other string without
// control or bidi characters, so that the Gang (and its printer columns),
// the job's annotations, its Events and `rankgate status` hold none.
func TestE2ERankStringsReachNoTerminal(t *testing.T) {
	ns := newNamespace(t, "e2e-strings", true)
	job := pytorchJob(t, ns, "evil", false, 2, nil)
	p0 := rankPod(t, job, "worker", 0, "node-0", "")
	p1 := rankPod(t, job, "worker", 1, "node-1", "")
	tok0, tok1 := readToken(t, token(t, p0, gate.Audience)), readToken(t, token(t, p1, gate.Audience))
	g := startGateProcess(t)
	hc := gateHTTP(t)

	report := func(pod string, v verdict.Verdict, rule, text string) []byte {
		f := verdict.Finding{Rule: rule, Severity: verdict.SeverityFail, Message: "device lost " + text, Remediation: "reset " + text,
			Devices: []string{"GPU-" + text}, Nodes: []string{text}, Pods: []string{text}}
		if v != verdict.VerdictFail {
			f.Severity = verdict.SeverityWarn
		}
		r := gate.ReportRequest{APIVersion: gate.APIVersion, Namespace: ns, Pod: pod, Node: "node" + text, DriverVersion: "580" + text,
			CUDADriverVersion: "13.0" + text, Report: verdict.NewReport("rank "+text, []verdict.Finding{f})}
		r.Report.Devices = []verdict.DeviceSummary{{ID: "GPU-0" + text, Kind: "gpu", Profile: "full" + text, GPUUUID: "GPU-" + text}}
		b, err := json.Marshal(r)
		require.NoError(t, err)
		return b
	}

	// A rule ID that is not one: refused with 400 and the reason.
	require.Eventually(t, func() bool {
		code, e := postRankReport(t, hc, g.URL, tok0, report(p0.Name, verdict.VerdictFail, "X\x1b]0;owned\x07", ""))
		return code == http.StatusBadRequest && e.Code == gate.CodeBadRequest && strings.Contains(e.Message, "is not a rule ID")
	}, 30*time.Second, 200*time.Millisecond, "a malformed rule ID was not refused")

	// Both ranks report hostile text with valid rule IDs: the gang fails.
	code, e := postRankReport(t, hc, g.URL, tok0, report(p0.Name, verdict.VerdictFail, verdict.RuleDeviceNotFound, evil))
	require.Equal(t, http.StatusOK, code, "%+v", e)
	code, e = postRankReport(t, hc, g.URL, tok1, report(p1.Name, verdict.VerdictWarn, verdict.RuleMIGSpansGPUs, evil))
	require.Equal(t, http.StatusOK, code, "%+v", e)
	a := appliedVerdict(t, job)
	require.Equal(t, "fail", a[contract.AnnotationVerdict])
	require.Contains(t, a[contract.AnnotationReason], verdict.RuleDeviceNotFound, "the rank's rule")

	// The job's annotations, and the report they hold once decoded.
	for k, v := range a {
		requireNoTerminalControls(t, "annotation "+k, v, k == contract.AnnotationReason)
	}
	var rep verdict.Report
	require.NoError(t, json.Unmarshal([]byte(a[contract.AnnotationReport]), &rep))
	for _, f := range rep.Findings {
		for _, s := range append([]string{f.Rule, f.Message, f.Remediation}, append(f.Devices, append(f.Nodes, f.Pods...)...)...) {
			requireNoTerminalControls(t, "annotation "+contract.AnnotationReport, s, false)
		}
	}
	// The Gang, whole.
	gang := gangOf(t, job)
	require.NotNil(t, gang)
	raw, err := json.Marshal(gang.Status)
	require.NoError(t, err)
	var status map[string]any
	require.NoError(t, json.Unmarshal(raw, &status))
	walkStrings(status, func(s string) { requireNoTerminalControls(t, "Gang status", s, true) })
	require.NotEmpty(t, gang.Status.Ranks)
	require.Equal(t, []string{"GPU-0" + verdict.CleanText(evil)}, gang.Status.Ranks[0].Devices, "the rank's text, cleaned")
	// The job's Events.
	require.Eventually(t, func() bool { return len(jobEvents(t, job)) > 0 }, 10*time.Second, 100*time.Millisecond)
	for reason, msgs := range jobEvents(t, job) {
		for _, m := range msgs {
			requireNoTerminalControls(t, "Event "+reason, m, true)
		}
	}
	// rankgate status, as a table and in detail.
	for _, args := range [][]string{{"-o", "wide"}, {"pytorchjob/" + job.Name, "-o", "wide"}} {
		out, err := exec.Command(binary, append([]string{"status", "--kubeconfig", kubeconfigFile(t), "-n", ns}, args...)...).CombinedOutput()
		require.NoError(t, err, string(out))
		requireNoTerminalControls(t, fmt.Sprintf("rankgate status %v", args), string(out), true)
		require.Contains(t, string(out), "fail")
		if len(args) > 2 {
			require.Contains(t, string(out), "forged: line", "the detail shows the rank's devices")
		}
	}
}

// walkStrings calls f on every string in a decoded JSON value.
func walkStrings(v any, f func(string)) {
	switch x := v.(type) {
	case string:
		f(x)
	case []any:
		for _, e := range x {
			walkStrings(e, f)
		}
	case map[string]any:
		for _, e := range x {
			walkStrings(e, f)
		}
	}
}
