package main

import (
	"regexp"
	"strings"
)

// benchLines keeps the result lines of go test -bench output. A benchmark
// whose code logs prints its name, then the log lines, then its figures on
// a line of their own: those figures are joined to the name again, and the
// log lines dropped.
func benchLines(out []byte) string {
	var b strings.Builder
	name := ""
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "pkg:") || strings.HasPrefix(line, "cpu:"):
			b.WriteString(line + "\n")
		case strings.HasPrefix(line, "Benchmark"):
			if strings.Contains(line, " ns/op") {
				b.WriteString(line + "\n")
				name = ""
			} else {
				name = strings.Fields(line)[0]
			}
		case name != "" && benchFigures.MatchString(line):
			b.WriteString(name + line + "\n")
			name = ""
		}
	}
	return b.String()
}

// benchFigures is a result line without its name: the iterations, then
// ns/op.
var benchFigures = regexp.MustCompile(`^\s+\d+\s+[0-9.]+ ns/op`)
