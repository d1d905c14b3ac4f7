package docflags

import (
	"flag"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// flagName is a flag named in a table's first column: `--name`.
var flagName = regexp.MustCompile("`--([a-z0-9-]+)`")

// Table returns the flags the first column of the Markdown table after
// the line intro of the file at path names.
func Table(t testing.TB, path, intro string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(b), "\n"+intro+"\n")
	require.True(t, ok, "%s has the line %q", path, intro)
	names := map[string]bool{}
	started := false
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			if started {
				break
			}
			continue
		}
		started = true
		cells := strings.Split(line, "|")
		for _, m := range flagName.FindAllStringSubmatch(cells[1], -1) {
			names[m[1]] = true
		}
	}
	require.NotEmpty(t, names, "the table after %q in %s", intro, path)
	return names
}

// Undocumented returns the flags of fs that none of tables names, sorted;
// deprecated names ("deprecated name of", "old name of") are left out.
func Undocumented(fs *flag.FlagSet, tables ...map[string]bool) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, "deprecated name of") || strings.HasPrefix(f.Usage, "old name of") {
			return
		}
		for _, t := range tables {
			if t[f.Name] {
				return
			}
		}
		out = append(out, f.Name)
	})
	sort.Strings(out)
	return out
}
