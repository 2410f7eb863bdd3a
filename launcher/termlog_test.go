//go:build linux

package launcher

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

// A reason longer than the kubelet's limit is cut on a character boundary:
// the message Kubernetes shows must stay valid UTF-8.
func TestTerminationLogCutsOnACharacterBoundary(t *testing.T) {
	p := filepath.Join(t.TempDir(), "termination-log")
	r := &runner{opts: Options{TerminationLog: p}}
	reason := verdict.RuleNCCLFatal + ": " + strings.Repeat("é", 3000) // 2 bytes each, 6000 in all
	r.writeTerminationLog(reason)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), verdict.TerminationMax)
	require.Greater(t, len(b), verdict.TerminationMax-8)
	require.True(t, utf8.Valid(b), "cut inside a UTF-8 character: % x", b[len(b)-8:])
	require.True(t, strings.HasSuffix(string(b), "..."))
}
