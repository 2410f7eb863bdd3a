package verdict

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxRuleIDLen bounds a rule ID, in bytes.
const MaxRuleIDLen = 64

// ValidRuleID reports whether id has the form of a rule ID: an upper-case
// letter, then up to 63 upper-case letters, digits or underscores
// (^[A-Z][A-Z0-9_]{0,63}$). Every registered rule has it; a rank report
// carrying anything else is refused.
func ValidRuleID(id string) bool {
	if len(id) == 0 || len(id) > MaxRuleIDLen || id[0] < 'A' || id[0] > 'Z' {
		return false
	}
	for i := 1; i < len(id); i++ {
		c := id[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// invisibleFormat lists the characters that reorder or hide text on a
// terminal: the bidirectional embeddings, overrides and isolates and the
// directional marks.
func invisibleFormat(r rune) bool {
	switch {
	case r >= 0x202A && r <= 0x202E, // LRE, RLE, PDF, LRO, RLO
		r >= 0x2066 && r <= 0x2069,            // LRI, RLI, FSI, PDI
		r == 0x200E, r == 0x200F, r == 0x061C: // LRM, RLM, ALM
		return true
	}
	return false
}

// CleanText makes a string a rank (or any other outside party) supplied
// safe to store and to show in one line: bytes that are not UTF-8 become
// U+FFFD, tabs, newlines and the line and paragraph separators become
// spaces, and every other control character (C0, DEL, C1) and every bidi
// override, isolate or mark is dropped. Printable text is unchanged.
func CleanText(s string) string {
	if cleanAlready(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteRune(utf8.RuneError)
		case r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f' || r == 0x2028 || r == 0x2029:
			b.WriteByte(' ')
		case unicode.IsControl(r) || invisibleFormat(r):
			// dropped
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// cleanAlready is CleanText's fast path: plain printable ASCII needs no
// copy.
func cleanAlready(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// CleanFinding cleans every string of f with CleanText (the rule ID too:
// callers that accept outside input check it with ValidRuleID first).
func CleanFinding(f *Finding) {
	f.Rule = CleanText(f.Rule)
	f.Severity = Severity(CleanText(string(f.Severity)))
	f.Message = CleanText(f.Message)
	f.Remediation = CleanText(f.Remediation)
	cleanAll(f.Devices)
	cleanAll(f.Nodes)
	cleanAll(f.Pods)
}

// Clean cleans every string of the report with CleanText.
func (r *Report) Clean() {
	r.Subject = CleanText(r.Subject)
	r.Mode = CleanText(r.Mode)
	for i := range r.Findings {
		CleanFinding(&r.Findings[i])
	}
	for i := range r.Devices {
		d := &r.Devices[i]
		d.ID, d.Kind, d.GPUUUID = CleanText(d.ID), CleanText(d.Kind), CleanText(d.GPUUUID)
		d.Profile, d.FabricCluster = CleanText(d.Profile), CleanText(d.FabricCluster)
	}
}

func cleanAll(xs []string) {
	for i := range xs {
		xs[i] = CleanText(xs[i])
	}
}

// EscapeText makes s safe to print on a terminal: every character that is
// not printable (controls, including tabs and newlines, bidi overrides and
// other invisible format characters) and every byte that is not UTF-8 is
// written as a Go escape (\x1b, \u202e), so that a stored string can
// neither move the cursor, retitle the window, clear the screen nor
// reorder what follows it.
func EscapeText(s string) string {
	if cleanAlready(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteString(hex2(s[i]))
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRuneToASCII(r) // 'x', '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&0xf]})
}
