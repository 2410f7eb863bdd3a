package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// maxReadmeLines keeps the top-level README a short guide; the rest lives
// in docs/.
const maxReadmeLines = 300

// docFiles are the Markdown files whose links are checked: the top-level
// README and every page in docs/.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	return append([]string{filepath.Join(root, "README.md")}, pages...)
}

func TestRelativeLinksResolve(t *testing.T) {
	root := filepath.Join("..")
	for _, f := range docFiles(t, root) {
		rel, _ := filepath.Rel(root, f)
		t.Run(rel, func(t *testing.T) {
			problems, err := checkLinks(root, f)
			require.NoError(t, err)
			for _, p := range problems {
				t.Error(p)
			}
		})
	}
}

func TestReadmeIsAShortGuideWithContents(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	require.LessOrEqual(t, len(lines), maxReadmeLines, "README.md lines")

	// A "Contents" section lists every other section of the README.
	md := parseMarkdown(string(data))
	var sections []string
	hasContents := false
	for _, h := range md.headings {
		if h.level != 2 {
			continue
		}
		if strings.EqualFold(h.text, "Contents") || strings.EqualFold(h.text, "Table of contents") {
			hasContents = true
			continue
		}
		sections = append(sections, h.anchor)
	}
	require.True(t, hasContents, "README.md needs a '## Contents' section")
	toc := map[string]bool{}
	for _, l := range md.links {
		if strings.HasPrefix(l.target, "#") {
			toc[l.target[1:]] = true
		}
	}
	for _, s := range sections {
		require.True(t, toc[s], "the README's contents do not link to section #%s", s)
	}
}

// The checker itself: it must catch what it is there to catch.
func TestCheckLinksFindsBrokenLinks(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "docs"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "configs", "deploy"), 0o755))
	write := func(name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte(text), 0o644))
	}
	write("docs/a.md", "# A\n\n## Exit codes\n\n## Exit codes\n\n### torchrun: NPROC_EXCEEDS_DEVICES\n\n```\n# not a heading\n```\n")
	write("README.md", strings.Join([]string{
		"# R",
		"[ok](docs/a.md) [ok](docs/a.md#exit-codes) [ok](docs/a.md#exit-codes-1)",
		"[ok](docs/a.md#torchrun-nproc_exceeds_devices) [ok](configs/deploy) [ok](#r)",
		"[ok](https://example.com/x.md) `[not a link](nowhere.md)`",
		"```",
		"[not a link](nowhere.md)",
		"```",
		"[missing](docs/b.md) [bad anchor](docs/a.md#exit-codes-2)",
		"[code heading](docs/a.md#not-a-heading) [outside](../elsewhere.md) [self](#nothing)",
	}, "\n"))
	problems, err := checkLinks(root, filepath.Join(root, "README.md"))
	require.NoError(t, err)
	require.Len(t, problems, 5, "%q", problems)
	for i, want := range []string{"docs/b.md", "#exit-codes-2", "#not-a-heading", "../elsewhere.md", "#nothing"} {
		require.Contains(t, problems[i], want)
	}
}

func TestAnchorFollowsGitHub(t *testing.T) {
	for _, tc := range []struct{ heading, anchor string }{
		{"Exit codes", "exit-codes"},
		{"torchrun: NPROC_EXCEEDS_DEVICES", "torchrun-nproc_exceeds_devices"},
		{"Signals, the process group, no orphans", "signals-the-process-group-no-orphans"},
		{"WAIT_CAPACITY (and MIG_LAYOUT_INVALID as a warning)", "wait_capacity-and-mig_layout_invalid-as-a-warning"},
		{"The cluster gate: rankgate controller and rankgate init", "the-cluster-gate-rankgate-controller-and-rankgate-init"},
		{"`rankgate.io/verdict` and *more*", "rankgateioverdict-and-more"},
		{"See [the rules](rules.md)", "see-the-rules"},
		{"A  -  B", "a-----b"},
	} {
		t.Run(tc.heading, func(t *testing.T) {
			require.Equal(t, tc.anchor, anchorOf(tc.heading))
		})
	}
}

type heading struct {
	level  int
	text   string
	anchor string
}

type link struct {
	line   int
	target string
}

type markdown struct {
	headings []heading
	links    []link
}

var (
	headingRE = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	linkRE    = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	codeRE    = regexp.MustCompile("`+[^`]*`+")
	fenceRE   = regexp.MustCompile("^\\s{0,3}(```+|~~~+)")
)

// parseMarkdown finds the headings (with GitHub's anchors, duplicates
// numbered -1, -2, ...) and the inline links outside code.
func parseMarkdown(text string) markdown {
	var md markdown
	seen := map[string]int{}
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			marker := m[1][:3]
			switch {
			case fence == "":
				fence = marker
			case marker == fence:
				fence = ""
			}
			continue
		}
		if fence != "" {
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			a := anchorOf(m[2])
			if n := seen[a]; n > 0 {
				seen[a] = n + 1
				a = fmt.Sprintf("%s-%d", a, n)
			} else {
				seen[a] = 1
			}
			md.headings = append(md.headings, heading{level: len(m[1]), text: m[2], anchor: a})
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeRE.ReplaceAllString(line, ""), -1) {
			md.links = append(md.links, link{line: i + 1, target: m[1]})
		}
	}
	return md
}

var inlineLinkRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// anchorOf is GitHub's anchor for a heading: the rendered text in lower
// case, without punctuation other than '-' and '_', spaces as '-'.
func anchorOf(h string) string {
	h = inlineLinkRE.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// checkLinks returns one problem per relative link of file that does not
// resolve: a missing file or folder, a path outside root, or an anchor
// that is no heading of the Markdown file it points into.
func checkLinks(root, file string) ([]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	md := parseMarkdown(string(data))
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := map[string]bool{}
		for _, h := range parseMarkdown(string(text)).headings {
			a[h.anchor] = true
		}
		anchors[path] = a
		return a, nil
	}
	name := filepath.Base(file)
	var problems []string
	for _, l := range md.links {
		if isExternal(l.target) {
			continue
		}
		path, frag, _ := strings.Cut(l.target, "#")
		target := file
		if path != "" {
			target, err = filepath.Abs(filepath.Join(filepath.Dir(file), filepath.FromSlash(path)))
			if err != nil {
				return nil, err
			}
			if target != absRoot && !strings.HasPrefix(target, absRoot+string(filepath.Separator)) {
				problems = append(problems, fmt.Sprintf("%s:%d: %s points outside the repository", name, l.line, l.target))
				continue
			}
			if _, err := os.Stat(target); err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: %s does not exist", name, l.line, l.target))
				continue
			}
		}
		if frag == "" || !strings.HasSuffix(strings.ToLower(target), ".md") {
			continue
		}
		a, err := anchorsOf(target)
		if err != nil {
			return nil, err
		}
		if !a[strings.ToLower(frag)] {
			problems = append(problems, fmt.Sprintf("%s:%d: %s: no heading with anchor #%s", name, l.line, l.target, frag))
		}
	}
	return problems, nil
}

var schemeRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

func isExternal(target string) bool {
	return schemeRE.MatchString(target) || strings.HasPrefix(target, "//")
}
