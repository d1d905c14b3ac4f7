package layers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// ranks orders the module's packages from the bottom (0) up; a package
// may import only a package of a lower rank (or its parent or child
// directory of its own rank). A key ending in "/..." names every package
// below that directory; an exact key wins over a pattern.
var ranks = map[string]int{
	"internal/...":               0,
	"internal/testutil/etcdtest": 1, // a real etcd cluster for tests (its TLS from testca)
	"internal/prefetch":          1, // fetches an image resolved by internal/registry (docs/design.md §5.9)
	"refcount":                   10,
	"refcount/...":               10,
	"refcount/etcdstore":         10, // the Storage on etcd (docs/design.md §7)
	"lockserver/api":             20,
	"internal/testutil/renew":    25, // keeps a test node's session (wire types only)
	"lockserver":                 30,
	"internal/testutil/members":  35, // opens test nodes' sessions at a lockserver.Coordinator
	"lockserver/httpserver":      40,
	"lockserver/election":        45, // a replica's etcd election loop (docs/design.md §7)
	"lockserver/lockservertest":  50,
	"lockclient":                 60,
	"contentv2":                  70,
	"contentv2/...":              80,
	"internal/testutil/oldnode":  82, // an older node's wire shape over contentv2/remote (docs/design.md §10.7)
	"contentv2/contentv2test":    85,
	"plugin":                     90,
	"plugin/builtin":             100,
	"internal/hostinstall":       105, // installs the daemon as a host service (talks to it as containerd does)
	"cmd/internal/...":           110,
	"cmd/...":                    120,
	"integration":                130,
	"integration/...":            130,
}

// notAllowed names imports that a package may not have outside its tests
// even though they point down: contentv2 speaks only its own Coordinator
// interface (contentv2/remote adapts lockclient to it), and the lock
// manager reaches no HTTP type (lockserver/httpserver serves it). A key or
// value ending in "/..." names a directory and every package below it;
// standard library packages are named as imported.
var notAllowed = map[string][]string{
	"contentv2":  {"lockclient/...", "lockserver/..."},
	"lockserver": {"net/http", "github.com/valyala/fasthttp/..."},
}

// allowedAnyway are the exceptions to notAllowed: contentv2 uses the
// coordinator's vocabulary, lockserver/api (its lock request, operation
// types, reap modes and error sentinels: one name per idea), but none of
// the packages that implement or reach the coordinator.
var allowedAnyway = map[string][]string{
	"contentv2": {"lockserver/api"},
}

// knownViolations are imports that break the layers but are accepted for
// now, each with its reason. The test fails on an entry that no longer
// occurs, so that the list stays exact. It is empty: keep it so.
var knownViolations = []string{}

// buildTags are the build configurations whose imports are checked.
var buildTags = []string{"", "failpoints"}

// pkg is the part of `go list -json` the test reads.
type pkg struct {
	ImportPath   string
	Module       *struct{ Path string }
	Imports      []string
	TestImports  []string
	XTestImports []string
}

func TestLayers(t *testing.T) {
	pkgs := listPackages(t)
	found := check(pkgs)
	var fail []string
	for _, v := range found {
		if !slices.Contains(knownViolations, v) {
			fail = append(fail, v)
		}
	}
	for _, k := range knownViolations {
		if !slices.Contains(found, k) {
			fail = append(fail, "fixed, remove it from knownViolations: "+k)
		}
	}
	if len(fail) > 0 {
		t.Errorf("package layers broken (see doc.go):\n\t%s", strings.Join(fail, "\n\t"))
	}
}

// TestCheck runs the rules on a made-up module, so that each can be seen
// to fail.
func TestCheck(t *testing.T) {
	const m = "example.com/m"
	p := func(path string, imports, testImports []string) pkg {
		q := pkg{ImportPath: m + "/" + path, Module: &struct{ Path string }{m}}
		for _, i := range imports {
			q.Imports = append(q.Imports, m+"/"+i)
		}
		for _, i := range testImports {
			q.XTestImports = append(q.XTestImports, m+"/"+i)
		}
		return q
	}
	for _, tc := range []struct {
		name string
		pkg  pkg
		want []string
	}{
		{"down", p("lockclient", []string{"lockserver/api", "internal/tokenfile"}, nil), nil},
		{"up", p("refcount", []string{"lockserver/api"}, nil), []string{"refcount -> lockserver/api"}},
		{"up in a test", p("refcount", nil, []string{"lockserver/api"}), nil},
		{"child", p("refcount/storagetest", []string{"refcount"}, nil), nil},
		{"sibling", p("internal/a", []string{"internal/b"}, nil), []string{"internal/a -> internal/b (same rank)"}},
		{"integration", p("lockserver", nil, []string{"integration/x"}), []string{"lockserver -> integration/x (imports integration/ or cmd/)"}},
		{"cmd", p("plugin", nil, []string{"cmd/x"}), []string{"plugin -> cmd/x (imports integration/ or cmd/)"}},
		{"cmd/internal from cmd", p("cmd/x", []string{"cmd/internal/cli"}, nil), nil},
		{"cmd/internal from elsewhere", p("integration", nil, []string{"cmd/internal/cli"}), []string{"integration -> cmd/internal/cli (imports integration/ or cmd/)"}},
		{"not allowed", p("contentv2", []string{"lockclient", "lockserver/httpserver"}, nil), []string{"contentv2 -> lockclient (not allowed)", "contentv2 -> lockserver/httpserver (not allowed)"}},
		{"allowed anyway", p("contentv2", []string{"lockserver/api"}, nil), nil},
		{"not allowed in a test", p("contentv2", nil, []string{"lockclient"}), nil},
		{"unranked", p("newpkg", nil, nil), []string{"newpkg: not ranked in layers_test.go"}},
		{"outside the module", pkg{ImportPath: m + "/plugin", Module: &struct{ Path string }{m}, Imports: []string{"context", "github.com/containerd/log"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := check([]pkg{tc.pkg}); !slices.Equal(got, tc.want) {
				t.Errorf("check = %q, want %q", got, tc.want)
			}
		})
	}
}

// listPackages runs `go list -json ./...` at the module's root in each of
// buildTags and merges what it finds.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	byPath := map[string]*pkg{}
	var order []string
	for _, tags := range buildTags {
		cmd := exec.Command("go", "list", "-json", "-tags="+tags, "./...")
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -tags=%q ./... in %s: %v\n%s", tags, root, err, stderr.String())
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			var p pkg
			if err := dec.Decode(&p); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("go list output: %v", err)
			}
			q, ok := byPath[p.ImportPath]
			if !ok {
				byPath[p.ImportPath] = &p
				order = append(order, p.ImportPath)
				continue
			}
			q.Imports = union(q.Imports, p.Imports)
			q.TestImports = union(q.TestImports, p.TestImports)
			q.XTestImports = union(q.XTestImports, p.XTestImports)
		}
	}
	if len(order) == 0 {
		t.Fatal("go list found no package")
	}
	pkgs := make([]pkg, 0, len(order))
	for _, path := range order {
		pkgs = append(pkgs, *byPath[path])
	}
	return pkgs
}

func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}

// check returns the broken rules, sorted, each as "importer -> imported"
// with the module's prefix cut off.
func check(pkgs []pkg) []string {
	var found []string
	for _, p := range pkgs {
		if p.Module == nil {
			continue
		}
		self, _ := strings.CutPrefix(p.ImportPath, p.Module.Path+"/")
		rank, ok := rankOf(self)
		if !ok {
			found = append(found, self+": not ranked in layers_test.go")
			continue
		}
		local := func(imports []string) []string {
			var l []string
			for _, i := range imports {
				if rel, ok := strings.CutPrefix(i, p.Module.Path+"/"); ok {
					l = append(l, rel)
				}
			}
			return l
		}
		all := union(union(local(p.Imports), local(p.TestImports)), local(p.XTestImports))
		for _, dep := range all {
			if dep == self {
				continue // an external test package
			}
			if forbidden(self, dep) {
				found = append(found, self+" -> "+dep+" (imports integration/ or cmd/)")
			}
		}
		for _, imp := range p.Imports {
			dep, _ := strings.CutPrefix(imp, p.Module.Path+"/")
			if matches(self, notAllowed, dep) && !matches(self, allowedAnyway, dep) {
				found = append(found, self+" -> "+dep+" (not allowed)")
			}
		}
		for _, dep := range local(p.Imports) {
			if forbidden(self, dep) {
				continue
			}
			depRank, ok := rankOf(dep)
			switch {
			case !ok:
				// reported when dep itself is checked
			case depRank > rank:
				found = append(found, self+" -> "+dep)
			case depRank == rank && !nested(self, dep):
				found = append(found, fmt.Sprintf("%s -> %s (same rank)", self, dep))
			}
		}
	}
	sort.Strings(found)
	return slices.Compact(found)
}

// rankOf returns path's rank: its exact entry, else the entry of the
// longest "dir/..." pattern above it.
func rankOf(path string) (int, bool) {
	if r, ok := ranks[path]; ok {
		return r, true
	}
	best, rank := "", 0
	for k, r := range ranks {
		dir, ok := strings.CutSuffix(k, "/...")
		if ok && strings.HasPrefix(path, dir+"/") && len(dir) > len(best) {
			best, rank = dir, r
		}
	}
	return rank, best != ""
}

// matches reports whether rules, for the package self, name dep.
func matches(self string, rules map[string][]string, dep string) bool {
	for k, deps := range rules {
		if !match(k, self) {
			continue
		}
		for _, d := range deps {
			if match(d, dep) {
				return true
			}
		}
	}
	return false
}

// match reports whether path is pattern, or below it if pattern ends in
// "/...".
func match(pattern, path string) bool {
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return under(path, dir)
	}
	return path == pattern
}

// forbidden reports whether from may not import to even in a test.
func forbidden(from, to string) bool {
	if under(to, "cmd/internal") {
		return !under(from, "cmd")
	}
	return under(to, "integration") || under(to, "cmd")
}

// under reports whether path is dir or below it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// nested reports whether one of a and b is the other's parent directory
// (or any ancestor).
func nested(a, b string) bool {
	return under(a, b) || under(b, a)
}
