package check

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// envFiles pairs each systemd unit with the example of the environment file
// it reads (EnvironmentFile=).
var envFiles = []struct{ unit, example, binary string }{
	{"../systemd/sharedcontent-lockserver.service", "../systemd/lockserver.env.example", "sharedcontent-lockserver"},
	{"../systemd/sharedcontent-lockserver.service", "../systemd/lockserver-replica.env.example", "sharedcontent-lockserver"},
	{"../systemd/containerd-sharedcontent.service", "../sharedcontent.env.example", "containerd-sharedcontent"},
}

var (
	// envVar is a variable an environment file sets, or shows commented out.
	envVar = regexp.MustCompile(`^#?\s*(SHAREDCONTENT_[A-Z0-9_]+)=`)
	// flagName is a string that can name a flag.
	flagName = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
)

// flagNames returns every string literal that may name a flag of binary:
// the string arguments of the calls in its cmd/ package, and in the files
// outside it that register flags on a *flag.FlagSet (the coordinator's
// flags, cmd/internal), that take the flag set fs (fs.StringVar(&v,
// "name", ...), an alias helper alias(fs, "old", ...)). Read from the
// source, so that it holds whichever package a flag moves to; it may
// accept a little more than the flags (a default such as "info"), never
// less.
func flagNames(t *testing.T, binary string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	own := filepath.Join("cmd", binary)
	walkCode(t, func(rel string, src []byte) {
		dir := filepath.Dir(rel)
		if strings.HasPrefix(dir, "cmd"+string(filepath.Separator)) && dir != own &&
			!strings.HasPrefix(dir, filepath.Join("cmd", "internal")) {
			return // another binary's flags
		}
		if dir != own && !strings.Contains(string(src), "flag.FlagSet") {
			return
		}
		addFlagLiterals(t, rel, src, names)
	})
	require.True(t, names["log-level"] && names["data-dir"],
		"%s: its flags were not found (%d names): has the way they are defined changed?", binary, len(names))
	return names
}

// addFlagLiterals adds the string arguments of every call in src that
// involves the identifier fs (as the receiver or an argument).
func addFlagLiterals(t *testing.T, path string, src []byte, names map[string]bool) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
	require.NoError(t, err)
	isFS := func(e ast.Expr) bool {
		id, ok := e.(*ast.Ident)
		return ok && id.Name == "fs"
	}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		involved := false
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && isFS(sel.X) {
			involved = true
		}
		for _, a := range call.Args {
			involved = involved || isFS(a)
		}
		if !involved {
			return true
		}
		for _, a := range call.Args {
			switch a := a.(type) {
			case *ast.BasicLit:
				if s, err := strconv.Unquote(a.Value); err == nil && a.Kind == token.STRING && flagName.MatchString(s) {
					names[s] = true
				}
			case *ast.SelectorExpr: // cli.ConfigFlag and such
				if a.Sel.Name == "ConfigFlag" {
					names["config"] = true
				}
			}
		}
		return true
	})
}

// TestEnvironmentFiles: each unit reads the environment file its example
// says it installs as, and every variable the example sets (or shows
// commented out) is SHAREDCONTENT_<FLAG> of a flag the binary has, so
// that no example sets a variable the daemon ignores.
func TestEnvironmentFiles(t *testing.T) {
	for _, e := range envFiles {
		t.Run(filepath.Base(e.example), func(t *testing.T) {
			u := parseUnit(t, e.unit)
			envFile := strings.TrimPrefix(u.one(t, "Service", "EnvironmentFile"), "-")

			f, err := os.Open(e.example)
			require.NoError(t, err)
			defer f.Close()
			sc := bufio.NewScanner(f)
			require.True(t, sc.Scan(), "%s is empty", e.example)
			first := strings.Fields(strings.TrimPrefix(sc.Text(), "#"))
			require.NotEmpty(t, first, "%s: the first line names the file to install it as", e.example)
			require.Equal(t, envFile, first[0],
				"%s: installed as %s, but the unit reads %s", e.example, first[0], envFile)

			flags := flagNames(t, e.binary)
			var set []string
			for n := 2; sc.Scan(); n++ {
				m := envVar.FindStringSubmatch(strings.TrimSpace(sc.Text()))
				if m == nil {
					continue
				}
				set = append(set, m[1])
				flag := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(m[1], "SHAREDCONTENT_")), "_", "-")
				require.True(t, flags[flag], "%s:%d: %s is no flag of %s (--%s)", e.example, n, m[1], e.binary, flag)
			}
			require.NoError(t, sc.Err())
			require.NotEmpty(t, set, "%s sets no variable", e.example)
		})
	}
}

// TestFlagNamesPerBinary: the scan keeps each binary's flags apart, so a
// variable of another binary's flag would fail TestEnvironmentFiles.
func TestFlagNamesPerBinary(t *testing.T) {
	node := flagNames(t, "containerd-sharedcontent")
	require.True(t, node["root"] && node["node-id"] && node["node-tokens-file"])
	require.False(t, node["dry-run"], "sharedcontentctl's --dry-run is not the daemon's")
	coord := flagNames(t, "sharedcontent-lockserver")
	require.True(t, coord["listen"] && coord["admin-token-file"] && coord["config"])
	require.False(t, coord["root"], "the node daemon's --root is not the coordinator's")
}
