//go:build unix && !rankgate_node

package app

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/integrations/kubernetes/cluster"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

func TestDiagnoseFileInputsAreBounded(t *testing.T) {
	pipe, dir := fifo(t), t.TempDir()
	dump := filepath.Join(scenarioDir, "03-shape-mismatch.yaml")
	bigDump := sparse(t, "dump.yaml", cluster.MaxDumpSize+1)
	bigCatalog := sparse(t, "catalog.yaml", topology.MaxCatalogSize+1)
	offline := []string{"diagnose", "--offline"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"-f /dev/zero", append(offline, "-f", "/dev/zero"), "rankgate: /dev/zero: not a regular file (a character device): give a regular file, or - to read standard input"},
		{"-f fifo", append(offline, "-f", pipe), pipe + ": not a regular file (a named pipe)"},
		{"-f fifo after a good file", append(offline, "-f", dump, "-f", pipe), pipe + ": not a regular file (a named pipe)"},
		{"-f directory", append(offline, "-f", dir), dir + ": not a regular file (a directory)"},
		{"-f too big", append(offline, "-f", bigDump), bigDump + ": larger than 64 MiB"},
		{"--catalog /dev/zero", append(offline, "-f", dump, "--catalog", "/dev/zero"), "MIG profile catalog: /dev/zero: not a regular file (a character device)"},
		{"--catalog too big", append(offline, "-f", dump, "--catalog", bigCatalog), bigCatalog + ": larger than 1 MiB"},
		{"--known-bad-drivers /dev/zero", append(offline, "-f", dump, "--known-bad-drivers", "/dev/zero"), "known-bad driver table: /dev/zero: not a regular file (a character device)"},
		{"--known-bad-drivers fifo", append(offline, "-f", dump, "--known-bad-drivers", pipe), "known-bad driver table: " + pipe + ": not a regular file (a named pipe)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runBounded(t, t.Context(), strings.NewReader(""), tc.args...)
			require.Equal(t, verdict.ExitUsage, code, stderr)
			require.Contains(t, stderr, tc.want)
		})
	}
}

func TestDiagnoseStdinIsBounded(t *testing.T) {
	big := strings.Repeat("# a comment line of a dump that never ends\n", cluster.MaxDumpSize/40)
	code, _, stderr := runBounded(t, t.Context(), strings.NewReader(big), "diagnose", "--offline", "-f", "-")
	require.Equal(t, verdict.ExitUsage, code)
	require.Contains(t, stderr, "rankgate: standard input: larger than 64 MiB, the most rankgate reads from this input")
}
