package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"golang.org/x/term"
)

// printer writes a command's result as a table (the default) or, with
// -o json, as indented JSON of the same value, for scripts.
type printer struct {
	out  io.Writer
	json bool
}

func newPrinter(out io.Writer, format string) (printer, error) {
	switch format {
	case "table", "":
		return printer{out: out}, nil
	case "json":
		return printer{out: out, json: true}, nil
	}
	return printer{}, fmt.Errorf("-o %q: want table or json", format)
}

// print writes v as JSON, or calls table with a tab writer.
func (p printer) print(v any, table func(tw *tabwriter.Writer)) error {
	if p.json {
		enc := json.NewEncoder(p.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(p.out, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// bytesOf formats a byte count for people.
func bytesOf(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// isTerminal reports whether out is a terminal (not a file, a pipe or
// /dev/null): where top redraws and prefetch draws a bar.
func isTerminal(out io.Writer) bool {
	f, ok := out.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
