package verdict

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rankgate/rankgate/internal/gosource"
)

// ruleShaped is what a rule ID or NVML class literal looks like.
var ruleShaped = regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$`)

// TestRuleIDsDeclaredOnlyHere walks the project's non-test Go files: a
// rule ID (or NVML class) may be declared as a string only in this package,
// and a finding's Rule field must not be a string literal, so that every
// rule a face emits goes through the registry.
func TestRuleIDsDeclaredOnlyHere(t *testing.T) {
	classes := map[string]bool{}
	for _, c := range nvmlClasses {
		classes[c.class] = true
	}
	var problems []string
	_, err := gosource.EachFile("..", []string{"verdict", "tools"}, nil, func(fset *token.FileSet, f *ast.File, _ string) {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for _, v := range n.Values {
					if s, ok := gosource.StringLit(v); ok && (Registered(s) || classes[s]) {
						problems = append(problems, fset.Position(v.Pos()).String()+": declares "+s+" (use verdict's constant)")
					}
				}
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Rule" {
					if s, ok := gosource.StringLit(n.Value); ok && ruleShaped.MatchString(s) {
						problems = append(problems, fset.Position(n.Value.Pos()).String()+": Rule: "+strconv.Quote(s)+" (use verdict's constant)")
					}
				}
			}
			return true
		})
	})
	require.NoError(t, err)
	require.Empty(t, problems, "rule IDs must be declared once, in package verdict")
}

// TestEveryRuleConstantIsRegistered: a Rule* constant of this package that
// the registry lacks is a rule a face could emit undocumented.
func TestEveryRuleConstantIsRegistered(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "rules.go", nil, 0)
	require.NoError(t, err)
	n := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Rule") {
					continue
				}
				v, ok := gosource.StringLit(vs.Values[i])
				require.True(t, ok, name.Name)
				require.True(t, Registered(v), "%s = %q is not registered", name.Name, v)
				n++
			}
		}
	}
	require.Greater(t, n, 40)
}

// TestRulesReferenceDocumentsEveryRule: docs/rules.md names every
// registered rule in a table row.
func TestRulesReferenceDocumentsEveryRule(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "rules.md"))
	require.NoError(t, err)
	doc := string(b)
	var missing []string
	for _, r := range Rules() {
		if !strings.Contains(doc, "| `"+r.ID+"`") {
			missing = append(missing, r.ID)
		}
	}
	require.Empty(t, missing, "rules missing from docs/rules.md (a table row starting | `RULE_ID`)")
}
