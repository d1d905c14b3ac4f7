package e2ek8s

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/stretchr/testify/require"
)

// nodePaths are the host paths each node has of its own: the node's
// directory <dir>/<name> bound over each (created on the host, empty, if
// missing). /mnt/shared is the shared root, the same host directory in
// every node.
var nodePaths = []string{
	"/etc/containerd", "/etc/systemd/system", "/etc/sharedcontent", "/etc/kubernetes", "/etc/cni/net.d",
	"/opt/sharedcontent", "/var/lib/containerd", "/var/lib/kubelet", "/var/lib/sharedcontent",
	"/var/lib/cni", "/var/log/pods", "/var/log/containers", "/usr/local/sbin",
}

// nodeRunPaths are empty at every boot (tmpfs), as /run is.
var nodeRunPaths = []string{"/run/containerd", "/run/sharedcontent", "/run/netns", "/run/nodeinit"}

// node is a simulated machine.
type node struct {
	c     *cluster
	name  string
	index int
	dir   string
	// cgroup is the kubelet's cgroupRoot, created in every hierarchy.
	cgroup string

	init  *daemon
	stdin io.WriteCloser
	boots int
	// stale are the blobs the node's containerd recorded on the shared
	// store before it was switched back to its own (requireBlobsReadable).
	stale []string
}

// addNode prepares node i (n1, n2, ...) and boots it.
func (c *cluster) addNode(i int) *node {
	t := c.t
	t.Helper()
	n := &node{c: c, name: fmt.Sprintf("n%d", i), index: i}
	n.dir = c.path(n.name)
	n.cgroup = fmt.Sprintf("/e2ek8s-%s-%s", c.id, n.name)
	c.nodes = append(c.nodes, n)
	for _, p := range append(append([]string{}, nodePaths...), nodeRunPaths...) {
		require.NoError(t, os.MkdirAll(p, 0o755), "host path %s", p)
		require.NoError(t, os.MkdirAll(n.host(p), 0o755))
	}
	require.NoError(t, os.MkdirAll("/mnt/shared", 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(n.dir, "logs"), 0o755))
	n.createCgroups()
	n.writeConfigs()
	n.boot()
	return n
}

// host is where path p of the node lives on the host.
func (n *node) host(p string) string {
	return filepath.Join(n.dir, strings.ReplaceAll(strings.TrimPrefix(p, "/"), "/", "-"))
}

func (n *node) write(p, content string) {
	n.c.t.Helper()
	full := filepath.Join(n.host(filepath.Dir(p)), filepath.Base(p))
	for _, base := range nodePaths {
		if strings.HasPrefix(p, base+"/") {
			full = filepath.Join(n.host(base), strings.TrimPrefix(p, base+"/"))
		}
	}
	require.NoError(n.c.t, os.MkdirAll(filepath.Dir(full), 0o755))
	require.NoError(n.c.t, os.WriteFile(full, []byte(content), 0o644))
}

// writeConfigs writes the node's stock setup: containerd (CRI, no
// sharedcontent: the chart switches it) and kubelet as enabled units,
// the CNI bridge, kubelet's config and credentials, and systemctl.
func (n *node) writeConfigs() {
	c, t := n.c, n.c.t
	t.Helper()
	n.write("/etc/systemd/system/containerd.service", fmt.Sprintf(`[Unit]
Description=containerd (with CRI)
After=network.target

[Service]
Type=notify
Environment=PATH=%s:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ExecStart=%s --config /etc/containerd/config.toml
Restart=always
RestartSec=2
KillMode=process

[Install]
WantedBy=multi-user.target
`, binDir, bins.containerd))
	n.write("/etc/systemd/system/kubelet.service", fmt.Sprintf(`[Unit]
Description=kubelet
After=containerd.service
Wants=containerd.service

[Service]
ExecStart=%s --config=/etc/kubernetes/kubelet.yaml --kubeconfig=/etc/kubernetes/kubelet.kubeconfig --hostname-override=%s --node-ip=%s --v=1
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
`, bins.kubelet, n.name, nodeIP(n.index)))
	for _, u := range []string{"containerd.service", "kubelet.service"} {
		l := filepath.Join(n.host("/etc/systemd/system"), "multi-user.target.wants", u)
		require.NoError(t, os.MkdirAll(filepath.Dir(l), 0o755))
		require.NoError(t, os.Symlink("/etc/systemd/system/"+u, l))
	}
	n.write("/etc/containerd/config.toml", fmt.Sprintf(`# A node's stock containerd: CRI on, nothing of sharedcontent.
version = 3
imports = ["/etc/containerd/conf.d/*.toml"]
# NRI would touch host-global paths.
disabled_plugins = ["io.containerd.nri.v1.nri"]

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "/etc/containerd/certs.d"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "%s"

[plugins.'io.containerd.cri.v1.runtime']
  # runc here cannot write oom_score_adj (no CAP_SYS_RESOURCE).
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "/etc/cni/net.d"
`, c.pauseRef()))
	require.NoError(t, os.MkdirAll(n.host("/etc/containerd")+"/conf.d", 0o755))
	n.write("/etc/containerd/certs.d/"+c.reg.Host+"/hosts.toml", fmt.Sprintf(
		"server = \"http://%[1]s\"\n\n[host.\"http://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", c.reg.Host))
	n.write("/etc/cni/net.d/10-pods.conflist", fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "pods",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "%s"}]], "routes": [{"dst": "0.0.0.0/0"}]}}
  ]
}
`, podCIDR(n.index)))
	require.NoError(t, c.pki.kubeconfig(filepath.Join(n.host("/etc/kubernetes"), "kubelet.kubeconfig"),
		fmt.Sprintf("https://%s:%d", hostIP, c.apiPort), "kubelet-"+n.name, "system:node:"+n.name, "system:nodes"))
	n.write("/etc/kubernetes/kubelet.yaml", fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: %s
cgroupsPerQOS: true
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
failSwapOn: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %s}
authorization: {mode: AlwaysAllow}
readOnlyPort: 0
serializeImagePulls: false
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: /etc/resolv.conf
`, n.cgroup, c.pki.CAFile))
	// systemctl in the node is nodeinit under that name.
	b, err := os.ReadFile(bins.nodeinit)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(n.host("/usr/local/sbin"), "systemctl"), b, 0o755))
}

// cgroupHierarchies are the cgroup v1 hierarchies (and the v2 one of a
// hybrid host) under /sys/fs/cgroup.
func cgroupHierarchies() []string {
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return out
}

// createCgroups creates the kubelet's cgroupRoot in every hierarchy
// (kubelet creates its children, not the root itself).
func (n *node) createCgroups() {
	for _, h := range cgroupHierarchies() {
		require.NoError(n.c.t, os.MkdirAll(h+n.cgroup, 0o755))
	}
}

// removeCgroups removes the node's cgroups, deepest first (after every
// process of the node has died).
func (n *node) removeCgroups() {
	for _, h := range cgroupHierarchies() {
		var dirs []string
		_ = filepath.WalkDir(h+n.cgroup, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(dirs[i]); err != nil {
				n.c.t.Logf("e2e-k8s: rmdir %s: %v", dirs[i], err)
			}
		}
	}
}

// initConfig is nodeinit's config (integration/e2ek8s/nodeinit).
type initConfig struct {
	Hostname string                            `json:"hostname"`
	Binds    []struct{ Source, Target string } `json:"binds"`
	Tmpfs    []string                          `json:"tmpfs"`
	LogDir   string                            `json:"logDir"`
}

// boot starts the node's init in new PID, mount, UTS and network
// namespaces, connects the node to the host's bridge, and lets the init
// start its units.
func (n *node) boot() {
	c, t := n.c, n.c.t
	t.Helper()
	n.boots++
	cfg := initConfig{Hostname: n.name, Tmpfs: nodeRunPaths, LogDir: filepath.Join(n.dir, "logs")}
	for _, p := range nodePaths {
		cfg.Binds = append(cfg.Binds, struct{ Source, Target string }{n.host(p), p})
	}
	cfg.Binds = append(cfg.Binds, struct{ Source, Target string }{c.shared, "/mnt/shared"})
	// The host's own systemctl (a machine with systemd installed but not
	// running it, as here) would be found first in the PATH of some
	// callers (the image's has no /usr/local/sbin): nodeinit's is bound
	// over it too.
	for _, p := range []string{"/usr/bin/systemctl", "/bin/systemctl"} {
		if st, err := os.Lstat(p); err == nil && st.Mode().IsRegular() {
			cfg.Binds = append(cfg.Binds, struct{ Source, Target string }{filepath.Join(n.host("/usr/local/sbin"), "systemctl"), p})
		}
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	require.NoError(t, err)
	cfgPath := filepath.Join(n.dir, "init.json")
	require.NoError(t, os.WriteFile(cfgPath, b, 0o644))
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	log := filepath.Join(n.dir, "logs", "nodeinit.log")
	n.init, err = startDaemon(n.name+" init", log, pr, &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNET,
	}, nil, bins.nodeinit, "-config", cfgPath)
	pr.Close()
	require.NoError(t, err)
	n.stdin = pw
	pid := n.pid()

	// The node's link: a veth pair, the host's end on the bridge.
	veth := fmt.Sprintf("scv%s%d", c.id, n.index)
	// The previous boot's pair goes with its network namespace, which the
	// kernel frees asynchronously: remove it now.
	_, _ = run("/", nil, "ip", "link", "del", veth)
	c.ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", fmt.Sprint(pid))
	c.ip("link", "set", veth, "master", c.bridge, "up")
	for _, args := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "addr", "add", fmt.Sprintf("%s/%d", nodeIP(n.index), linkPrefix), "dev", "eth0"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "route", "add", "default", "via", hostIP},
		{"sh", "-c", "echo 1 >/proc/sys/net/ipv4/ip_forward"},
		// The stand-in for kube-proxy: the kubernetes Service's ClusterIP
		// is the API server, for pods (PREROUTING) and hostNetwork
		// (OUTPUT).
		{"iptables", "-t", "nat", "-A", "PREROUTING", "-d", kubernetesService, "-p", "tcp", "--dport", "443",
			"-j", "DNAT", "--to-destination", fmt.Sprintf("%s:%d", hostIP, c.apiPort)},
		{"iptables", "-t", "nat", "-A", "OUTPUT", "-d", kubernetesService, "-p", "tcp", "--dport", "443",
			"-j", "DNAT", "--to-destination", fmt.Sprintf("%s:%d", hostIP, c.apiPort)},
	} {
		out, err := run("/", nil, "nsenter", append([]string{"--target", fmt.Sprint(pid), "--net", "--"}, args...)...)
		require.NoError(t, err, "%s: %s: %s", n.name, strings.Join(args, " "), out)
	}
	c.ip("route", "replace", podCIDR(n.index), "via", nodeIP(n.index))
	_, err = io.WriteString(n.stdin, "go\n")
	require.NoError(t, err)
}

// pid is the host's PID of the node's init.
func (n *node) pid() int { return n.init.cmd.Process.Pid }

// powerOff kills the node's init: the kernel kills every process of the
// node's PID namespace, and its namespaces go. It returns once none is
// left.
func (n *node) powerOff() {
	if n.init == nil || n.init.exited() {
		return
	}
	ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", n.pid()))
	n.init.kill()
	n.stdin.Close()
	deadline := time.Now().Add(time.Minute)
	for ns != "" && time.Now().Before(deadline) && len(processesIn(ns)) > 0 {
		time.Sleep(100 * time.Millisecond)
	}
	if left := processesIn(ns); len(left) > 0 {
		n.c.t.Errorf("e2e-k8s: %s: processes %v of its PID namespace still there a minute after its init died", n.name, left)
	}
}

// processesIn lists the host PIDs whose PID namespace is ns ("pid:[N]").
func processesIn(ns string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && l == ns {
			out = append(out, e.Name())
		}
	}
	return out
}

// exec runs argv inside the node (its mount, UTS, network and PID
// namespaces) and returns its standard output.
func (n *node) exec(timeout time.Duration, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := append([]string{"--target", fmt.Sprint(n.pid()), "--mount", "--uts", "--net", "--pid", "--"}, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if f, ferr := os.OpenFile(filepath.Join(n.dir, "logs", "exec.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); ferr == nil {
		o := out.String()
		if len(o) > 2048 {
			o = fmt.Sprintf("%s... (%d bytes)\n", o[:2048], len(o))
		}
		fmt.Fprintf(f, "$ %s\n%s%s(err: %v)\n", strings.Join(argv, " "), errOut.String(), o, err)
		f.Close()
	}
	if err != nil {
		return out.String(), fmt.Errorf("%s: %s: %w: %s", n.name, strings.Join(argv, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

// ctr runs ctr against the node's containerd, in CRI's namespace.
func (n *node) ctr(timeout time.Duration, args ...string) (string, error) {
	return n.exec(timeout, append([]string{bins.ctr, "--timeout", timeout.String(), "-n", "k8s.io"}, args...)...)
}

// crictl runs crictl against the node's CRI.
func (n *node) crictl(timeout time.Duration, args ...string) (string, error) {
	ep := "unix:///run/containerd/containerd.sock"
	return n.exec(timeout, append([]string{bins.crictl, "--runtime-endpoint", ep, "--image-endpoint", ep, "--timeout", timeout.String()}, args...)...)
}
