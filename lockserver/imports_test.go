package lockserver

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoHTTP: the lock manager reaches no HTTP type (docs/design.md §2); its HTTP
// side is package httpserver, above it. Its tests use none either: a test
// of HTTP behaviour belongs with the HTTP side.
func TestNoHTTP(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == "net/http" || strings.HasPrefix(path, "net/http/") || strings.Contains(path, "fasthttp") ||
				strings.HasSuffix(path, "/lockserver/httpserver") {
				t.Errorf("%s imports %s", f, path)
			}
		}
	}
}
