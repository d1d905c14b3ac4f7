package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/lockservertest"
	"github.com/sharedcontent/sharedcontent/plugin"
)

// shortDir is a temporary directory with a path short enough for a unix
// socket (t.TempDir's names the test, and may not be).
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "scdoc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// servePlugin serves containerd-sharedcontent's gRPC server (content and
// diff) on a unix socket, over a local content store, and returns the
// socket's path.
func servePlugin(t *testing.T) string {
	t.Helper()
	dir := shortDir(t)
	cs, err := local.NewStore(filepath.Join(dir, "content"))
	require.NoError(t, err)
	address := filepath.Join(dir, "sc.sock")
	srv, err := plugin.Listen(address, cs)
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background()) }()
	t.Cleanup(func() {
		srv.Stop(context.Background())
		require.NoError(t, <-served)
	})
	return address
}

// staleSocket is a socket file nothing listens on (a crashed daemon's).
func staleSocket(t *testing.T) string {
	t.Helper()
	address := filepath.Join(shortDir(t), "dead.sock")
	ln, err := net.Listen("unix", address)
	require.NoError(t, err)
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, ln.Close())
	fi, err := os.Stat(address)
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&os.ModeSocket, "the socket file stays")
	return address
}

// deployConfig is deploy/containerd-config.toml with its socket at address.
func deployConfig(t *testing.T, address string) string {
	t.Helper()
	b, err := os.ReadFile("../../deploy/containerd-config.toml")
	require.NoError(t, err)
	require.Contains(t, string(b), deploySocket)
	return strings.ReplaceAll(string(b), deploySocket, address)
}

// without returns s without old, which must be in it.
func without(t *testing.T, s, old string) string {
	t.Helper()
	require.Contains(t, s, old)
	return strings.Replace(s, old, "", 1)
}

func writeFile(t *testing.T, path, body string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	return path
}

// writeCluster records id as root's cluster.
func writeCluster(t *testing.T, root, id string) {
	t.Helper()
	b, err := json.Marshal(contentv2.ClusterFile{ClusterID: id, CreatedAt: time.Now().UTC(), CreatedBy: "test"})
	require.NoError(t, err)
	writeFile(t, filepath.Join(root, contentv2.MetaDir, "cluster.json"), string(b))
}

// node is one node's setup: a coordinator, the plugin's socket, a root of
// the coordinator's cluster.
type node struct {
	coord  *lockservertest.Server
	socket string
	root   string
}

func newNode(t *testing.T) node {
	t.Helper()
	units, _ := bootTree(t)
	installUnit(t, units, "containerd-sharedcontent.service", deployUnit(t))
	n := node{coord: lockservertest.Start(t), socket: servePlugin(t), root: t.TempDir()}
	var nodes api.NodesResponse
	require.NoError(t, json.Unmarshal([]byte(ctl(t, "--coordinator", n.coord.URL(), "-o", "json", "node", "ls")), &nodes))
	require.NotEmpty(t, nodes.ClusterID)
	writeCluster(t, n.root, nodes.ClusterID)
	return n
}

func parseDoctor(t *testing.T, out []byte, err error) (map[string]checkResult, []string, error) {
	t.Helper()
	var results []checkResult
	require.NoError(t, json.Unmarshal(out, &results), "output: %s", out)
	byCheck := map[string]checkResult{}
	problems := []string{}
	for _, r := range results {
		require.NotContains(t, byCheck, r.Check, "one row per check")
		byCheck[r.Check] = r
		require.Contains(t, []string{checkOK, checkProblem, checkWarning, checkSkipped}, r.Result)
		require.Equal(t, r.Result == checkProblem || r.Result == checkWarning, r.Fix != "", "a fix for each problem and warning, only: %+v", r)
		if r.Result == checkProblem {
			problems = append(problems, r.Check)
		}
	}
	sort.Strings(problems)
	return byCheck, problems, err
}

func (n node) doctor(t *testing.T, config string, extra ...string) (map[string]checkResult, []string, error) {
	t.Helper()
	var out bytes.Buffer
	args := append([]string{"--coordinator", n.coord.URL(), "--root", n.root, "-o", "json", "doctor", "--containerd-config", config}, extra...)
	err := run(args, &out, io.Discard)
	return parseDoctor(t, out.Bytes(), err)
}

var allChecks = []string{"containerd config", "content plugin disabled", "content proxy", "content proxy socket",
	"diff proxy", "diff proxy socket", "transfer unpack differ", "diff service default", "CRI pull path", "CRI unpack",
	"boot order", "content sharing policy", "coordinator", "shared root", "root cluster"}

// TestDoctorHealthy: the deploy drop-in, imported by a main config whose
// own diff-service default it overrides, a live plugin, a live coordinator
// and a root of its cluster: every check ok.
func TestDoctorHealthy(t *testing.T) {
	n := newNode(t)
	dir := t.TempDir()
	main := writeFile(t, filepath.Join(dir, "config.toml"), `version = 3
imports = ["conf.d/*.toml"]
[plugins.'io.containerd.service.v1.diff-service']
  default = ["walking"]
`)
	writeFile(t, filepath.Join(dir, "conf.d", "sharedcontent.toml"), deployConfig(t, n.socket))
	results, problems, err := n.doctor(t, main)
	require.NoError(t, err)
	require.Empty(t, problems)
	require.Len(t, results, len(allChecks))
	for _, c := range allChecks {
		require.Equal(t, checkOK, results[c].Result, "%s: %+v", c, results[c])
	}
	require.Contains(t, results["containerd config"].Message, filepath.Join(dir, "conf.d", "sharedcontent.toml"), "the import was read")
	require.Contains(t, results["content proxy socket"].Message, "a gRPC server answers at "+n.socket)

	var out bytes.Buffer
	require.NoError(t, run([]string{"--coordinator", n.coord.URL(), "--root", n.root, "doctor", "--containerd-config", main}, &out, io.Discard))
	require.Contains(t, out.String(), "no problems")
	require.NotContains(t, out.String(), "fix:")
}

// TestDoctorBrokenConfig: one broken setting per case, and only its
// problem (and the checks that depend on it skipped).
func TestDoctorBrokenConfig(t *testing.T) {
	n := newNode(t)
	good := deployConfig(t, n.socket)
	const (
		disabled    = `disabled_plugins = ["io.containerd.content.v1.content"]`
		contentPP   = "[proxy_plugins.sharedcontent]\n  type = \"content\"\n"
		diffPP      = "[proxy_plugins.sharedcontent-diff]\n  type = \"diff\"\n"
		unpack      = "[[plugins.'io.containerd.transfer.v1.local'.unpack_config]]\n  platform = \"linux/amd64\"\n  snapshotter = \"overlayfs\"\n  differ = \"sharedcontent-diff\"\n"
		diffDefault = `default = ["sharedcontent-diff", "walking"]`
	)
	for _, tc := range []struct {
		name     string
		config   string
		problems []string
		skipped  []string
		message  map[string]string // check → in its message
		fix      map[string]string // check → in its fix
		inFile   bool              // the fix names the config file
	}{{
		name:     "content plugin not disabled",
		config:   without(t, good, disabled),
		problems: []string{"content plugin disabled"},
		fix:      map[string]string{"content plugin disabled": disabled},
		inFile:   true,
	}, {
		name:     "no content proxy",
		config:   without(t, good, contentPP+"  address = \""+n.socket+"\"\n"),
		problems: []string{"content proxy"},
		skipped:  []string{"content proxy socket"},
		message:  map[string]string{"content proxy": `no proxy plugin of type "content"`},
		fix:      map[string]string{"content proxy": "[proxy_plugins.sharedcontent]\n    type = \"content\"\n"},
		inFile:   true,
	}, {
		name:     "no diff proxy",
		config:   without(t, good, diffPP+"  address = \""+n.socket+"\"\n"),
		problems: []string{"diff proxy"},
		skipped:  []string{"diff proxy socket", "transfer unpack differ", "diff service default", "CRI unpack"},
		fix:      map[string]string{"diff proxy": "[proxy_plugins.sharedcontent-diff]\n    type = \"diff\"\n    address = \"" + n.socket + "\"\n"},
		inFile:   true,
	}, {
		name:     "dead socket",
		config:   strings.ReplaceAll(good, n.socket, staleSocket(t)),
		problems: []string{"content proxy socket", "diff proxy socket"},
		message:  map[string]string{"content proxy socket": "nothing answers gRPC at", "diff proxy socket": "nothing answers gRPC at"},
		fix:      map[string]string{"content proxy socket": "start containerd-sharedcontent"},
	}, {
		name:     "no socket file",
		config:   strings.ReplaceAll(good, n.socket, filepath.Join(t.TempDir(), "none.sock")),
		problems: []string{"content proxy socket", "diff proxy socket"},
		message:  map[string]string{"content proxy socket": "no socket at"},
		fix:      map[string]string{"diff proxy socket": "set [proxy_plugins.sharedcontent-diff] address"},
	}, {
		name:     "transfer differ not selected",
		config:   without(t, good, unpack),
		problems: []string{"transfer unpack differ"},
		skipped:  []string{"CRI unpack"},
		message:  map[string]string{"transfer unpack differ": "has no unpack_config"},
		fix:      map[string]string{"transfer unpack differ": "[[plugins.'io.containerd.transfer.v1.local'.unpack_config]]\n    platform = \"linux/amd64\"\n    snapshotter = \"overlayfs\"\n    differ = \"sharedcontent-diff\""},
		inFile:   true,
	}, {
		name:     "transfer differ another",
		config:   strings.Replace(good, `differ = "sharedcontent-diff"`, `differ = "walking"`, 1),
		problems: []string{"transfer unpack differ"},
		message:  map[string]string{"transfer unpack differ": `linux/amd64 (differ "walking")`},
		fix:      map[string]string{"transfer unpack differ": `differ = "sharedcontent-diff"`},
		inFile:   true,
	}, {
		name:     "diff service default not selected",
		config:   strings.Replace(good, diffDefault, `default = ["walking"]`, 1),
		problems: []string{"diff service default"},
		fix:      map[string]string{"diff service default": "[plugins.'io.containerd.service.v1.diff-service']\n    default = [\"sharedcontent-diff\", \"walking\"]"},
		inFile:   true,
	}, {
		name:     "no diff service table",
		config:   without(t, good, "[plugins.'io.containerd.service.v1.diff-service']\n  "+diffDefault+"\n"),
		problems: []string{"diff service default"},
		message:  map[string]string{"diff service default": "has no [plugins.'io.containerd.service.v1.diff-service'] default"},
		fix:      map[string]string{"diff service default": "[plugins.'io.containerd.service.v1.diff-service']\n    default = [\"sharedcontent-diff\", \"walking\"]"},
		inFile:   true,
	}, {
		name:     "isolated policy",
		config:   good + "\n[plugins.'io.containerd.metadata.v1.bolt']\n  content_sharing_policy = \"isolated\"\n",
		problems: []string{"content sharing policy"},
		message:  map[string]string{"content sharing policy": `content_sharing_policy = "isolated"`},
		fix:      map[string]string{"content sharing policy": `content_sharing_policy = "shared"`},
		inFile:   true,
	}, {
		name:     "version 1",
		config:   without(t, good, "version = 3\n"),
		problems: []string{"containerd config"},
		message:  map[string]string{"containerd config": "config version 1 (or no version line)"},
		fix:      map[string]string{"containerd config": "version = 3"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			config := writeFile(t, filepath.Join(t.TempDir(), "config.toml"), tc.config)
			results, problems, err := n.doctor(t, config)
			want := append([]string(nil), tc.problems...)
			sort.Strings(want)
			require.Equal(t, want, problems, "%+v", results)
			require.EqualError(t, err, problemsText(len(want)))
			for _, c := range tc.skipped {
				require.Equal(t, checkSkipped, results[c].Result, c)
			}
			for _, c := range allChecks {
				if !slices.Contains(want, c) && !slices.Contains(tc.skipped, c) {
					require.Equal(t, checkOK, results[c].Result, "%s: %+v", c, results[c])
				}
			}
			for c, s := range tc.message {
				require.Contains(t, results[c].Message, s, c)
			}
			for c, s := range tc.fix {
				require.Contains(t, results[c].Fix, s, c)
			}
			if tc.inFile {
				require.Contains(t, results[tc.problems[0]].Fix, config, "the fix names the file")
			}
		})
	}
}

// TestDoctorUnreadableConfig: no config file, every containerd check
// skipped.
func TestDoctorUnreadableConfig(t *testing.T) {
	n := newNode(t)
	results, problems, err := n.doctor(t, filepath.Join(t.TempDir(), "missing.toml"))
	require.EqualError(t, err, "1 problem")
	require.Equal(t, []string{"containerd config"}, problems)
	require.Contains(t, results["containerd config"].Message, "no such file")
	for _, c := range allChecks[1:9] {
		require.Equal(t, checkSkipped, results[c].Result, c)
	}
	require.Equal(t, checkOK, results["coordinator"].Result)
}

// TestDoctorWrongCluster: a root another coordinator's cluster recorded.
func TestDoctorWrongCluster(t *testing.T) {
	n := newNode(t)
	writeCluster(t, n.root, "another-cluster")
	config := writeFile(t, filepath.Join(t.TempDir(), "config.toml"), deployConfig(t, n.socket))
	results, problems, err := n.doctor(t, config)
	require.EqualError(t, err, "1 problem")
	require.Equal(t, []string{"root cluster"}, problems)
	require.Contains(t, results["root cluster"].Message, "belongs to cluster another-cluster")
	require.Contains(t, results["root cluster"].Fix, "cluster adopt --root "+n.root)
	require.Equal(t, checkOK, results["shared root"].Result)
}

// TestDoctorCoordinatorDown: unreachable reported, the cluster comparison
// skipped; the root is still checked.
func TestDoctorCoordinatorDown(t *testing.T) {
	n := newNode(t)
	n.coord.Stop()
	config := writeFile(t, filepath.Join(t.TempDir(), "config.toml"), deployConfig(t, n.socket))
	results, problems, err := n.doctor(t, config)
	require.EqualError(t, err, "1 problem")
	require.Equal(t, []string{"coordinator"}, problems)
	require.Contains(t, results["coordinator"].Message, "is unreachable")
	require.Contains(t, results["coordinator"].Fix, "start the coordinator")
	require.Equal(t, checkSkipped, results["root cluster"].Result)
	require.Contains(t, results["root cluster"].Message, "coordinator is unreachable")
	require.Equal(t, checkOK, results["shared root"].Result)
}

// TestDoctorRoot: no --root skips the root's checks; a root that is a
// file, or missing, is a problem (and doctor does not create it).
func TestDoctorRoot(t *testing.T) {
	n := newNode(t)
	config := writeFile(t, filepath.Join(t.TempDir(), "config.toml"), deployConfig(t, n.socket))

	var out bytes.Buffer
	err := run([]string{"--coordinator", n.coord.URL(), "-o", "json", "doctor", "--containerd-config", config}, &out, io.Discard)
	results, problems, err := parseDoctor(t, out.Bytes(), err)
	require.NoError(t, err)
	require.Empty(t, problems)
	require.Equal(t, checkSkipped, results["shared root"].Result)
	require.Equal(t, "no --root given", results["root cluster"].Message)

	file := writeFile(t, filepath.Join(t.TempDir(), "a-file"), "x")
	n.root = file
	results, problems, err = n.doctor(t, config)
	require.EqualError(t, err, "1 problem")
	require.Equal(t, []string{"shared root"}, problems)
	require.Contains(t, results["shared root"].Message, "is not a directory (it is a regular file)")
	require.Equal(t, "point the root (--root) at a directory on the shared storage", results["shared root"].Fix)

	n.root = filepath.Join(t.TempDir(), "missing")
	results, _, err = n.doctor(t, config)
	require.EqualError(t, err, "1 problem")
	require.Contains(t, results["shared root"].Fix, "mount the shared storage at "+n.root)
	_, err = os.Stat(n.root)
	require.True(t, os.IsNotExist(err), "doctor creates no root")
	require.Equal(t, checkSkipped, results["root cluster"].Result)
}

// TestContainerdConfigMerge: imports merged as containerd 2.x merges them
// (cmd/containerd/server/config: mergeConfig). A relative import is
// relative to its importer; lists of the top level are appended; a proxy
// plugin replaces the one of its name; plugin tables merge key by key,
// each value replaced whole.
func TestContainerdConfigMerge(t *testing.T) {
	dir := t.TempDir()
	main := writeFile(t, filepath.Join(dir, "config.toml"), `version = 3
imports = ["d/one.toml", "d/*.glob.toml"]
disabled_plugins = ["a"]
[proxy_plugins.p]
  type = "content"
  address = "/main.sock"
[plugins.'x']
  kept = 1
  list = ["main"]
`)
	writeFile(t, filepath.Join(dir, "d", "one.toml"), `version = 2
disabled_plugins = ["a", "b"]
[proxy_plugins.p]
  type = "diff"
[plugins.'x']
  list = ["one"]
`)
	writeFile(t, filepath.Join(dir, "d", "two.glob.toml"), `imports = ["one.toml"]
[plugins.'y'.nested]
  z = "two"
`)
	cfg, err := loadContainerdConfig(main)
	require.NoError(t, err)
	require.Equal(t, []string{main, filepath.Join(dir, "d", "one.toml"), filepath.Join(dir, "d", "two.glob.toml")}, cfg.Files,
		"one.toml is read once")
	require.Equal(t, []string{filepath.Join(dir, "d", "two.glob.toml")}, cfg.OldFiles, "no version line")
	require.Equal(t, []string{"a", "b"}, cfg.DisabledPlugins)
	require.Equal(t, map[string]proxyPlugin{"p": {Type: "diff"}}, cfg.ProxyPlugins, "replaced whole")
	require.EqualValues(t, 1, cfg.plugin("x", "kept"))
	require.Equal(t, []any{"one"}, cfg.plugin("x", "list"))
	require.Equal(t, "two", cfg.plugin("y", "nested", "z"))
	require.Nil(t, cfg.plugin("y", "missing", "z"))

	writeFile(t, filepath.Join(dir, "bad.toml"), "version = 3\n[plugins\n")
	_, err = loadContainerdConfig(filepath.Join(dir, "bad.toml"))
	require.ErrorContains(t, err, "bad.toml")
}

// TestDoctorCompiledIn: a containerd with sharedcontent compiled in
// (plugin/builtin) has no proxies and unpacks with its own differ; doctor
// checks its plugin table instead, and flags a content proxy configured as
// well, or a missing coordinator.
func TestDoctorCompiledIn(t *testing.T) {
	n := newNode(t)
	dir := t.TempDir()
	table := fmt.Sprintf("[plugins.'io.containerd.content.v1.sharedcontent']\n  root = %q\n  lock_server = %q\n", n.root, n.coord.URL())
	const header = "version = 3\ndisabled_plugins = [\"io.containerd.content.v1.content\"]\n"

	results, problems, err := n.doctor(t, writeFile(t, filepath.Join(dir, "ok.toml"), header+table))
	require.NoError(t, err)
	require.Empty(t, problems)
	require.Len(t, results, len(allChecks)+1)
	require.Equal(t, checkOK, results["compiled-in store"].Result)
	require.Contains(t, results["compiled-in store"].Message, "coordinator "+n.coord.URL())
	for _, c := range []string{"content proxy", "content proxy socket", "diff proxy", "diff proxy socket", "transfer unpack differ", "diff service default"} {
		require.Equal(t, checkSkipped, results[c].Result, "%s: %+v", c, results[c])
	}
	for _, c := range []string{"containerd config", "content plugin disabled", "content sharing policy", "coordinator", "shared root", "root cluster"} {
		require.Equal(t, checkOK, results[c].Result, "%s: %+v", c, results[c])
	}

	// A content proxy as well: two content plugins.
	both := header + table + "[proxy_plugins.sharedcontent]\n  type = \"content\"\n  address = \"/run/sharedcontent/sharedcontent.sock\"\n"
	results, problems, err = n.doctor(t, writeFile(t, filepath.Join(dir, "both.toml"), both))
	require.EqualError(t, err, "1 problem")
	require.Equal(t, []string{"content proxy"}, problems)
	require.Contains(t, results["content proxy"].Message, "exactly one content plugin")
	require.Contains(t, results["content proxy"].Fix, "remove [proxy_plugins.sharedcontent]")

	// No coordinator.
	noServer := header + fmt.Sprintf("[plugins.'io.containerd.content.v1.sharedcontent']\n  root = %q\n", n.root)
	results, problems, err = n.doctor(t, writeFile(t, filepath.Join(dir, "noserver.toml"), noServer))
	require.EqualError(t, err, "1 problem")
	require.Equal(t, []string{"compiled-in store"}, problems)
	require.Contains(t, results["compiled-in store"].Fix, "set coordinator")
}

// TestDoctorConfigOnly: --config-only, as the Helm chart's init container
// runs it before the daemon starts, checks containerd's config alone: no
// socket, no coordinator, no root is a problem then, and a config problem
// still fails with the lines to add.
func TestDoctorConfigOnly(t *testing.T) {
	units, _ := bootTree(t)
	installUnit(t, units, "containerd-sharedcontent.service", deployUnit(t))
	dead := filepath.Join(shortDir(t), "absent.sock")
	config := writeFile(t, filepath.Join(t.TempDir(), "config.toml"), deployConfig(t, dead))
	doctor := func(config string) (map[string]checkResult, []string, error) {
		var out bytes.Buffer
		// Nothing listens at this coordinator URL, and the root is absent.
		err := run([]string{"--coordinator", "http://127.0.0.1:1", "--root", filepath.Join(t.TempDir(), "absent"),
			"-o", "json", "doctor", "--config-only", "--containerd-config", config}, &out, io.Discard)
		return parseDoctor(t, out.Bytes(), err)
	}
	results, problems, err := doctor(config)
	require.NoError(t, err)
	require.Empty(t, problems)
	require.Len(t, results, len(allChecks))
	for _, c := range []string{"content proxy socket", "diff proxy socket", "coordinator", "shared root", "root cluster"} {
		require.Equal(t, checkSkipped, results[c].Result, "%s: %+v", c, results[c])
	}
	require.Equal(t, checkOK, results["transfer unpack differ"].Result)

	b, err := os.ReadFile(config)
	require.NoError(t, err)
	broken := writeFile(t, filepath.Join(t.TempDir(), "config.toml"),
		without(t, string(b), `disabled_plugins = ["io.containerd.content.v1.content"]`))
	results, problems, err = doctor(broken)
	require.EqualError(t, err, "1 problem")
	require.Equal(t, []string{"content plugin disabled"}, problems)
	require.Contains(t, results["content plugin disabled"].Fix, `disabled_plugins = ["io.containerd.content.v1.content"]`)
}
