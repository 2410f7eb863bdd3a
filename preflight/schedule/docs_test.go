package schedule

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Rule IDs are public: the README must explain every one, in its
// table and with an example heading.
func TestRulesDocumented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	doc := string(data)
	for _, r := range Rules {
		require.Contains(t, doc, "| `"+r+"` |", "rule table row for %s", r)
		found := false
		for _, line := range strings.Split(doc, "\n") {
			if strings.HasPrefix(line, "#### ") && strings.Contains(line, r) {
				found = true
			}
		}
		require.True(t, found, "example heading for %s", r)
	}
}
