package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBenchLinesJoinsFiguresToTheirName: a benchmark that logs has its
// figures on a line of their own; the doc keeps them under the name, and
// not the log lines.
func TestBenchLinesJoinsFiguresToTheirName(t *testing.T) {
	out := "goos: linux\n" +
		"pkg: example/lockserver\n" +
		"BenchmarkQuiet-2   \t     100\t     12345 ns/op\t      10 B/op\n" +
		"BenchmarkLoud/n=1-2         \ttime=\"2026-12-02T08:10:11Z\" level=info msg=\"new member\" node=a\n" +
		"time=\"2026-12-02T08:10:12Z\" level=info msg=\"new member\" node=b\n" +
		"       1\t1318436341 ns/op\t       208.0 buildhashes-ms/op\n" +
		"PASS\n"
	require.Equal(t, "pkg: example/lockserver\n"+
		"BenchmarkQuiet-2   \t     100\t     12345 ns/op\t      10 B/op\n"+
		"BenchmarkLoud/n=1-2       1\t1318436341 ns/op\t       208.0 buildhashes-ms/op\n",
		benchLines([]byte(out)))
}
