package app

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/rankgate/rankgate/verdict"
)

func TestResolveVersion(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.99.1",
		Main:      debug.Module{Path: "github.com/rankgate/rankgate", Version: "v0.3.1-0.20261201-abcdef+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "abcdef0123"},
			{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	// -ldflags set: they win over the build info.
	v := resolveVersion("v1.2.3", "fedcba", "2026-12-02T00:00:00Z", bi)
	require.Equal(t, "v1.2.3", v.Version)
	require.Equal(t, "fedcba", v.GitCommit)
	require.Equal(t, "2026-12-02T00:00:00Z", v.BuildDate)
	require.Equal(t, "dirty", v.GitTreeState)
	require.Equal(t, "go1.99.1", v.GoVersion)
	require.Equal(t, runtime.GOOS+"/"+runtime.GOARCH, v.Platform)
	require.Equal(t, buildFlavour, v.Build)

	// No -ldflags: everything from the build info.
	v = resolveVersion(unsetVersion, "", "", bi)
	require.Equal(t, "v0.3.1-0.20261201-abcdef+dirty", v.Version)
	require.Equal(t, "abcdef0123", v.GitCommit)
	require.Equal(t, "2026-12-01T10:00:00Z", v.BuildDate)

	// go run or go test: no module version, no VCS stamp.
	v = resolveVersion(unsetVersion, "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}})
	require.Equal(t, unsetVersion, v.Version)
	require.Empty(t, v.GitCommit)
	require.Empty(t, v.GitTreeState)
	require.Equal(t, runtime.Version(), v.GoVersion)

	v = resolveVersion("", "", "", nil)
	require.Equal(t, "", v.Version, "without build info nothing is filled in")
}

func setVersionVars(t *testing.T, version, commit, date string) {
	t.Helper()
	oldV, oldC, oldD := Version, Commit, BuildDate
	Version, Commit, BuildDate = version, commit, date
	t.Cleanup(func() { Version, Commit, BuildDate = oldV, oldC, oldD })
}

func TestVersionCommand(t *testing.T) {
	setVersionVars(t, "v9.8.7", "0123abc", "2026-12-03T04:05:06Z")
	code, out, errOut := run(t, nil, "version", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var v versionInfo
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	require.Equal(t, "v9.8.7", v.Version)
	require.Equal(t, "0123abc", v.GitCommit)
	require.Equal(t, "2026-12-03T04:05:06Z", v.BuildDate)
	require.Equal(t, runtime.GOOS+"/"+runtime.GOARCH, v.Platform)
	require.Equal(t, buildFlavour, v.Build)
	require.NotEmpty(t, v.GoVersion)

	code, out, _ = run(t, nil, "version", "-o", "yaml")
	require.Equal(t, 0, code)
	var y versionInfo
	require.NoError(t, yaml.UnmarshalStrict([]byte(out), &y), out)
	require.Equal(t, v, y)

	code, out, _ = run(t, nil, "version")
	require.Equal(t, 0, code)
	require.Contains(t, out, "Version:    v9.8.7\n")
	require.Contains(t, out, "Git commit: 0123abc\n")
	require.Contains(t, out, "Build:      "+buildFlavourText+"\n")

	// --version names the same version.
	code, out, _ = run(t, nil, "--version")
	require.Equal(t, 0, code)
	require.Equal(t, "rankgate version v9.8.7\n", out)

	code, _, errOut = run(t, nil, "version", "-o", "xml")
	require.Equal(t, verdict.ExitUsage, code)
	require.Contains(t, errOut, `output format "xml": want text, json or yaml`)
}

// TestVersionOfBuiltBinary builds the node binary twice: with -ldflags
// -X, which it prints, and without, when it prints what the Go toolchain
// recorded in the binary (as go version -m reads it: the module version,
// vcs.revision and vcs.time when the build stamped them).
func TestVersionOfBuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	build := func(name string, ldflags ...string) (versionInfo, map[string]string) {
		bin := filepath.Join(dir, name)
		args := append([]string{"build", "-tags", "rankgate_node", "-o", bin}, ldflags...)
		outb, err := exec.Command("go", append(args, "..")...).CombinedOutput()
		require.NoError(t, err, "%s", outb)
		out, err := exec.Command(bin, "version", "-o", "json").Output()
		require.NoError(t, err)
		var v versionInfo
		require.NoError(t, json.Unmarshal(out, &v), string(out))
		require.Equal(t, "node", v.Build)
		// What the toolchain recorded: "mod PATH VERSION", "build KEY=VALUE".
		meta, err := exec.Command("go", "version", "-m", bin).Output()
		require.NoError(t, err)
		info := map[string]string{}
		for _, line := range strings.Split(string(meta), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) >= 3 && f[0] == "mod":
				info["mod"] = f[2]
			case len(f) == 2 && f[0] == "build":
				if k, val, ok := strings.Cut(f[1], "="); ok {
					info[k] = val
				}
			}
		}
		return v, info
	}
	const pkg = "github.com/rankgate/rankgate/cmd/rankgate/app"
	v, _ := build("with-ldflags", "-ldflags", "-X "+pkg+".Version=v7.7.7 -X "+pkg+".Commit=cafe -X "+pkg+".BuildDate=2026-12-24T00:00:00Z")
	require.Equal(t, "v7.7.7", v.Version)
	require.Equal(t, "cafe", v.GitCommit)
	require.Equal(t, "2026-12-24T00:00:00Z", v.BuildDate)

	// -buildvcs=auto: stamp the git revision where the toolchain can,
	// whatever GOFLAGS says.
	v, info := build("without-ldflags", "-buildvcs=auto")
	t.Logf("recorded build info: %v", info)
	wantVersion := info["mod"]
	if wantVersion == "" || wantVersion == "(devel)" {
		wantVersion = unsetVersion
	}
	require.Equal(t, wantVersion, v.Version)
	require.Equal(t, info["vcs.revision"], v.GitCommit)
	require.Equal(t, info["vcs.time"], v.BuildDate)
	require.Equal(t, map[string]string{"true": "dirty", "false": "clean"}[info["vcs.modified"]], v.GitTreeState)
}
