package verdict

import (
	"fmt"
	"os"
	"unicode/utf8"
)

// TerminationMax is the kubelet's limit for a termination message, in bytes.
const TerminationMax = 4096

// Truncate shortens s to at most max bytes (max <= 0: no bound), ending in
// "..." when cut, and never cuts inside a UTF-8 character.
func Truncate(s string, max int) string {
	if max <= 0 || len(s) <= max {
		return s
	}
	const ellipsis = "..."
	if max <= len(ellipsis) {
		return ellipsis[:max]
	}
	cut := max - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// WriteTerminationLog writes reason to path (Kubernetes:
// /dev/termination-log), bounded to TerminationMax bytes. An empty path
// writes nothing.
func WriteTerminationLog(path, reason string) error {
	if path == "" {
		return nil
	}
	if err := os.WriteFile(path, []byte(Truncate(reason, TerminationMax)), 0o644); err != nil {
		return fmt.Errorf("writing termination log %s: %w", path, err)
	}
	return nil
}
