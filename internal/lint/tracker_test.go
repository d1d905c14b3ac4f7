package lint

import (
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// trackerIssue is a citation of a tracker's issue: the word "issue" (or
// "issues", any case) followed by a number, with or without "#".
var trackerIssue = regexp.MustCompile(`(?i)\bissues?\s+#?[0-9]`)

// repoRoot is the repository's root, from this package's directory.
var repoRoot = filepath.Join("..", "..")

// TestNoTrackerIssues: no comment of a Go file (bench/ and deploy/
// included, tests included), and no line of a Markdown page, a Makefile or
// a shell script, cites a tracker's issue. The tracker is not in the repository,
// so an issue's number tells a reader nothing: say the reason, or link
// the docs/design.md section that gives it.
func TestNoTrackerIssues(t *testing.T) {
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "bin" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(p, ".go"):
			checkGoComments(t, p, rel)
		case d.Name() == "Makefile" || strings.HasSuffix(p, ".sh") || strings.HasSuffix(p, ".md"):
			checkLines(t, p, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkGoComments reports every comment of the Go file p that cites a
// tracker's issue.
func checkGoComments(t *testing.T, p, rel string) {
	src, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var s scanner.Scanner
	s.Init(fset.AddFile(rel, -1, len(src)), src, nil, scanner.ScanComments)
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return
		}
		if tok == token.COMMENT && trackerIssue.MatchString(lit) {
			t.Errorf("%s: a comment cites a tracker's issue (%q): state the reason, or link docs/design.md's section", fset.Position(pos), trackerIssue.FindString(lit))
		}
	}
}

// checkLines reports every line of the file p that cites a tracker's
// issue.
func checkLines(t *testing.T, p, rel string) {
	src, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(src), "\n") {
		if m := trackerIssue.FindString(line); m != "" {
			t.Errorf("%s:%d: cites a tracker's issue (%q): state the reason, or link docs/design.md's section", rel, i+1, m)
		}
	}
}
