package api

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportsNoProjectPackage: the protocol's types are a leaf. A client
// written against them, in this module or not, pulls in nothing of the
// coordinator or its storage (api once imported refcount).
func TestImportsNoProjectPackage(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			if strings.Contains(imp.Path.Value, "github.com/sharedcontent/sharedcontent/") {
				t.Errorf("%s imports %s", f, imp.Path.Value)
			}
		}
	}
}
