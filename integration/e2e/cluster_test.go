package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

const (
	// leaseTTL is the coordinator's lease lifetime (the default of docs/design.md §3.5): a
	// crashed holder delays the others at most this long.
	leaseTTL = 15 * time.Second
	// stopGrace bounds a daemon's clean shutdown before it is killed.
	stopGrace = 15 * time.Second
	// startTimeout bounds a daemon's start (race-built daemons are slower).
	startTimeout = 30 * time.Second
	// localContentPlugin is containerd's built-in content store plugin; its
	// root is <containerd root>/<its id>.
	localContentPlugin = "io.containerd.content.v1.content"
)

// lockServer is a sharedcontent-lockserver process.
type lockServer struct {
	e       *env
	addr    string // host:port, stable across restarts
	dataDir string
	args    []string // extra flags, on every start
	// bin is the binary to run (empty: bins.lockserver) and env its
	// extra environment, on every start.
	bin string
	env []string
	// log is its log file, relative to the env's directory (empty:
	// lockserver.log); replicas of one test each need their own.
	log string
	p   *proc
}

// startLockServer starts sharedcontent-lockserver on a free loopback port,
// with args added to the harness's flags.
func (e *env) startLockServer(args ...string) *lockServer {
	e.t.Helper()
	return e.startLockServerAt(e.path("lockserver"), args...)
}

// startLockServerAt is startLockServer with its data in dataDir.
func (e *env) startLockServerAt(dataDir string, args ...string) *lockServer {
	e.t.Helper()
	l := &lockServer{e: e, addr: freePort(e.t), dataDir: dataDir, args: args}
	if err := os.MkdirAll(l.dataDir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	l.start()
	e.onCleanup(func() { l.p.stop(stopGrace) })
	return l
}

func (l *lockServer) start() {
	l.e.t.Helper()
	l.launch()
	l.waitReady()
}

// launch starts the coordinator process without waiting for it.
func (l *lockServer) launch() {
	l.e.t.Helper()
	bin := l.bin
	if bin == "" {
		bin = bins.lockserver
	}
	argv := append([]string{bin,
		"--listen", l.addr, "--data-dir", l.dataDir,
		"--lease-ttl", leaseTTL.String(), "--log-level", "debug"}, l.args...)
	log := l.log
	if log == "" {
		log = "lockserver.log"
	}
	l.p = l.e.start(strings.TrimSuffix(log, ".log"), log, l.env, argv...)
}

// waitReady waits until the coordinator answers /readyz.
func (l *lockServer) waitReady() {
	t := l.e.t
	t.Helper()
	waitFor(t, "coordinator /readyz", startTimeout, func() (bool, error) {
		if l.p.exited() {
			return false, dead(l.p)
		}
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(l.url() + "/readyz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("readyz: %s", resp.Status)
	})
}

// restart stops the coordinator cleanly and starts it again on the same
// address and data directory.
func (l *lockServer) restart() {
	l.e.t.Helper()
	if l.p.stop(stopGrace) {
		l.e.t.Errorf("coordinator did not stop within %v of SIGTERM", stopGrace)
	}
	l.start()
}

func (l *lockServer) url() string { return "http://" + l.addr }

// refs returns the nodes the coordinator records as references of dgst,
// sorted.
func (l *lockServer) refs(dgst string) ([]string, error) {
	var r api.RefsResponse
	if err := l.get("/refs?resource_id="+url.QueryEscape(dgst), &r); err != nil {
		return nil, err
	}
	return sorted(r.Nodes), nil
}

// status returns the state of the (typ, dgst) lock.
func (l *lockServer) status(typ, dgst string) (api.StatusResponse, error) {
	var s api.StatusResponse
	err := l.get("/lock/status?type="+typ+"&resource_id="+url.QueryEscape(dgst), &s)
	return s, err
}

func (l *lockServer) get(path string, v any) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(l.url() + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	return json.Unmarshal(b, v)
}

// freePort returns a loopback address nobody listens on right now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// node is one containerd daemon with its own root, state and sockets, and
// (unless stock) its containerd-sharedcontent plugin.
type node struct {
	e      *env
	id     string
	dir    string
	sock   string // containerd's gRPC socket
	shared string // the shared content directory, as this node mounts it (its --root)

	// sharedcontent nodes only
	pluginSock string
	lockURL    string   // empty: the plugin embeds a coordinator
	pluginArgs []string // extra flags, on every start
	// pluginBin is the plugin binary (empty: bins.plugin) and pluginEnv
	// its extra environment, on every start.
	pluginBin string
	pluginEnv []string
	// oldFlags: pluginBin is an earlier commit's (upgrade_test.go), so
	// only the flags it knows: no --containerd-address, --drain-timeout.
	oldFlags bool
	// drains keeps the plugin's default --drain-timeout; else it is 0:
	// tests restart plugins under containerd often, and each drain
	// would wait its quiet time (upgrade_test.go tests the drain).
	drains bool
	// noDiffer leaves the sharedcontent-diff plugin out of containerd's
	// config (content proxy only: containerd unpacks with its own differ,
	// reading layers through the content proxy).
	noDiffer bool

	containerd *proc
	plugin     *proc // nil for stock nodes
	// containerdBin is the containerd binary to run; empty: the pinned
	// containerd (bins.containerd).
	containerdBin string
	// coordinator is the node's own coordinator (compiled-in nodes), or
	// nil; stopped with the node.
	coordinator *lockServer
}

// startStockNodes starts n containerd daemons with the built-in content
// store, each <root>/io.containerd.content.v1.content a symlink to shared
// (containerd 2.2 has no option to place the content store elsewhere).
// Their directories are <dir>/<prefix>/n<i>.
func (e *env) startStockNodes(prefix string, n int, shared string) []*node {
	e.t.Helper()
	var nodes []*node
	for i := 1; i <= n; i++ {
		nd := e.newNode(prefix, fmt.Sprintf("n%d", i), shared)
		nd.startStock()
		nodes = append(nodes, nd)
	}
	return nodes
}

// startStock starts the node's containerd with the built-in content
// store, its content directory a symlink to the node's shared directory.
func (n *node) startStock() {
	if err := os.MkdirAll(filepath.Join(n.dir, "root"), 0o711); err != nil {
		n.e.t.Fatal(err)
	}
	if err := os.Symlink(n.shared, filepath.Join(n.dir, "root", localContentPlugin)); err != nil {
		n.e.t.Fatal(err)
	}
	n.startContainerd(n.config(false))
}

// builtinBins are the containerd binaries of the compiled-in nodes,
// built by integration/tools/builtin/build.sh at the containerd version
// of the main module (not the pinned one): containerd's own, and the same
// with plugin/builtin.
var builtinBins struct{ stock, builtin, version string }

// buildBuiltin builds builtinBins next to the pinned binaries.
func buildBuiltin(t *testing.T) {
	t.Helper()
	dir := filepath.Join(filepath.Dir(bins.containerd), "builtin")
	out, err := run(repoRoot, nil, "bash", filepath.Join(repoRoot, "integration", "tools", "builtin", "build.sh"), dir)
	require.NoError(t, err, "integration/tools/builtin/build.sh:\n%s", tail(out, 30))
	t.Logf("e2e: %s", lastLine(out))
	builtinBins.stock = filepath.Join(dir, "containerd")
	builtinBins.builtin = filepath.Join(dir, "containerd-sharedcontent")
	v, err := run(repoRoot, nil, builtinBins.stock, "--version")
	require.NoError(t, err)
	builtinBins.version = strings.TrimSpace(v)
}

// builtinContentPlugin is the content plugin of plugin/builtin.
const builtinContentPlugin = "io.containerd.content.v1.sharedcontent"

// startBuiltinNode starts a node running containerd with sharedcontent
// compiled in (builtinBins.builtin), on root shared, with the coordinator
// at lockURL, or one of its own when lockURL is empty (plugin/builtin
// embeds none). containerd unpacks with its own differ.
func (e *env) startBuiltinNode(id, shared, lockURL string) *node {
	e.t.Helper()
	nd := e.newNode("", id, shared)
	if lockURL == "" {
		nd.coordinator = e.startLockServerAt(filepath.Join(nd.dir, "coordinator"))
		lockURL = nd.coordinator.url()
	}
	nd.containerdBin = builtinBins.builtin
	cfg := map[string]any{}
	if err := toml.Unmarshal(nd.config(false), &cfg); err != nil {
		e.t.Fatal(err)
	}
	disabled, _ := cfg["disabled_plugins"].([]any)
	cfg["disabled_plugins"] = append(disabled, localContentPlugin)
	cfg["plugins"].(map[string]any)[builtinContentPlugin] = map[string]any{
		"root": shared, "node_id": id, "coordinator": lockURL, "state_dir": filepath.Join(nd.dir, "sharedcontent-state"),
	}
	b, err := toml.Marshal(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	nd.startContainerd(b)
	return nd
}

// startSharedNodes starts one node per root, n1, n2, …, each
// containerd-sharedcontent (root roots[i], coordinator lockURL) plus a
// containerd configured from deploy/containerd-config.toml.
func (e *env) startSharedNodes(roots []string, lockURL string) []*node {
	e.t.Helper()
	var nodes []*node
	for i, root := range roots {
		nodes = append(nodes, e.startSharedNode(fmt.Sprintf("n%d", i+1), root, lockURL))
	}
	return nodes
}

// startSharedNode starts one node: containerd-sharedcontent (root shared,
// coordinator lockURL, or an embedded one when it is empty, and
// pluginArgs) plus containerd.
func (e *env) startSharedNode(id, shared, lockURL string, pluginArgs ...string) *node {
	e.t.Helper()
	nd := e.newSharedNode(id, shared, lockURL, pluginArgs...)
	nd.startPlugin()
	nd.startContainerd(nd.config(true))
	return nd
}

// newSharedNode prepares a sharedcontent node without starting anything.
func (e *env) newSharedNode(id, shared, lockURL string, pluginArgs ...string) *node {
	e.t.Helper()
	nd := e.newNode("", id, shared)
	nd.pluginSock = filepath.Join(nd.dir, "sc.sock")
	nd.lockURL = lockURL
	nd.pluginArgs = pluginArgs
	return nd
}

func (e *env) newNode(prefix, id, shared string) *node {
	e.t.Helper()
	nd := &node{e: e, id: id, dir: e.path(prefix, id), shared: shared}
	nd.sock = filepath.Join(nd.dir, "containerd.sock")
	if err := os.MkdirAll(nd.dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.MkdirAll(shared, 0o755); err != nil {
		e.t.Fatal(err)
	}
	e.addLog(filepath.Join(nd.dir, "ctr.log"))
	e.onCleanup(nd.stop)
	return nd
}

// stop stops containerd, then its plugin (containerd talks to the plugin),
// then its own coordinator.
func (n *node) stop() {
	if n.containerd != nil {
		n.containerd.stop(stopGrace)
	}
	if n.plugin != nil {
		n.plugin.stop(stopGrace)
	}
	if n.coordinator != nil {
		n.coordinator.p.stop(stopGrace)
	}
}

// startPlugin starts (or restarts) the node's containerd-sharedcontent and
// waits for its socket to accept connections.
func (n *node) startPlugin() {
	t := n.e.t
	t.Helper()
	n.launchPlugin()
	n.waitPlugin()
}

// launchPlugin starts the node's containerd-sharedcontent without waiting
// for it.
func (n *node) launchPlugin() {
	n.e.t.Helper()
	n.plugin = n.e.start(n.id+" plugin", n.logName("plugin.log"), n.pluginEnv, n.pluginArgv()...)
}

// waitPlugin waits until the plugin's socket accepts connections.
func (n *node) waitPlugin() {
	t := n.e.t
	t.Helper()
	p := n.plugin
	waitFor(t, n.id+" plugin socket", startTimeout, func() (bool, error) {
		if p.exited() {
			return false, dead(p)
		}
		c, err := net.Dial("unix", n.pluginSock)
		if err != nil {
			return false, err
		}
		c.Close()
		return true, nil
	})
}

// pluginArgv is the plugin's command line. The node journal (--state-dir)
// is the node's own, as on a real node's local disk; the images it
// announces go to the node's own containerd.
func (n *node) pluginArgv() []string {
	bin := n.pluginBin
	if bin == "" {
		bin = bins.plugin
	}
	argv := []string{bin,
		"--root", n.shared, "--address", n.pluginSock, "--node-id", n.id,
		"--state-dir", n.stateDir(), "--log-level", "debug"}
	if !n.oldFlags {
		// Its own containerd, never the host's.
		argv = append(argv, "--containerd-address", n.sock)
		if !n.drains {
			argv = append(argv, "--drain-timeout", "0")
		}
	}
	if n.lockURL != "" {
		argv = append(argv, "--coordinator", n.lockURL)
	} else {
		// The embedded coordinator's database: the test's, never the
		// host's /var/lib/sharedcontent, which would carry one test's
		// members (and their lineages) into the next.
		argv = append(argv, "--data-dir", filepath.Join(n.dir, "coordinator"))
	}
	return append(argv, n.pluginArgs...)
}

// stateDir is the plugin's --state-dir (the node journal).
func (n *node) stateDir() string { return filepath.Join(n.dir, "sc-state") }

// logName names a log file of the node relative to the env's directory.
func (n *node) logName(name string) string {
	rel, _ := filepath.Rel(n.e.dir, filepath.Join(n.dir, name))
	return rel
}

// killPlugin kills the node's plugin with SIGKILL, as a crash would.
func (n *node) killPlugin() { n.plugin.kill() }

func (n *node) startContainerd(cfg []byte) {
	t := n.e.t
	t.Helper()
	path := filepath.Join(n.dir, "containerd.toml")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := n.containerdBin
	if bin == "" {
		bin = bins.containerd
	}
	n.containerd = n.e.start(n.id+" containerd", n.logName("containerd.log"), nil, bin, "--config", path)
	p := n.containerd
	waitFor(t, n.id+" containerd", startTimeout, func() (bool, error) {
		if p.exited() {
			return false, dead(p)
		}
		_, err := n.ctr(5*time.Second, "version")
		return err == nil, err
	})
}

// nodeDisabledPlugins are plugins a test node must not run: CRI (not built
// anyway), and everything that would touch host-global paths (/opt/containerd,
// the NRI socket) or the network (tracing).
var nodeDisabledPlugins = []string{
	"io.containerd.grpc.v1.cri",
	"io.containerd.internal.v1.opt",
	"io.containerd.nri.v1.nri",
	"io.containerd.tracing.processor.v1.otlp",
	"io.containerd.internal.v1.tracing",
	"io.containerd.snapshotter.v1.blockfile",
	"io.containerd.snapshotter.v1.erofs",
	"io.containerd.differ.v1.erofs",
	"io.containerd.mount-handler.v1.erofs",
}

// specProxyConfig is docs/design.md §6's snippet, used when deploy/ has no config.
const specProxyConfig = `version = 3
disabled_plugins = ["io.containerd.content.v1.content"]
[proxy_plugins.sharedcontent]
  type = "content"
  address = "/run/sharedcontent/sharedcontent.sock"
`

// config returns the node's containerd config. A sharedcontent node starts
// from deploy/containerd-config.toml (what operators install) with the
// content proxy plugin's address pointed at this node's plugin; every node
// gets its own root, state, temp and sockets, and the test-only plugin
// exclusions.
func (n *node) config(sharedcontent bool) []byte {
	t := n.e.t
	t.Helper()
	cfg := map[string]any{}
	if sharedcontent {
		src := []byte(specProxyConfig)
		deploy := filepath.Join(repoRoot, "deploy", "containerd-config.toml")
		if b, err := os.ReadFile(deploy); err == nil {
			src = b
		} else {
			t.Logf("e2e: %v; using the docs/design.md §6 snippet", err)
		}
		if err := toml.Unmarshal(src, &cfg); err != nil {
			t.Fatalf("e2e: parse %s: %v", deploy, err)
		}
		proxies, _ := cfg["proxy_plugins"].(map[string]any)
		found := false
		for name, p := range proxies {
			p, ok := p.(map[string]any)
			switch {
			case !ok:
			case p["type"] == "content":
				p["address"] = n.pluginSock
				found = true
			case p["type"] == "diff" && n.noDiffer:
				delete(proxies, name)
			case p["type"] == "diff":
				p["address"] = n.pluginSock
			}
		}
		if !found {
			t.Fatalf("e2e: %s declares no proxy plugin of type content", deploy)
		}
	}
	cfg["version"] = 3
	cfg["root"] = filepath.Join(n.dir, "root")
	cfg["state"] = filepath.Join(n.dir, "state")
	cfg["temp"] = filepath.Join(n.dir, "tmp")
	var disabled []any
	if d, ok := cfg["disabled_plugins"].([]any); ok {
		disabled = d
	}
	for _, p := range nodeDisabledPlugins {
		disabled = append(disabled, p)
	}
	cfg["disabled_plugins"] = disabled
	cfg["grpc"] = map[string]any{"address": n.sock}
	cfg["ttrpc"] = map[string]any{"address": n.sock + ".ttrpc"}
	cfg["debug"] = map[string]any{"address": filepath.Join(n.dir, "debug.sock"), "level": "debug"}
	plugins, _ := cfg["plugins"].(map[string]any)
	if plugins == nil {
		plugins = map[string]any{}
	}
	n.unpackConfig(plugins)
	cfg["plugins"] = plugins
	b, err := toml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Plugin sections of containerd's config that select the differ.
const (
	diffServicePlugin = "io.containerd.service.v1.diff-service"
	transferPlugin    = "io.containerd.transfer.v1.local"
)

// unpackConfig makes the transfer service unpack this host's platform into
// overlayfs, with the differ the deploy config names (none on stock and
// noDiffer nodes: containerd's own walking differ); a noDiffer node also
// drops the diff service's differ list.
func (n *node) unpackConfig(plugins map[string]any) {
	differ := ""
	if tp, ok := plugins[transferPlugin].(map[string]any); ok && !n.noDiffer {
		if ucs, ok := tp["unpack_config"].([]any); ok && len(ucs) > 0 {
			if uc, ok := ucs[0].(map[string]any); ok {
				differ, _ = uc["differ"].(string)
			}
		}
	}
	uc := map[string]any{"platform": "linux/" + runtime.GOARCH, "snapshotter": "overlayfs"}
	if differ != "" {
		uc["differ"] = differ
	}
	plugins[transferPlugin] = map[string]any{"unpack_config": []any{uc}}
	if n.noDiffer {
		delete(plugins, diffServicePlugin)
	}
}

// ctr runs ctr against the node with a total timeout and returns its
// combined output; every call is appended to <node>/ctr.log.
func (n *node) ctr(timeout time.Duration, args ...string) (string, error) {
	var out bytes.Buffer
	err := n.ctrTo(context.Background(), &out, &out, timeout, args...)
	return out.String(), err
}

// ctrTo is ctr with stdout sent to w and stderr to errw (which may be the
// same writer).
// Cancelling ctx kills ctr.
func (n *node) ctrTo(ctx context.Context, w, errw io.Writer, timeout time.Duration, args ...string) error {
	argv := append([]string{"--address", n.sock, "--timeout", timeout.String()}, args...)
	// The deadline is a backstop should ctr ignore its own --timeout.
	ctx, cancel := context.WithTimeout(ctx, timeout+15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.ctr, argv...)
	cmd.Env = append(hermeticEnv(), "CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var errBuf bytes.Buffer
	if w == errw {
		lw := &lockedWriter{w: w, copy: &errBuf}
		cmd.Stdout, cmd.Stderr = lw, lw
	} else {
		cmd.Stdout = w
		cmd.Stderr = io.MultiWriter(errw, &errBuf)
	}
	start := time.Now()
	err := cmd.Run()
	n.trail("=== %s ctr %s (%.2fs): %v\n%s\n", start.Format("15:04:05.000"),
		strings.Join(args, " "), time.Since(start).Seconds(), err, tail(errBuf.String(), 40))
	if err != nil {
		return fmt.Errorf("%s: ctr %s: %w: %s", n.id, strings.Join(args, " "), err, ctrError(errBuf.String()))
	}
	return nil
}

// trail appends to n's ctr.log, the record of every call the test made
// of n's containerd (shown with a failed test's logs).
func (n *node) trail(format string, args ...any) {
	if f, err := os.OpenFile(filepath.Join(n.dir, "ctr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		fmt.Fprintf(f, format, args...)
		f.Close()
	}
}

// ctrError picks ctr's error message out of its output: the last line
// starting "ctr: " (its fatal error), else the last non-empty line.
func ctrError(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "ctr: ") {
			return lines[i]
		}
	}
	return strings.TrimSpace(lines[len(lines)-1])
}

// lockedWriter serialises ctr's stdout and stderr into one writer and keeps
// a copy for messages.
type lockedWriter struct {
	mu   sync.Mutex
	w    io.Writer     // protected by mu
	copy *bytes.Buffer // protected by mu
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.copy.Write(p)
	return l.w.Write(p)
}

// pull pulls ref over plain HTTP.
func (n *node) pull(ref string, timeout time.Duration) error {
	return n.pullCtx(context.Background(), ref, timeout)
}

// pullCtx is pull, killed when ctx is cancelled.
func (n *node) pullCtx(ctx context.Context, ref string, timeout time.Duration) error {
	var out bytes.Buffer
	// ctr's progress redraws go to ctr.log only.
	return n.ctrTo(ctx, &out, &out, timeout, "images", "pull", "--plain-http", ref)
}

// readyImages returns the refs `ctr images check -q` prints: images whose
// content is complete and unpacked in the default snapshotter.
func (n *node) readyImages() ([]string, error) {
	out, err := n.ctr(60*time.Second, "images", "check", "-q")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// checkLine returns ref's row of `ctr images check` (status and size).
func (n *node) checkLine(ref string) string {
	out, err := n.ctr(60*time.Second, "images", "check")
	if err != nil {
		return err.Error()
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, ref+" ") {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return "(not listed)"
}

// removeImage removes ref and runs the garbage collector synchronously.
func (n *node) removeImage(ref string) error {
	_, err := n.ctr(120*time.Second, "images", "rm", "--sync", ref)
	return err
}

// pullResult is one node's outcome of a pull.
type pullResult struct {
	node    *node
	err     error
	elapsed time.Duration
	end     time.Time
}

// pullAsync starts pulling ref on n; the channel delivers the result.
func pullAsync(ctx context.Context, n *node, ref string, timeout time.Duration) <-chan pullResult {
	ch := make(chan pullResult, 1)
	go func() {
		start := time.Now()
		err := n.pullCtx(ctx, ref, timeout)
		ch <- pullResult{node: n, err: err, elapsed: time.Since(start), end: time.Now()}
	}()
	return ch
}

// startPulls starts pulling ref on every node of c; the map delivers each
// node's result by its ID.
func startPulls(ctx context.Context, c *cluster, ref string) map[string]<-chan pullResult {
	pulls := map[string]<-chan pullResult{}
	for _, n := range c.nodes {
		pulls[n.id] = pullAsync(ctx, n, ref, pullTimeout)
	}
	return pulls
}

// layerHolder waits until a node holds layer's pull lock with at least
// queued requests behind it and the registry has sent inFlight bytes of
// the layer; it returns that node and the others.
func layerHolder(t *testing.T, c *cluster, layer string, queued int, inFlight int64) (holder *node, others []*node) {
	t.Helper()
	var holderID string
	waitFor(t, fmt.Sprintf("a holder of the layer's pull lock, %d queued behind it", queued), time.Minute, func() (bool, error) {
		st, err := c.ls.status("pull", layer)
		if err != nil || st.Holder == nil {
			return false, err
		}
		holderID = st.Holder.NodeID
		return len(st.Queue) >= queued, nil
	})
	waitFor(t, "the layer in flight", time.Minute, func() (bool, error) {
		return c.reg.BlobBytes() >= inFlight, nil
	})
	for _, n := range c.nodes {
		if n.id == holderID {
			holder = n
		} else {
			others = append(others, n)
		}
	}
	require.NotNil(t, holder, "holder %q is not a node", holderID)
	return holder, others
}

// awaitSuccessor waits (at most wait) until another node has committed
// the layer the holder killed at killed was downloading, then for the
// pulls of others, each within bound + unpackAllowance of the kill. It
// returns the time from the kill to the commit, and each pull's "node
// seconds-after-the-kill".
func awaitSuccessor(t *testing.T, c *cluster, layer string, killed time.Time, bound, wait time.Duration,
	pulls map[string]<-chan pullResult, others []*node) (committed time.Duration, done []string) {
	t.Helper()
	blobPath := filepath.Join(c.shared, "blobs", "sha256", strings.TrimPrefix(layer, "sha256:"))
	waitFor(t, "the layer committed by another node", wait, func() (bool, error) {
		_, err := os.Stat(blobPath)
		return err == nil, nil
	})
	committed = time.Since(killed)
	for _, n := range others {
		select {
		case r := <-pulls[n.id]:
			require.NoError(t, r.err, "pull on %s after the holder was killed", n.id)
			done = append(done, fmt.Sprintf("%s %.1fs", n.id, r.end.Sub(killed).Seconds()))
		case <-time.After(bound + unpackAllowance):
			t.Fatalf("pull on %s still running %v after the holder was killed", n.id, time.Since(killed))
		}
	}
	return committed, done
}

// pullAll pulls ref on every node at once and waits for all of them.
func pullAll(nodes []*node, ref string, timeout time.Duration) []pullResult {
	var chs []<-chan pullResult
	for _, n := range nodes {
		chs = append(chs, pullAsync(context.Background(), n, ref, timeout))
	}
	res := make([]pullResult, len(nodes))
	for i, ch := range chs {
		res[i] = <-ch
	}
	return res
}

// sharedFiles lists the entries of <shared>/<sub> (e.g. "blobs/sha256",
// "ingest"); a missing directory is empty.
func sharedFiles(shared, sub string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(shared, sub))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, nil
}

// ingestRefs returns the ref of every ingest in the shared store (the local
// store keeps it in ingest/<hash>/ref) with its data size.
func ingestRefs(shared string) (map[string]int64, error) {
	dirs, err := sharedFiles(shared, "ingest")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, d := range dirs {
		ref, err := os.ReadFile(filepath.Join(shared, "ingest", d, "ref"))
		if err != nil {
			ref = []byte("?" + d)
		}
		var size int64
		if fi, err := os.Stat(filepath.Join(shared, "ingest", d, "data")); err == nil {
			size = fi.Size()
		}
		out[string(ref)] = size
	}
	return out, nil
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
