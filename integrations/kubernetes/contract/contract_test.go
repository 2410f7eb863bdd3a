package contract

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/internal/gosource"
)

// moduleRoot is the repository root, seen from this package's directory.
const moduleRoot = "../../.."

// fileFormatVersion is the apiVersion of the files rankgate reads and
// writes (config, snapshot, data tables, reports): a version of a file
// format, not a key on a Kubernetes object.
var fileFormatVersion = regexp.MustCompile(`^rankgate\.io/v[0-9]+((alpha|beta)[0-9]+)?$`)

// notObjectKeys are literals under the prefix that never reach a
// Kubernetes object, by file (relative to the module root).
var notObjectKeys = map[string]string{
	// a cobra annotation on a command, read by shell completion
	"cmd/rankgate/app/completion.go": Prefix + "output-formats",
}

// TestKeysDeclaredOnlyHere walks the project's non-test Go files: a string
// literal under the rankgate.io/ prefix may appear only in this package,
// so that every label and annotation has one declaration and one doc
// comment. Tests, testdata and the YAML manifests may spell them out.
func TestKeysDeclaredOnlyHere(t *testing.T) {
	self, err := filepath.Abs(".")
	require.NoError(t, err)
	var problems []string
	files, err := gosource.EachFile(moduleRoot, nil, []string{self}, func(fset *token.FileSet, f *ast.File, rel string) {
		ast.Inspect(f, func(n ast.Node) bool {
			s, ok := gosource.StringLit(n)
			if !ok || !strings.HasPrefix(s, Prefix) || fileFormatVersion.MatchString(s) || notObjectKeys[rel] == s {
				return true
			}
			problems = append(problems, fset.Position(n.Pos()).String()+": "+strconv.Quote(s)+" (declare it in package contract)")
			return true
		})
	})
	require.NoError(t, err)
	require.Greater(t, files, 100, "the walk must reach the project's Go files")
	require.Empty(t, problems, "rankgate.io/ keys must be declared once, in package contract")
}

// TestPublicNamesDocumented: every label, annotation, condition type and
// Event reason declared here is named in the user documentation, so that
// adding one to the contract means documenting it.
func TestPublicNamesDocumented(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join(moduleRoot, "docs", "*.md"))
	require.NoError(t, err)
	var all strings.Builder
	for _, p := range docs {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		all.Write(b)
	}
	text := all.String()
	consts := declared(t)
	require.Greater(t, len(consts), 30)
	var missing []string
	for name, value := range consts {
		if name == "Prefix" || strings.HasPrefix(name, "Cached") || strings.HasPrefix(name, "Index") {
			continue // the prefix itself; names kept in the controller's memory
		}
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(value) + `\b`).MatchString(text) {
			missing = append(missing, name+" = "+strconv.Quote(value))
		}
	}
	require.Empty(t, missing, "public names missing from docs/")
}

// TestManifestKeysDeclared: every rankgate.io/ key the shipped manifests
// (configs/, YAML) use is declared here, so that the contract lists the
// labels the manifests select by too.
func TestManifestKeysDeclared(t *testing.T) {
	values := map[string]bool{}
	for _, v := range declared(t) {
		values[v] = true
	}
	key := regexp.MustCompile(`rankgate\.io/[a-z0-9][a-z0-9.-]*[a-z0-9]`)
	var unknown []string
	seen := 0
	err := filepath.WalkDir(filepath.Join(moduleRoot, "configs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, k := range key.FindAllString(string(b), -1) {
			if fileFormatVersion.MatchString(k) {
				continue
			}
			seen++
			if !values[k] {
				unknown = append(unknown, path+": "+k)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Positive(t, seen, "the manifests label namespaces with rankgate.io/ keys")
	require.Empty(t, unknown, "keys the manifests use but package contract does not declare")
}

// TestValuesUnderPrefix: labels and annotations carry the prefix; condition
// types and Event reasons are CamelCase words without it.
func TestValuesUnderPrefix(t *testing.T) {
	camel := regexp.MustCompile(`^[A-Z][A-Za-z]+$`)
	for name, value := range declared(t) {
		switch {
		case strings.HasPrefix(name, "Condition"), strings.HasPrefix(name, "Reason"):
			require.Regexp(t, camel, value, name)
		case strings.HasPrefix(name, "Value"):
			// the value of a label the package declares
			require.Regexp(t, `^[a-z][a-z0-9-]*$`, value, name)
		default:
			require.True(t, strings.HasPrefix(value, Prefix), "%s = %q", name, value)
		}
	}
}

// declared reads the string constants of contract.go, name to value.
func declared(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "contract.go", nil, 0)
	require.NoError(t, err)
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				v, ok := gosource.StringLit(vs.Values[i])
				require.True(t, ok, "%s is not a string literal", name.Name)
				out[name.Name] = v
			}
		}
	}
	return out
}
