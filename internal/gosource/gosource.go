// Package gosource walks the project's own Go source for the structural
// tests (rule IDs declared once, rankgate.io/ keys declared once).
package gosource

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// SkipAlways are directories no walk enters: VCS data, build outputs,
// test data and front-end packages.
var SkipAlways = []string{".git", "bin", "testdata", "node_modules"}

// EachFile parses every non-test .go file under root, except in
// directories named in SkipAlways or skip, or whose absolute path is in
// skipAbs, and calls f with the file and its path relative to root. It
// returns the number of files parsed.
func EachFile(root string, skip, skipAbs []string, f func(fset *token.FileSet, file *ast.File, rel string)) (int, error) {
	fset := token.NewFileSet()
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			abs, err := filepath.Abs(path)
			if err != nil {
				return err
			}
			if slices.Contains(SkipAlways, d.Name()) || slices.Contains(skip, d.Name()) || slices.Contains(skipAbs, abs) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		n++
		f(fset, file, filepath.ToSlash(rel))
		return nil
	})
	return n, err
}

// StringLit is the value of a string literal node.
func StringLit(n ast.Node) (string, bool) {
	bl, ok := n.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}
