package app

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// complete runs cobra's hidden __complete command, as the shell scripts
// do, and returns the offered words and the directive line.
func complete(t *testing.T, args ...string) ([]string, string) {
	t.Helper()
	code, out, errOut := run(t, nil, append([]string{"__complete"}, args...)...)
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	require.NotEmpty(t, lines)
	directive := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(directive, ":"), "last line is the directive: %q", out)
	return append([]string{}, lines[:len(lines)-1]...), directive
}

// noFiles is cobra's ShellCompDirectiveNoFileComp.
const noFiles = ":4"

func TestCompletionScripts(t *testing.T) {
	for shell, marker := range map[string]string{
		"bash":       "__start_rankgate",
		"zsh":        "#compdef rankgate",
		"fish":       "complete -c rankgate",
		"powershell": "Register-ArgumentCompleter",
	} {
		t.Run(shell, func(t *testing.T) {
			code, out, errOut := run(t, nil, "completion", shell)
			require.Equal(t, 0, code, errOut)
			require.Contains(t, out, marker)
		})
	}
}

func TestCompletionOfFlagValues(t *testing.T) {
	words, dir := complete(t, "version", "-o", "")
	require.Equal(t, []string{"text", "json", "yaml"}, words)
	require.Equal(t, noFiles, dir)

	// preflight's -o offers what its format check accepts.
	words, dir = complete(t, "preflight", "-o", "")
	require.Equal(t, noFiles, dir)
	require.Subset(t, words, []string{"text", "json"})
	for _, w := range words {
		require.NoError(t, checkFormat(w), "offered %q, which preflight refuses", w)
	}

	words, _ = complete(t, "preflight", "--log-level", "w")
	require.Equal(t, []string{"warn"}, words)
	words, _ = complete(t, "demo", "--log-format", "")
	require.Equal(t, []string{"console", "json"}, words)
	words, _ = complete(t, "launch", "--expect-transport", "")
	require.Equal(t, []string{"p2p", "shm", "net"}, words)
	words, _ = complete(t, "preflight", "--sample", "h100")
	require.Contains(t, words, "h100-mig")

	// Subcommands are offered as before.
	words, _ = complete(t, "")
	require.Contains(t, words, "version\tPrint the version, commit, build date, Go version, platform and build of this binary")
}
