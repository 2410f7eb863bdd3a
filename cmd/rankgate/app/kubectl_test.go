//go:build !rankgate_node

package app

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

// A usage error names the help of the command it was made on.
func TestUsageErrorNamesTheSubcommandHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		help string
	}{
		{[]string{"status", "--no-such-flag"}, "Run 'rankgate status --help' for usage."},
		{[]string{"diagnose", "job", "a", "b", "c"}, "Run 'rankgate diagnose job --help' for usage."},
		{[]string{"preflight", "--devices"}, "Run 'rankgate preflight --help' for usage."},
		{[]string{"--no-such-flag"}, "Run 'rankgate --help' for usage."},
	} {
		code, out, errOut := run(t, nil, tc.args...)
		require.Equal(t, verdict.ExitUsage, code, "%v: %s", tc.args, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, tc.help, tc.args)
	}
}

// Installed as kubectl-rankgate (krew links it so), the binary is the
// kubectl plugin: the same commands, its help and hints say "kubectl
// rankgate".
func TestKubectlPluginName(t *testing.T) {
	require.Equal(t, "kubectl rankgate", displayName("/home/u/.krew/bin/kubectl-rankgate"))
	require.Equal(t, "kubectl rankgate", displayName("kubectl-rankgate.exe"))
	require.Equal(t, "rankgate", displayName("/usr/local/bin/rankgate"))
	require.Equal(t, "rankgate", displayName("rankgate_v1.0.0_linux_amd64"))

	var out, errb bytes.Buffer
	code := runAs(context.Background(), displayName("kubectl-rankgate"), Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, []string{"status", "--help"})
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, out.String(), "kubectl rankgate status [JOB]")
	out.Reset()
	code = runAs(context.Background(), "kubectl rankgate", Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, []string{"status", "--no-such-flag"})
	require.Equal(t, verdict.ExitUsage, code)
	require.Contains(t, errb.String(), "Run 'kubectl rankgate status --help' for usage.")
	out.Reset()
	code = runAs(context.Background(), "kubectl rankgate", Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, []string{"demo", "-o", "json"})
	require.Equal(t, 0, code, errb.String())
	require.Len(t, decodeReportList(t, out.String()), 2, "the same commands as rankgate")
}
