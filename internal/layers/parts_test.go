package layers

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// partsTables are the tables that name the module's packages for a
// reader: README.md's "The parts" (a newcomer's map) and docs/design.md
// §2 (the layers), each the first table below its heading.
var partsTables = []struct{ file, heading string }{
	{"README.md", "## The parts"},
	{"docs/design.md", "## 2. Parts and layers"},
}

// codeSpan is a `…` span of a Markdown line.
var codeSpan = regexp.MustCompile("`([^`]+)`")

// TestPartsTablesNameEveryPackage: every package of the module is named
// in each parts table, as `dir` (with or without a trailing slash), or
// covered by a `dir/…` row that stands for a directory and everything
// below it: a new package must be placed for the reader as it is ranked
// above.
func TestPartsTablesNameEveryPackage(t *testing.T) {
	pkgs := listPackages(t)
	root := filepath.Join("..", "..")
	for _, tbl := range partsTables {
		names, dirs := partsNamed(t, filepath.Join(root, tbl.file), tbl.heading)
		for _, p := range pkgs {
			if p.Module == nil {
				continue
			}
			path := strings.TrimPrefix(p.ImportPath, p.Module.Path+"/")
			if !names[path] && !coveredBy(path, dirs) {
				t.Errorf("%s: the table under %q does not name package %s (add a row, or name it in a row's text as `%s`)", tbl.file, tbl.heading, path, path)
			}
		}
	}
}

// partsNamed returns the code spans of the first table below heading in
// file: the exact names, and the directories of `dir/…` spans.
func partsNamed(t *testing.T, file, heading string) (names map[string]bool, dirs []string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s: no heading %q", file, heading)
	}
	names = map[string]bool{}
	inTable := false
	for line := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
			name := m[1]
			if dir, ok := strings.CutSuffix(name, "/…"); ok {
				dirs = append(dirs, dir)
				continue
			}
			names[strings.TrimSuffix(name, "/")] = true
		}
	}
	if !inTable {
		t.Fatalf("%s: no table under %q", file, heading)
	}
	return names, dirs
}

// coveredBy reports whether path is one of dirs or below one.
func coveredBy(path string, dirs []string) bool {
	for _, d := range dirs {
		if under(path, d) {
			return true
		}
	}
	return false
}
