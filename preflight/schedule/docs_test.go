package schedule

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Rule IDs are public: the rules reference (docs/rules.md) must list every
// one in its table, and the diagnose guide (docs/diagnose.md) must show it
// with an example heading.
func TestRulesDocumented(t *testing.T) {
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
		require.NoError(t, err)
		return string(data)
	}
	rules, guide := read("rules.md"), read("diagnose.md")
	for _, r := range Rules {
		require.Truef(t, strings.Contains(rules, "| `"+r+"` |"), "rule table row for %s in docs/rules.md", r)
		found := false
		for _, line := range strings.Split(guide, "\n") {
			if strings.HasPrefix(line, "### ") && strings.Contains(line, r) {
				found = true
			}
		}
		require.True(t, found, "example heading for %s in docs/diagnose.md", r)
	}
}
