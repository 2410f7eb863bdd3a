package decision

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/verdict"
)

// failedGang is the verdict of a 5000-rank gang where every rank failed its
// own preflight, half of them on MIG devices spread over GPUs beside full
// GPUs: one finding per rank and gang findings listing thousands of ranks.
func failedGang(n int) verdict.Report {
	var ranks []preflight.RankReport
	for i := 0; i < n; i++ {
		node := fmt.Sprintf("gpu-node-us-east-1a-p5-48xlarge-%04d", i/8)
		pod := fmt.Sprintf("llama-70b-pretraining-run-42-worker-%d", i)
		dev := verdict.DeviceSummary{ID: fmt.Sprintf("GPU-%08d-1111-2222-3333-%012d", i, i), Kind: "gpu", GPU: i % 8, GPUUUID: fmt.Sprintf("GPU-%08d-1111-2222-3333-%012d", i, i), Profile: "full", SMs: 132}
		if i%2 == 1 {
			dev = verdict.DeviceSummary{ID: fmt.Sprintf("MIG-%08d-1111-2222-3333-%012d", i, i), Kind: "mig", GPUUUID: fmt.Sprintf("GPU-%08d-1111-2222-3333-%012d", i/2, i), Profile: "3g.40gb", SMs: 60}
		}
		f := []verdict.Finding{
			{Rule: verdict.RuleDriverKnownBad, Severity: verdict.SeverityFail, Message: "driver 575.51.03 is known bad on H100 with MIG: Xid 79 under NCCL all-reduce — fällt aus", Remediation: "upgrade the driver"},
			{Rule: verdict.RuleNVLinkDown, Severity: verdict.SeverityFail, Message: strings.Repeat("NVLink 3 of GPU 3 is down; ", 20)},
		}
		ranks = append(ranks, preflight.RankReport{Rank: i, Node: node, Pod: pod, DriverVersion: "575.51.03",
			Report: verdict.Report{Verdict: verdict.VerdictFail, Findings: f, Devices: []verdict.DeviceSummary{dev}}})
	}
	return preflight.GangRules(preflight.GangInput{Job: "ml/PyTorchJob/llama", Expected: n, Ranks: ranks})
}

// The verdict annotations fit the API server's 256 KiB limit on a job
// that already carries big annotations of its own, for a 5000-rank gang
// where every rank failed: the report keeps as many findings as fit and
// says how many it left out; reason and rules are whole.
func TestVerdictAnnotationsFitTheLimit(t *testing.T) {
	rep := failedGang(5000)
	require.Greater(t, len(rep.Findings), 5000)
	d := &Decision{Report: rep, DecidedAt: time.Now(), DecidedBy: "rankgate-controller-7d9f-abcde", Action: ActionSuspend}
	for _, own := range []int{0, 60 << 10, 200 << 10} {
		existing := map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", own), contract.AnnotationFirstReport: "2026-11-30T12:00:00Z"}
		ours := AnnotationsFor(d, existing)
		for k, v := range ours {
			existing[k] = v
		}
		require.LessOrEqual(t, annotationsSize(existing), annotationsLimit, "job annotations of %d bytes besides ours", own)
		require.LessOrEqual(t, len(ours[contract.AnnotationReport]), MaxReportLen)

		var got verdict.Report
		require.NoError(t, json.Unmarshal([]byte(ours[contract.AnnotationReport]), &got))
		require.Equal(t, verdict.VerdictFail, got.Verdict)
		m := regexp.MustCompile(`(\d+) of (\d+) findings left out`).FindStringSubmatch(got.Subject)
		require.NotNil(t, m, got.Subject)
		left, _ := strconv.Atoi(m[1])
		all, _ := strconv.Atoi(m[2])
		require.Equal(t, len(rep.Findings), all)
		require.Equal(t, all-left, len(got.Findings))
		require.Greater(t, len(got.Findings), 10, "the report keeps findings when there is room")
		require.Equal(t, rep.Findings[0].Rule, got.Findings[0].Rule, "fail findings first, in order")
		for _, f := range got.Findings {
			require.LessOrEqual(t, len(f.Ranks), trimmedListLen)
			require.True(t, utf8.ValidString(f.Message))
		}
		// Reason and rules name every failing rule.
		require.Equal(t, strings.Join(ruleSet(rep), ","), ours[contract.AnnotationRules])
		require.NotEmpty(t, ours[contract.AnnotationReason])
		require.True(t, utf8.ValidString(ours[contract.AnnotationReason]))
		// The record round-trips through the annotations.
		back, ok := FromJob(annotated(ours))
		require.True(t, ok)
		require.Equal(t, verdict.VerdictFail, back.Report.Verdict)
		require.Equal(t, len(got.Findings), len(back.Report.Findings))
	}
}

// One finding with thousands of names (not only a long message) is still
// bounded.
func TestCompactReportOneHugeFinding(t *testing.T) {
	var pods []string
	var ranks []int
	for i := 0; i < 5000; i++ {
		pods = append(pods, fmt.Sprintf("llama-70b-pretraining-run-42-worker-%d", i))
		ranks = append(ranks, i)
	}
	r := verdict.NewReport("ml/PyTorchJob/llama: 5000 of 5000 ranks reported", []verdict.Finding{{Rule: verdict.RuleGangProfileMismatch, Severity: verdict.SeverityFail,
		Message: "ranks use different MIG profiles", Ranks: ranks, Pods: pods}})
	for _, max := range []int{MaxReportLen, 8 << 10, 2 << 10} {
		s := CompactReport(r, max)
		require.LessOrEqual(t, len(s), max)
		var got verdict.Report
		require.NoError(t, json.Unmarshal([]byte(s), &got))
		require.Equal(t, verdict.VerdictFail, got.Verdict)
		require.Len(t, got.Findings, 1)
		require.Len(t, got.Findings[0].Pods, trimmedListLen)
		require.Contains(t, got.Subject, "0 of 1 findings left out")
	}
}

// Warnings are cut on a character boundary.
func TestSummaryUTF8(t *testing.T) {
	r := verdict.NewReport("", []verdict.Finding{{Rule: verdict.RuleGangDriverMismatch, Severity: verdict.SeverityWarn, Message: strings.Repeat("ü", 3000)}})
	s := Summary(r)
	require.LessOrEqual(t, len(s), MaxReasonLen)
	require.True(t, utf8.ValidString(s))
}

func ruleSet(r verdict.Report) []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range r.Findings {
		if f.Severity != verdict.SeverityInfo && !seen[f.Rule] {
			seen[f.Rule] = true
			out = append(out, f.Rule)
		}
	}
	return out
}

func annotated(a map[string]string) *kubeflowv1.PyTorchJob {
	return &kubeflowv1.PyTorchJob{ObjectMeta: metav1.ObjectMeta{Name: "pt", Namespace: "ml", Annotations: a}}
}
