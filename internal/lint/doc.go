// Package lint holds no code, only tests of the repository's own text
// that gofmt and go vet do not make: a comment, a page, a Makefile or a
// script of this repository never cites an issue of a tracker the repository does
// not hold (TestNoTrackerIssues); it states the reason itself, or links
// the docs/design.md section that does.
package lint
