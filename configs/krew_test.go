package configs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// krewPlugin is the part of krew's Plugin manifest (v1alpha2) that
// installing reads.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Homepage         string `json:"homepage"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Files  []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
			Bin string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

func readKrewPlugin(t *testing.T, path string) krewPlugin {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var p krewPlugin
	require.NoError(t, yaml.UnmarshalStrict(data, &p, yaml.DisallowUnknownFields), path)
	return p
}

// releaseCLITargets are the OS/ARCH targets hack/release.sh builds the CLI
// for (its cli_targets).
func releaseCLITargets(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "hack", "release.sh"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^cli_targets="([^"]+)"$`).FindSubmatch(data)
	require.NotNil(t, m, "hack/release.sh declares cli_targets")
	targets := strings.Fields(string(m[1]))
	sort.Strings(targets)
	return targets
}

// The krew manifest names one platform for every CLI archive the release
// builds, each the archive release.sh packs (the binary as rankgate, and
// the LICENSE), so that `kubectl krew install` finds a build everywhere
// rankgate ships one.
func TestKrewManifestNamesEveryReleasePlatform(t *testing.T) {
	p := readKrewPlugin(t, filepath.Join("..", "plugins", "rankgate.yaml"))
	require.Equal(t, "krew.googlecontainertools.github.com/v1alpha2", p.APIVersion)
	require.Equal(t, "Plugin", p.Kind)
	require.Equal(t, "rankgate", p.Metadata.Name, "kubectl rankgate: the plugin's name")
	require.Equal(t, "${VERSION}", p.Spec.Version)
	require.NotEmpty(t, p.Spec.ShortDescription)

	var platforms []string
	for _, pl := range p.Spec.Platforms {
		os, arch := pl.Selector.MatchLabels["os"], pl.Selector.MatchLabels["arch"]
		platforms = append(platforms, os+"/"+arch)
		archive := fmt.Sprintf("rankgate_${VERSION}_%s_%s.tar.gz", os, arch)
		require.Equal(t, "https://github.com/rankgate/rankgate/releases/download/${VERSION}/"+archive, pl.URI)
		require.Equal(t, "${SHA256_"+archive+"}", pl.SHA256)
		require.Equal(t, "rankgate", pl.Bin)
		var from []string
		for _, f := range pl.Files {
			from = append(from, f.From)
		}
		require.ElementsMatch(t, []string{"rankgate", "LICENSE"}, from, os+"/"+arch)
	}
	sort.Strings(platforms)
	require.Equal(t, releaseCLITargets(t), platforms)
}

// hack/krew-manifest.sh fills in the version and each archive's checksum
// from SHA256SUMS, and refuses a release that lacks an archive.
func TestKrewManifestRendered(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dist := t.TempDir()
	const version = "v1.2.3"
	var sums strings.Builder
	want := map[string]string{}
	for _, target := range releaseCLITargets(t) {
		archive := fmt.Sprintf("rankgate_%s_%s.tar.gz", version, strings.ReplaceAll(target, "/", "_"))
		sum := sha256.Sum256([]byte(archive))
		want[archive] = hex.EncodeToString(sum[:])
		fmt.Fprintf(&sums, "%s  %s\n", want[archive], archive)
	}
	fmt.Fprintf(&sums, "%s  rankgate.yaml\n", strings.Repeat("0", 64))
	require.NoError(t, os.WriteFile(filepath.Join(dist, "SHA256SUMS"), []byte(sums.String()), 0o644))
	script := filepath.Join("..", "hack", "krew-manifest.sh")
	out, err := exec.Command("bash", script, version, dist).CombinedOutput()
	require.NoError(t, err, string(out))

	p := readKrewPlugin(t, filepath.Join(dist, "rankgate.krew.yaml"))
	require.Equal(t, version, p.Spec.Version)
	require.Len(t, p.Spec.Platforms, len(want))
	for _, pl := range p.Spec.Platforms {
		archive := filepath.Base(pl.URI)
		require.Equal(t, "https://github.com/rankgate/rankgate/releases/download/"+version+"/"+archive, pl.URI)
		require.Equal(t, want[archive], pl.SHA256, archive)
	}

	// An archive missing from the release: no manifest.
	lines := strings.SplitAfter(sums.String(), "\n")
	require.NoError(t, os.WriteFile(filepath.Join(dist, "SHA256SUMS"), []byte(strings.Join(lines[1:], "")), 0o644))
	out, err = exec.Command("bash", script, version, dist).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "no checksum in")
}
