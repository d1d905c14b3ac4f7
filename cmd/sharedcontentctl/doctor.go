package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/sharedcontent/sharedcontent/contentv2"
	"github.com/sharedcontent/sharedcontent/lockclient"
)

const (
	defaultContainerdConfig = "/etc/containerd/config.toml"
	socketTimeout           = 5 * time.Second
	// deploySocket is containerd-sharedcontent's --address in deploy/.
	deploySocket = "/run/sharedcontent/sharedcontent.sock"
)

// The results of one check.
const (
	checkOK      = "ok"
	checkProblem = "problem"
	// checkWarning works today but changes the node's pull path or fails
	// it on a reboot or a crash; it comes with its fix, and does not fail
	// doctor.
	checkWarning = "warning"
	checkSkipped = "skipped"
)

// checkResult is one line of doctor's report.
type checkResult struct {
	Check   string `json:"check"`
	Result  string `json:"result"`
	Message string `json:"message"`
	// Fix says what to change, for a problem or a warning.
	Fix string `json:"fix,omitempty"`
}

// doctor checks this node's setup: containerd's config, the plugin's
// socket, the coordinator, and the shared root (--root). Every problem
// comes with its fix; doctor fails with "N problems" when there are any.
func doctor(ctx context.Context, c *lockclient.Client, server, root, config string, configOnly bool, p printer) error {
	d := doctorRun{configOnly: configOnly}
	d.containerd(ctx, config)
	if d.configOnly {
		for _, check := range []string{"coordinator", "shared root", "root cluster"} {
			d.skip(check, "--config-only")
		}
	} else {
		d.coordinator(ctx, c, server, root)
	}
	if d.results == nil {
		d.results = []checkResult{}
	}
	if err := p.print(d.results, d.table); err != nil {
		return err
	}
	if n := d.problems(); n > 0 {
		return reported(problemsText(n))
	}
	return nil
}

type doctorRun struct {
	results []checkResult
	// configOnly skips every check that dials or reads anything but
	// containerd's config.
	configOnly bool
}

func (d *doctorRun) ok(check, msg string, args ...any) {
	d.results = append(d.results, checkResult{Check: check, Result: checkOK, Message: fmt.Sprintf(msg, args...)})
}

func (d *doctorRun) skip(check, msg string, args ...any) {
	d.results = append(d.results, checkResult{Check: check, Result: checkSkipped, Message: fmt.Sprintf(msg, args...)})
}

func (d *doctorRun) problem(check, msg, fix string) {
	d.results = append(d.results, checkResult{Check: check, Result: checkProblem, Message: msg, Fix: fix})
}

func (d *doctorRun) warning(check, msg, fix string) {
	d.results = append(d.results, checkResult{Check: check, Result: checkWarning, Message: msg, Fix: fix})
}

func (d *doctorRun) problems() int { return d.count(checkProblem) }

// count is the number of results that are result.
func (d *doctorRun) count(result string) int {
	n := 0
	for _, r := range d.results {
		if r.Result == result {
			n++
		}
	}
	return n
}

func (d *doctorRun) table(tw *tabwriter.Writer) {
	fmt.Fprintln(tw, "CHECK\tRESULT\tMESSAGE")
	for _, r := range d.results {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Check, r.Result, r.Message)
	}
	for _, r := range d.results {
		if r.Fix != "" {
			fmt.Fprintf(tw, "\n%s: fix: %s\n", r.Check, r.Fix)
		}
	}
	summary := problemsText(d.problems())
	if n := d.count(checkWarning); n == 1 {
		summary += ", 1 warning"
	} else if n > 1 {
		summary += fmt.Sprintf(", %d warnings", n)
	}
	fmt.Fprintf(tw, "\n%s\n", summary)
}

func problemsText(n int) string {
	switch n {
	case 0:
		return "no problems"
	case 1:
		return "1 problem"
	}
	return fmt.Sprintf("%d problems", n)
}

// containerd checks containerd's config, merged with its imports.
func (d *doctorRun) containerd(ctx context.Context, path string) {
	const configCheck = "containerd config"
	checks := []string{"content plugin disabled", "content proxy", "content proxy socket", "diff proxy",
		"diff proxy socket", "transfer unpack differ", "diff service default", "CRI pull path", "CRI unpack",
		"boot order", "content sharing policy"}
	cfg, err := loadContainerdConfig(path)
	if err != nil {
		d.problem(configCheck, fmt.Sprintf("cannot read containerd's config: %v", err),
			"point --containerd-config at the file containerd reads (containerd --config), or fix the file")
		for _, c := range checks {
			d.skip(c, "containerd's config was not read")
		}
		return
	}
	if len(cfg.OldFiles) > 0 {
		d.problem(configCheck, fmt.Sprintf("%s: config version 1 (or no version line); doctor reads versions 2 and 3 only, whose plugin names differ from version 1's",
			strings.Join(cfg.OldFiles, ", ")),
			"migrate each file (containerd config migrate) or add `version = 3` at its top, with full plugin names as in deploy/containerd-config.toml")
	} else {
		d.ok(configCheck, "read %s", strings.Join(cfg.Files, ", "))
	}

	if slices.Contains(cfg.DisabledPlugins, builtinContent) {
		d.ok("content plugin disabled", "%s is in disabled_plugins", builtinContent)
	} else {
		d.problem("content plugin disabled", "the built-in content plugin is enabled: containerd's metadata store takes one content plugin, and may take it instead of the proxy",
			fmt.Sprintf(`add to %s, at the top level: disabled_plugins = [%q] (append to the list if there is one)`, path, builtinContent))
	}

	if _, ok := cfg.Plugins[compiledIn]; ok {
		d.compiledIn(cfg, path)
		d.cri(cfg, path, "")
		d.skip(bootOrderCheck, "compiled in: containerd serves the content itself")
	} else {
		content := d.proxy(ctx, cfg, path, "content", "sharedcontent", deploySocket)
		// The diff proxy is served on the content proxy's socket.
		address := deploySocket
		if a := cfg.ProxyPlugins[content].Address; content != "" && a != "" {
			address = a
		}
		diff := d.proxy(ctx, cfg, path, "diff", "sharedcontent-diff", address)
		d.differ(cfg, path, diff)
		d.cri(cfg, path, diff)
		d.bootOrder()
	}

	switch policy, _ := cfg.plugin(metadataPlugin, "content_sharing_policy").(string); policy {
	case "isolated":
		d.problem("content sharing policy", fmt.Sprintf("[plugins.'%s'] content_sharing_policy = \"isolated\": each namespace re-downloads blobs other namespaces already have", metadataPlugin),
			fmt.Sprintf(`in [plugins.'%s'] of %s set content_sharing_policy = "shared" (or remove the line: shared is the default)`, metadataPlugin, path))
	case "":
		d.ok("content sharing policy", "shared (the default)")
	default:
		d.ok("content sharing policy", "%s", policy)
	}
}

// compiledIn checks the configuration of sharedcontent compiled into
// containerd (plugin/builtin): no proxies then, and containerd unpacks
// with its own differ, reading the store in-process.
func (d *doctorRun) compiledIn(cfg *containerdConfig, path string) {
	const check = "compiled-in store"
	server, _ := cfg.plugin(compiledIn, "coordinator").(string)
	if server == "" {
		server, _ = cfg.plugin(compiledIn, "lock_server").(string) // its deprecated name
	}
	root, _ := cfg.plugin(compiledIn, "root").(string)
	if root == "" {
		root = "containerd's plugin root (default)"
	}
	if server == "" {
		d.problem(check, fmt.Sprintf("[plugins.'%s'] has no coordinator: the compiled-in store embeds no coordinator, and containerd fails to load it", compiledIn),
			fmt.Sprintf("in [plugins.'%s'] of %s set coordinator = \"http://<coordinator>:8642\"", compiledIn, path))
	} else {
		d.ok(check, "sharedcontent compiled into containerd: root %s, coordinator %s", root, server)
	}
	if proxies := cfg.proxies("content"); len(proxies) > 0 {
		d.problem("content proxy", fmt.Sprintf("content proxy plugin %s as well as the compiled-in store: containerd's metadata store takes exactly one content plugin", strings.Join(proxies, ", ")),
			fmt.Sprintf("remove [proxy_plugins.%s] from %s, or the [plugins.'%s'] table to use the proxy", proxies[0], path, compiledIn))
	} else {
		d.skip("content proxy", "compiled in: no content proxy")
	}
	const inProcess = "compiled in: containerd unpacks with its own differ, reading the store in-process"
	for _, c := range []string{"content proxy socket", "diff proxy", "diff proxy socket", "transfer unpack differ", "diff service default"} {
		d.skip(c, inProcess)
	}
}

// proxy checks for a proxy plugin of type typ and dials its socket; it
// returns the plugin's name, or "".
func (d *doctorRun) proxy(ctx context.Context, cfg *containerdConfig, path, typ, want, address string) string {
	check := typ + " proxy"
	names := cfg.proxies(typ)
	if len(names) == 0 {
		d.problem(check, fmt.Sprintf("no proxy plugin of type %q", typ),
			fmt.Sprintf("add to %s:\n  [proxy_plugins.%s]\n    type = %q\n    address = %q\n(the address is containerd-sharedcontent's --address)", path, want, typ, address))
		d.skip(check+" socket", "no %s proxy plugin", typ)
		return ""
	}
	name := names[0]
	if len(names) > 1 {
		d.problem(check, fmt.Sprintf("%d proxy plugins of type %q: %s", len(names), typ, strings.Join(names, ", ")),
			fmt.Sprintf("keep one [proxy_plugins.NAME] of type %q, the one whose address is containerd-sharedcontent's socket", typ))
	} else {
		d.ok(check, "[proxy_plugins.%s] type %q, address %s", name, typ, cfg.ProxyPlugins[name].Address)
	}
	d.socket(ctx, check+" socket", name, cfg.ProxyPlugins[name].Address)
	return name
}

// socket checks that a gRPC server answers at address: it calls
// grpc.health.v1.Health/Check, and takes any gRPC answer, Unimplemented
// included (containerd-sharedcontent serves no health service), as live.
func (d *doctorRun) socket(ctx context.Context, check, name, address string) {
	fix := fmt.Sprintf("start containerd-sharedcontent (systemctl start containerd-sharedcontent, or its DaemonSet pod), or set [proxy_plugins.%s] address to its --address", name)
	if address == "" {
		d.problem(check, fmt.Sprintf("[proxy_plugins.%s] has no address", name),
			fmt.Sprintf("set address = \"/run/sharedcontent/sharedcontent.sock\" in [proxy_plugins.%s] (containerd-sharedcontent's --address)", name))
		return
	}
	if d.configOnly {
		d.skip(check, "--config-only: %s not dialled", address)
		return
	}
	fi, err := os.Stat(address)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		d.problem(check, fmt.Sprintf("no socket at %s", address), fix)
		return
	case err != nil:
		d.problem(check, fmt.Sprintf("%s: %v", address, err), "run doctor as a user that may read "+address+" (containerd's, root)")
		return
	case fi.Mode()&fs.ModeSocket == 0:
		d.problem(check, fmt.Sprintf("%s is not a socket (it is a %s)", address, fi.Mode().Type()), fix)
		return
	}
	conn, err := grpc.NewClient("unix://"+address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		d.problem(check, fmt.Sprintf("%s: %v", address, err), fix)
		return
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, socketTimeout)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	switch grpcstatus.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		d.problem(check, fmt.Sprintf("nothing answers gRPC at %s: %v", address, err), fix)
	default:
		d.ok(check, "a gRPC server answers at %s", address)
	}
}

// differ checks that both unpack paths use the diff proxy (README.md
// "containerd configuration"): the transfer service's unpack_config (ctr
// images pull, CRI) and the diff service's default (other clients).
func (d *doctorRun) differ(cfg *containerdConfig, path, diff string) {
	if diff == "" {
		d.skip("transfer unpack differ", "no diff proxy plugin")
		d.skip("diff service default", "no diff proxy plugin")
		return
	}
	snapshotter := "overlayfs"
	unpack, _ := cfg.plugin(transferService, "unpack_config").([]any)
	var wrong []string
	for _, e := range unpack {
		m, _ := e.(map[string]any)
		if differ, _ := m["differ"].(string); differ != diff {
			platform, _ := m["platform"].(string)
			wrong = append(wrong, fmt.Sprintf("%s (differ %q)", platform, differ))
		}
	}
	switch {
	case len(unpack) == 0:
		d.problem("transfer unpack differ", fmt.Sprintf("[plugins.'%s'] has no unpack_config: pulls unpack with containerd's own differ, reading each layer back through the content proxy (slower)", transferService),
			fmt.Sprintf("add to %s, one entry per platform the node unpacks:\n  [[plugins.'%s'.unpack_config]]\n    platform = \"linux/amd64\"\n    snapshotter = %q\n    differ = %q", path, transferService, snapshotter, diff))
	case len(wrong) > 0:
		d.problem("transfer unpack differ", fmt.Sprintf("unpack_config entries not using %s: %s", diff, strings.Join(wrong, ", ")),
			fmt.Sprintf("in each [[plugins.'%s'.unpack_config]] of %s set differ = %q", transferService, path, diff))
	default:
		d.ok("transfer unpack differ", "every unpack_config entry (%d) uses %s", len(unpack), diff)
	}

	fix := fmt.Sprintf("add to %s:\n  [plugins.'%s']\n    default = [%q, \"walking\"]", path, diffService, diff)
	def, set := cfg.plugin(diffService, "default").([]any)
	switch {
	case !set:
		d.problem("diff service default", fmt.Sprintf("%s has no [plugins.'%s'] default: clients that unpack themselves (ctr images pull --local) use containerd's own differ", path, diffService), fix)
	case len(def) > 0 && def[0] == diff:
		d.ok("diff service default", "default = %v: %s first", def, diff)
	default:
		d.problem("diff service default", fmt.Sprintf("[plugins.'%s'] default = %v: %s is not first, so clients that unpack themselves (ctr images pull --local) use another differ", diffService, def, diff), fix)
	}
}

// coordinator checks the coordinator and, with --root, the shared root and
// that both belong to one cluster.
func (d *doctorRun) coordinator(ctx context.Context, c *lockclient.Client, server, root string) {
	nodes, err := c.Nodes(ctx)
	coordCluster := ""
	if err != nil {
		msg := fmt.Sprintf("%s is unreachable: %v", server, err)
		if nc := checkCoordinator(ctx, server, err); nc != err {
			msg = nc.Error()
		}
		d.problem("coordinator", msg,
			"start the coordinator (sharedcontent-lockserver), or point --coordinator (and containerd-sharedcontent's --coordinator) at it; with a token, give --token-file")
	} else {
		coordCluster = nodes.ClusterID
		d.ok("coordinator", "%s: cluster %s, epoch %d, %d member(s)", server, nodes.ClusterID, nodes.Epoch, len(nodes.Nodes))
	}

	if root == "" {
		d.skip("shared root", "no --root given")
		d.skip("root cluster", "no --root given")
		return
	}
	if !d.sharedRoot(root) {
		d.skip("root cluster", "the shared root failed its check")
		return
	}
	id, err := contentv2.ReadClusterID(root)
	switch {
	case err != nil:
		d.problem("root cluster", err.Error(), "restore "+root+"/"+contentv2.MetaDir+"/cluster.json from a backup, or remove it only if no coordinator serves this root")
	case coordCluster == "":
		d.skip("root cluster", "the coordinator is unreachable")
	case id == "":
		d.ok("root cluster", "%s records no cluster yet: the first node to start records the coordinator's, %s", root, coordCluster)
	case id != coordCluster:
		d.problem("root cluster", fmt.Sprintf("%s belongs to cluster %s, the coordinator %s to cluster %s: nodes refuse to serve it", root, id, server, coordCluster),
			fmt.Sprintf("if another coordinator serves this root, point --coordinator at it; if this coordinator lost its database, adopt the root: sharedcontentctl --coordinator %s --token-file ADMIN cluster adopt --root %s; never remove its cluster.json while another coordinator serves it", server, root))
	default:
		d.ok("root cluster", "%s and the coordinator are both cluster %s", root, id)
	}
}

// sharedRoot runs contentv2.CheckRoot: a directory, writable, where a file
// can be renamed, with ingest/, blobs/ and .trash/ on its filesystem. A
// missing root is reported, not created as CheckRoot would. It reports
// whether the root passed.
func (d *doctorRun) sharedRoot(root string) bool {
	if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
		d.problem("shared root", root+" does not exist", "mount the shared storage at "+root+", or point --root at it")
		return false
	}
	err := contentv2.CheckRoot(root)
	if err == nil {
		d.ok("shared root", "%s: a directory where files can be renamed, with ingest/, blobs/ and .trash/ on its filesystem", root)
		d.rootMount(root)
		return true
	}
	// CheckRoot says "shared root R WHAT; FIX: failed precondition".
	msg := strings.TrimSuffix(err.Error(), ": "+errdefs.ErrFailedPrecondition.Error())
	fix := "see the message"
	if i := strings.LastIndex(msg, "; "); i >= 0 {
		msg, fix = msg[:i], msg[i+2:]
	}
	d.problem("shared root", msg, fix)
	return false
}

// rootMount warns about an NFS root mounted with a negative lookup cache
// (contentv2.RootMountWarning).
func (d *doctorRun) rootMount(root string) {
	w, err := contentv2.RootMountWarning(root)
	switch {
	case err != nil:
		d.warning("shared root mount", fmt.Sprintf("cannot read the mount options of %s: %v", root, err), "run doctor on the node, where /proc/self/mountinfo shows the root's mount")
	case w != "":
		d.warning("shared root mount", w, "add lookupcache=positive to the NFS mount options on every node (fstab or the mount unit) and remount")
	}
}
