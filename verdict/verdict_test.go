package verdict

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestNewReportOrdersAndWeighs(t *testing.T) {
	r := NewReport("node", []Finding{
		{Rule: RuleGangMIGSharedGPU, Severity: SeverityInfo},
		{Rule: RuleProfileUnknown, Severity: SeverityWarn},
		{Rule: RuleNoDevices, Severity: SeverityFail},
		{Rule: RuleDeviceNotFound, Severity: SeverityFail},
	})
	require.Equal(t, VerdictFail, r.Verdict)
	require.Equal(t, []string{RuleDeviceNotFound, RuleNoDevices, RuleProfileUnknown, RuleGangMIGSharedGPU}, r.RuleIDs())
	require.Equal(t, ExitFail, r.ExitCode())

	w := NewReport("", []Finding{{Rule: RuleProfileUnknown, Severity: SeverityWarn}})
	require.Equal(t, VerdictWarn, w.Verdict)
	require.Equal(t, ExitPass, w.ExitCode())
	require.NotNil(t, NewReport("", nil).Findings, "findings encode as [] not null")
}

func TestTruncateNeverSplitsARune(t *testing.T) {
	s := strings.Repeat("é", 3000) // 2 bytes each
	for _, limit := range []int{1, 2, 3, 4, 5, 6, 7, 100, 4095, 4096} {
		got := Truncate(s, limit)
		require.LessOrEqual(t, len(got), limit, "limit %d", limit)
		require.True(t, utf8.ValidString(got), "limit %d cut inside a character", limit)
	}
	require.Equal(t, "abc", Truncate("abc", 0))
	require.Equal(t, "abc", Truncate("abc", 3))
	require.Equal(t, "a...", Truncate("abcdef", 4))
	require.Equal(t, "日...", Truncate("日本語", 7), "the second character does not fit whole")
}

func TestReasonListsFailuresWithFixes(t *testing.T) {
	r := NewReport("", []Finding{
		{Rule: RuleNoDevices, Severity: SeverityFail, Message: "no GPU", Remediation: "request one"},
		{Rule: RuleProfileUnknown, Severity: SeverityWarn, Message: "?"},
	})
	require.Equal(t, "NO_DEVICES: no GPU Fix: request one", r.Reason(0))
	require.Equal(t, "verdict pass", NewReport("", nil).Reason(0))
	require.Len(t, r.Reason(10), 10)
}

type inputErr struct{}

func (inputErr) Error() string { return "bad file" }
func (inputErr) ExitCode() int { return ExitUsage }

func TestCodeIsTheOneClassifier(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, ExitPass},
		{Exitf(ExitFail, "x"), ExitFail},
		{Silent(ExitTimeout), ExitTimeout},
		{fmt.Errorf("loading: %w", inputErr{}), ExitUsage},
		{fmt.Errorf("outer: %w", Exitf(ExitUsage, "inner: %w", context.DeadlineExceeded)), ExitUsage},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), ExitTimeout},
		{errors.New("connection refused"), ExitEnvironment},
	} {
		require.Equal(t, tc.want, Code(tc.err), "%v", tc.err)
	}
	require.Empty(t, Message(Silent(1)))
	require.Equal(t, "x", Message(Exitf(1, "x")))
	require.Nil(t, WithCode(2, nil))

	// A quiet error keeps its code; its message was already printed.
	q := Quiet(fmt.Errorf("discovery: %w", Exitf(ExitTimeout, "hung")))
	require.Equal(t, ExitTimeout, Code(q))
	require.Empty(t, Message(q))
	require.Nil(t, Quiet(nil))
}

func TestExitForLaunchRules(t *testing.T) {
	require.Equal(t, ExitTimeout, ExitFor(RuleNCCLInitTimeout))
	require.Equal(t, ExitTimeout, ExitFor(RuleHostUnreachable))
	require.Equal(t, ExitUsage, ExitFor(RuleHostfileInvalid))
	require.Equal(t, ExitFail, ExitFor(RuleNprocExceedsDevices))
	require.Equal(t, ExitFail, ExitFor("NOT_A_RULE"))
}

func TestWriteTerminationLogBounded(t *testing.T) {
	p := filepath.Join(t.TempDir(), "termination-log")
	require.NoError(t, WriteTerminationLog(p, strings.Repeat("ü", 5000)))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), TerminationMax)
	require.True(t, utf8.Valid(b))
	require.NoError(t, WriteTerminationLog("", "ignored"))
	require.Error(t, WriteTerminationLog(filepath.Join(p, "not-a-dir", "x"), "y"))
}

func TestRegistry(t *testing.T) {
	all := Rules()
	require.NotEmpty(t, all)
	for _, r := range all {
		require.Regexp(t, `^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$`, r.ID)
		require.NotEmpty(t, r.Faces, r.ID)
		require.NotEmpty(t, r.Summary, r.ID)
		require.Contains(t, []Severity{SeverityInfo, SeverityWarn, SeverityFail}, r.Severity, r.ID)
		if r.Severity != SeverityInfo {
			require.NotEmpty(t, r.Remediation, "%s: a warn or fail rule needs a default fix", r.ID)
		}
	}
	require.True(t, Registered(NVMLRule(ClassCallHung)))
	require.False(t, Registered("NOT_A_RULE"))
	rep := NewReport("", []Finding{{Rule: "NOT_A_RULE", Severity: SeverityFail}, {Rule: RuleNoDevices, Severity: SeverityFail}})
	require.Equal(t, []string{"NOT_A_RULE"}, rep.Unregistered())
	require.Error(t, CheckRegistered(rep))
}

func TestWriteText(t *testing.T) {
	var b strings.Builder
	r := NewReport("node-a", []Finding{{Rule: RuleNoDevices, Severity: SeverityFail, Message: "no GPU", Remediation: "request one"}})
	r.Devices = []DeviceSummary{{ID: "GPU-1", Kind: "gpu", Profile: ""}}
	require.NoError(t, Write(&b, r, FormatText))
	require.Equal(t, "verdict: FAIL  node-a\n\nDEVICE  KIND  GPU  PROFILE  SMS  MEMORY\nGPU-1   gpu   0    ?        ?    ?\n\nFAIL  NO_DEVICES\n      no GPU\n      fix: request one\n", b.String())
	b.Reset()
	require.NoError(t, Write(&b, NewReport("", nil), FormatJSON))
	require.JSONEq(t, `{"apiVersion":"rankgate.io/v1","kind":"Report","verdict":"pass","findings":[]}`, b.String())
}
