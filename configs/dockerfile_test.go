package configs

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var digestRef = regexp.MustCompile(`^[^\s@]+@sha256:[0-9a-f]{64}$`)

// Every base image of the Dockerfile is pinned by digest: a tag alone can
// point at other bytes tomorrow. A FROM naming an earlier stage is not an
// image.
func TestDockerfileBaseImagesPinnedByDigest(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "Dockerfile"))
	require.NoError(t, err)
	defer f.Close()
	stages := map[string]bool{}
	froms := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || !strings.EqualFold(fields[0], "FROM") {
			continue
		}
		froms++
		args := fields[1:]
		for len(args) > 0 && strings.HasPrefix(args[0], "--") { // --platform=...
			args = args[1:]
		}
		require.NotEmpty(t, args, sc.Text())
		image := args[0]
		if len(args) >= 3 && strings.EqualFold(args[1], "AS") {
			stages[strings.ToLower(args[2])] = true
		}
		if stages[strings.ToLower(image)] && !strings.Contains(image, "@") {
			continue
		}
		require.NotContains(t, image, "$", "%q: a build argument can replace the pinned image", sc.Text())
		require.Regexp(t, digestRef, image, "%q is not pinned by digest", sc.Text())
	}
	require.NoError(t, sc.Err())
	require.GreaterOrEqual(t, froms, 2, "build and runtime stages")
}

// dockerignored reports whether path (slash-separated, relative to the
// build context) is left out of the context by patterns, with Docker's
// rules: patterns match the path or a directory above it, "**" matches any
// number of directories, later "!" patterns re-include.
func dockerignored(patterns []string, path string) bool {
	parts := strings.Split(path, "/")
	ignored := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		p = strings.Trim(strings.TrimPrefix(p, "!"), "/")
		for i := 1; i <= len(parts); i++ {
			if globMatch(strings.Split(p, "/"), parts[:i]) {
				ignored = !neg
				break
			}
		}
	}
	return ignored
}

func globMatch(pat, parts []string) bool {
	if len(pat) == 0 {
		return len(parts) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(parts); i++ {
			if globMatch(pat[1:], parts[i:]) {
				return true
			}
		}
		return false
	}
	if len(parts) == 0 {
		return false
	}
	ok, err := filepath.Match(pat[0], parts[0])
	return err == nil && ok && globMatch(pat[1:], parts[1:])
}

// The build context leaves out the repository's history, the local tools
// and build outputs, and keeps the sources the image is built from.
func TestDockerignore(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", ".dockerignore"))
	require.NoError(t, err)
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	for _, p := range []string{".git", ".git/config", "bin", "bin/k8s/kube-apiserver", ".device/out/result.json",
		"integrations/kubernetes/e2e/e2e.test", "rankgate", "coverage.out"} {
		require.True(t, dockerignored(patterns, p), "%s is sent to the build", p)
	}
	for _, p := range []string{"go.mod", "go.sum", "cmd/rankgate/main.go", "configs/mig-profiles.yaml",
		"configs/samples/a100-full.json", "integrations/kubernetes/controller/controller.go", "cmd/rankgate/app/testdata/x.json"} {
		require.False(t, dockerignored(patterns, p), "%s is left out of the build", p)
	}
	// The matcher itself.
	require.True(t, dockerignored([]string{"**/*.test"}, "a.test"))
	require.True(t, dockerignored([]string{"bin", "!bin/keep"}, "bin/x"))
	require.False(t, dockerignored([]string{"bin", "!bin/keep"}, "bin/keep"))
	require.False(t, dockerignored([]string{"/rankgate"}, "cmd/rankgate"))
}
