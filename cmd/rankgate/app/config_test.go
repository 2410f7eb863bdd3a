package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/verdict"
)

// The config file carries apiVersion and kind; the first release's form
// (version, no kind) keeps loading; another kind or an unknown key is
// refused with a message that says what to write.
func TestConfigFileForms(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"apiVersion and kind", "apiVersion: rankgate.io/v1\nkind: Config\nexpect-profile: 2g.20gb\n", verdict.ExitFail, "PROFILE_MISMATCH"},
		{"old form: version, no kind", "version: rankgate.io/v1\nexpect-profile: 2g.20gb\n", verdict.ExitFail, "PROFILE_MISMATCH"},
		{"wrong kind", "apiVersion: rankgate.io/v1\nkind: MIGProfileCatalog\nexpect-profile: 2g.20gb\n", verdict.ExitUsage, `kind "MIGProfileCatalog" is not a rankgate config file (want kind: Config`},
		{"no kind", "apiVersion: rankgate.io/v1\nexpect-profile: 2g.20gb\n", verdict.ExitUsage, "kind is missing"},
		{"wrong apiVersion", "apiVersion: rankgate.io/v2\nkind: Config\n", verdict.ExitUsage, `apiVersion "rankgate.io/v2" is not supported`},
		{"unknown key", "apiVersion: rankgate.io/v1\nkind: Config\nexpect-profil: 2g.20gb\n", verdict.ExitUsage, "unknown keys expect-profil"},
		{"bad duration", "apiVersion: rankgate.io/v1\nkind: Config\nnvml-timeout: 10\n", verdict.ExitUsage, `nvml-timeout "10" is not a duration like 30s`},
		{"negative duration", "apiVersion: rankgate.io/v1\nkind: Config\nnvml-timeout: -1s\n", verdict.ExitUsage, "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			require.NoError(t, os.WriteFile(p, []byte(tc.body), 0o644))
			code, out, stderr := run(t, nil, "preflight", "--config", p, "--sample", "h100-mig", "--devices", "0:0", "-o", "json")
			require.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", out, stderr)
			require.Contains(t, out+stderr, tc.want)
		})
	}
}

// A list flag takes a YAML list from the file as is (a name may hold a
// comma); the command line replaces it.
func TestConfigFileListsReachTheOptions(t *testing.T) {
	data, err := os.ReadFile("../../../configs/samples/a100-full.json")
	require.NoError(t, err)
	dir := t.TempDir()
	node := filepath.Join(dir, "node,a100.json")
	require.NoError(t, os.WriteFile(node, data, 0o644))
	cfg := filepath.Join(dir, "rankgate.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("apiVersion: rankgate.io/v1\nkind: Config\ninventory:\n  - "+node+"\ndevices: \"0\"\n"), 0o644))
	code, out, stderr := run(t, nil, "inspect", "--config", cfg, "-o", "json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `"driverVersion"`)

	// The flag wins over the file: a missing file is bad input.
	code, _, stderr = run(t, nil, "inspect", "--config", cfg, "--inventory", filepath.Join(dir, "nope"))
	require.Equal(t, verdict.ExitUsage, code)
	require.Contains(t, stderr, "nope")
}
