package verdict

import (
	"bytes"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// hostile are strings a rank could put in its report to act on the
// terminal of whoever reads the Gang, the job's Events or rankgate status.
var hostile = []string{
	"\x1b]0;owned\x07",                  // window title
	"\x1b[2J\x1b[H",                     // clear screen, cursor home
	"ok\x1b[31mRED\x1b[0m",              // colours
	"evil\u202egnp.exe",                 // right-to-left override
	"a\u2066b\u2069c\u200e\u200f\u061c", // isolates and marks
	"line1\nline2\tcol\r\v\f",           // line breaks in one-line fields
	"\u009b31m\u0085\x7f\x9b",           // C1 CSI, NEL, DEL, a lone byte
	"bad\xffutf8\xc3",                   // not UTF-8
	"para\u2028graph\u2029",
}

func TestCleanText(t *testing.T) {
	for in, want := range map[string]string{
		"GPU 0 (MIG 1g.10gb) ok":       "GPU 0 (MIG 1g.10gb) ok",
		"Größe µ 日本":                   "Größe µ 日本",
		"\x1b]0;owned\x07":             "]0;owned",
		"ok\x1b[31mRED\x1b[0m":         "ok[31mRED[0m",
		"evil\u202egnp.exe":            "evilgnp.exe",
		"line1\nline2\tcol":            "line1 line2 col",
		"\u009bx\u0085\x7fy":           "xy",
		"bad\xffutf8":                  "bad\ufffdutf8",
		"a\u2066b\u2069c\u200e\u200fd": "abcd",
	} {
		require.Equal(t, want, CleanText(in), "CleanText(%q)", in)
	}
}

func TestEscapeText(t *testing.T) {
	for in, want := range map[string]string{
		"plain text 1g.10gb": "plain text 1g.10gb",
		"日本 µ":               "日本 µ",
		"\x1b]0;owned\x07":   `\x1b]0;owned\a`,
		"evil\u202egnp":      `evil\u202egnp`,
		"a\nb\tc":            `a\nb\tc`,
		"bad\xff":            `bad\xff`,
		"\x9b":               `\x9b`,
		"\u009b":             `\u009b`,
	} {
		require.Equal(t, want, EscapeText(in), "EscapeText(%q)", in)
	}
}

func TestValidRuleID(t *testing.T) {
	for _, r := range Rules() {
		require.True(t, ValidRuleID(r.ID), "registered rule %s must have the rule-ID form", r.ID)
	}
	for _, id := range []string{"A", "MIG_MIXED_PROFILES", "X" + strings.Repeat("9", 63)} {
		require.True(t, ValidRuleID(id), id)
	}
	for _, id := range []string{"", "a", "_X", "9X", "X-Y", "X Y", "X\x1b[2J", "X\u202e", "X" + strings.Repeat("9", 64), "ÄB"} {
		require.False(t, ValidRuleID(id), "%q", id)
	}
}

func TestReportClean(t *testing.T) {
	r := Report{Subject: "s\x1b[2J", Findings: []Finding{{Rule: "R", Severity: SeverityFail, Message: "m\u202e", Remediation: "f\n",
		Devices: []string{"d\x07"}, Nodes: []string{"n\x1b"}, Pods: []string{"p\u009b"}}},
		Devices: []DeviceSummary{{ID: "i\x00", Kind: "k\x1b", GPUUUID: "u\u2066", Profile: "p\x7f", FabricCluster: "c\r"}}}
	r.Clean()
	require.Equal(t, Report{Subject: "s[2J", Findings: []Finding{{Rule: "R", Severity: SeverityFail, Message: "m", Remediation: "f ",
		Devices: []string{"d"}, Nodes: []string{"n"}, Pods: []string{"p"}}},
		Devices: []DeviceSummary{{ID: "i", Kind: "k", GPUUUID: "u", Profile: "p", FabricCluster: "c "}}}, r)
}

// TestWriteTextEscapes: a finding that still holds raw controls (a report
// from an old controller, a snapshot file) reaches the terminal escaped.
func TestWriteTextEscapes(t *testing.T) {
	r := NewReport("job\x1b]0;t\x07", []Finding{{Rule: "R\x1b[2J", Severity: SeverityFail, Message: "m\u202eabc", Remediation: "fix\x1b[H"}})
	r.Devices = []DeviceSummary{{ID: "d\x1b[K", Kind: "mig", Profile: "1g\u2066"}}
	var b bytes.Buffer
	require.NoError(t, WriteText(&b, r))
	requireTerminalSafe(t, b.String(), true)
	require.Contains(t, b.String(), `m\u202eabc`)
}

// requireTerminalSafe fails when s holds a control character (newlines
// allowed when lines is set), DEL, a bidi control or bytes that are not
// UTF-8.
func requireTerminalSafe(t *testing.T, s string, lines bool) {
	t.Helper()
	require.True(t, utf8.ValidString(s), "not UTF-8: %q", s)
	for _, r := range s {
		if lines && r == '\n' {
			continue
		}
		require.False(t, unicode.IsControl(r) || invisibleFormat(r), "%U in %q", r, s)
	}
}

func FuzzCleanText(f *testing.F) {
	for _, s := range hostile {
		f.Add(s)
	}
	f.Add("NVML_TIMEOUT: GPU 3 did not answer. Fix: reset the GPU")
	f.Fuzz(func(t *testing.T, s string) {
		c := CleanText(s)
		requireTerminalSafe(t, c, false)
		require.Equal(t, c, CleanText(c), "CleanText is not idempotent on %q", s)
		require.LessOrEqual(t, utf8.RuneCountInString(c), utf8.RuneCountInString(s)+len(s), "grew")
		e := EscapeText(s)
		requireTerminalSafe(t, e, false)
		if cleanAlready(s) {
			require.Equal(t, s, c)
			require.Equal(t, s, e)
		}
	})
}
