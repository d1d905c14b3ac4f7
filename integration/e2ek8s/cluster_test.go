package e2ek8s

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/registry"
)

// The cluster's addresses. The host side of every node's link is a
// bridge of the test's own with hostIP; node i is nodeIP(i) on it, and
// its pods are on podCIDR(i) behind the node's own CNI bridge. The
// control plane, the registry and the coordinator listen on hostIP.
const (
	hostIP      = "10.231.0.1"
	linkPrefix  = 24
	serviceCIDR = "10.96.0.0/24"
	// kubernetesService is the ClusterIP of the default/kubernetes
	// Service (the first of serviceCIDR): in-cluster clients' API server.
	kubernetesService = "10.96.0.1"
)

func nodeIP(i int) string  { return fmt.Sprintf("10.231.0.%d", 10+i) }
func podCIDR(i int) string { return fmt.Sprintf("10.232.%d.0/24", i) }

// cluster is everything one test starts.
type cluster struct {
	t   *testing.T
	dir string
	// id is a short random name of this run: interface and cgroup names.
	id     string
	bridge string
	pki    *pki
	// admin is the kubeconfig of system:masters (helm, the
	// controller-manager and the scheduler); api calls as the same.
	admin   string
	api     *apiClient
	apiPort int
	reg     *registry.Registry
	lockURL string
	shared  string // the shared root's host directory (bound at /mnt/shared in every node)
	nodes   []*node
	// app is the image of scenario 2's Deployment.
	app image
	// hostMode: the chart installs the daemon as a host service.
	hostMode bool
	// stale are blobs containerd recorded in its own store before the
	// switch to the shared store (requireBlobsReadable).
	stale []string

	mu      sync.Mutex
	daemons []*daemon // protected by mu; stopped last first
	logs    []string  // protected by mu
}

// newCluster creates the test's directory and network; the parts start
// with startControlPlane, startRegistry, startCoordinator and addNode.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "k8s")
	require.NoError(t, err)
	c := &cluster{t: t, dir: dir, id: filepath.Base(dir)[3:]}
	c.bridge = "scb" + c.id
	t.Cleanup(c.cleanup)
	t.Logf("e2e-k8s: working directory %s", dir)
	// The host side of the nodes' links.
	_, _ = run("/", nil, "ip", "link", "del", c.bridge)
	c.ip("link", "add", c.bridge, "type", "bridge")
	c.ip("addr", "add", fmt.Sprintf("%s/%d", hostIP, linkPrefix), "dev", c.bridge)
	c.ip("link", "set", c.bridge, "up")
	c.pki, err = newPKI(c.path("pki"))
	require.NoError(t, err)
	c.shared = c.path("mnt-shared")
	require.NoError(t, os.MkdirAll(filepath.Join(c.shared, "containerd-content"), 0o755))
	return c
}

func (c *cluster) path(elem ...string) string {
	return filepath.Join(append([]string{c.dir}, elem...)...)
}

// ip runs ip(8) on the host.
func (c *cluster) ip(args ...string) {
	c.t.Helper()
	out, err := run("/", nil, "ip", args...)
	require.NoError(c.t, err, "ip %s: %s", strings.Join(args, " "), out)
}

// start starts a host daemon, logged to <dir>/<name>.log.
func (c *cluster) start(name string, argv ...string) *daemon {
	c.t.Helper()
	log := c.path(name + ".log")
	d, err := startDaemon(name, log, nil, nil, nil, argv...)
	require.NoError(c.t, err)
	c.mu.Lock()
	c.daemons = append(c.daemons, d)
	c.logs = append(c.logs, log)
	c.mu.Unlock()
	return d
}

// freePort returns a port free on hostIP now.
func freePort(t *testing.T, host string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startControlPlane starts etcd, kube-apiserver, kube-controller-manager
// and kube-scheduler, and waits for the API server.
func (c *cluster) startControlPlane() {
	t := c.t
	t.Helper()
	t0 := time.Now()
	client, peer := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1")
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	c.start("etcd", bins.etcd, "--name=e2ek8s", "--data-dir="+c.path("etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2ek8s="+peerURL, "--log-level=warn")

	p := c.pki
	ips := []net.IP{net.ParseIP(hostIP), net.ParseIP(kubernetesService), net.ParseIP("127.0.0.1")}
	srvCert, srvKey, err := p.issue("apiserver", "kube-apiserver", nil, ips,
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"})
	require.NoError(t, err)
	kcCert, kcKey, err := p.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil, nil)
	require.NoError(t, err)
	c.apiPort = freePort(t, hostIP)
	server := fmt.Sprintf("https://%s:%d", hostIP, c.apiPort)
	c.start("kube-apiserver", bins.apiserver,
		"--etcd-servers="+etcdURL,
		"--bind-address="+hostIP, "--advertise-address="+hostIP, "--secure-port="+strconv.Itoa(c.apiPort),
		"--tls-cert-file="+srvCert, "--tls-private-key-file="+srvKey, "--client-ca-file="+p.CAFile,
		"--kubelet-client-certificate="+kcCert, "--kubelet-client-key="+kcKey, "--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file="+p.SAPubFile,
		"--service-account-signing-key-file="+p.SAKeyFile, "--service-cluster-ip-range="+serviceCIDR,
		"--authorization-mode=Node,RBAC", "--allow-privileged=true", "--cert-dir="+c.path("apiserver"),
		"--profiling=false", "--v=1")
	c.admin = c.path("admin.kubeconfig")
	require.NoError(t, p.kubeconfig(c.admin, server, "admin", "e2ek8s-admin", "system:masters"))
	c.api, err = newAPIClient(server, p.CAFile, filepath.Join(p.dir, "admin.crt"), filepath.Join(p.dir, "admin.key"))
	require.NoError(t, err)
	waitFor(t, "the API server's /readyz", 3*time.Minute, func() (bool, error) {
		err := c.api.get("/readyz", nil)
		return err == nil, err
	})
	c.start("kube-controller-manager", bins.controllerManager, "--kubeconfig="+c.admin,
		"--authentication-kubeconfig="+c.admin, "--authorization-kubeconfig="+c.admin,
		"--service-account-private-key-file="+p.SAKeyFile, "--root-ca-file="+p.CAFile,
		"--use-service-account-credentials=true", "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(freePort(t, "127.0.0.1")),
		"--v=1")
	c.start("kube-scheduler", bins.scheduler, "--kubeconfig="+c.admin,
		"--authentication-kubeconfig="+c.admin, "--authorization-kubeconfig="+c.admin, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(freePort(t, "127.0.0.1")), "--v=1")
	// The service-account controller creates "default" in each namespace.
	waitFor(t, "the default service account", 2*time.Minute, func() (bool, error) {
		err := c.api.get("/api/v1/namespaces/default/serviceaccounts/default", nil)
		return err == nil, err
	})
	t.Logf("e2e-k8s: control plane up in %.1fs (API %s)", time.Since(t0).Seconds(), server)
}

// startRegistry starts the in-process registry on hostIP.
func (c *cluster) startRegistry() {
	reg, err := registry.Start(registry.WithAddr(hostIP+":0"), registry.WithBandwidth(fastBandwidth))
	require.NoError(c.t, err)
	c.reg = reg
	c.t.Cleanup(func() { reg.Close() })
}

// startCoordinator runs sharedcontent-lockserver on hostIP: the chart's
// coordinator.externalURL.
func (c *cluster) startCoordinator() {
	t := c.t
	port := freePort(t, hostIP)
	c.lockURL = fmt.Sprintf("http://%s:%d", hostIP, port)
	c.start("lockserver", bins.lockserver, "--listen", fmt.Sprintf("%s:%d", hostIP, port),
		"--data-dir", c.path("lockserver"), "--log-level", "debug")
	waitFor(t, "the coordinator's /readyz", time.Minute, func() (bool, error) {
		resp, err := http.Get(c.lockURL + "/readyz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("/readyz: %s", resp.Status)
	})
}

// helm runs helm with the admin kubeconfig.
func (c *cluster) helm(args ...string) string {
	c.t.Helper()
	out, err := run(repoRoot, []string{"KUBECONFIG=" + c.admin, "HELM_CACHE_HOME=" + c.path("helm", "cache"),
		"HELM_CONFIG_HOME=" + c.path("helm", "config"), "HELM_DATA_HOME=" + c.path("helm", "data")}, bins.helm, args...)
	require.NoError(c.t, err, "helm %s:\n%s", strings.Join(args, " "), out)
	return out
}

// cleanup stops the nodes, then the host daemons, removes the network,
// the cgroups and (unless the test failed) the directory.
func (c *cluster) cleanup() {
	for _, n := range c.nodes {
		n.powerOff()
	}
	c.mu.Lock()
	ds := c.daemons
	c.mu.Unlock()
	for i := len(ds) - 1; i >= 0; i-- {
		ds[i].stop(10 * time.Second)
	}
	_, _ = run("/", nil, "ip", "link", "del", c.bridge)
	for _, n := range c.nodes {
		n.removeCgroups()
	}
	c.keepLogs()
	if left := mountsUnder(c.dir); len(left) > 0 {
		c.t.Errorf("e2e-k8s: mounts remain under %s: %v; not removing it", c.dir, left)
		return
	}
	if err := os.RemoveAll(c.dir); err != nil {
		c.t.Logf("e2e-k8s: remove %s: %v", c.dir, err)
	}
}

// keepLogs copies every log to .cache/e2e-logs/<Test> (or
// $SHAREDCONTENT_E2E_LOGS) when the test failed or logs are kept, and
// prints the tails of the failed test's logs.
func (c *cluster) keepLogs() {
	keep := os.Getenv(envKeepLogs)
	if !c.t.Failed() && keep == "" {
		return
	}
	if keep == "" {
		keep = filepath.Join(repoRoot, ".cache", "e2e-logs")
	}
	keep = filepath.Join(keep, strings.ReplaceAll(c.t.Name(), "/", "_"))
	_ = os.RemoveAll(keep)
	_ = os.MkdirAll(keep, 0o755)
	c.mu.Lock()
	logs := append([]string(nil), c.logs...)
	c.mu.Unlock()
	for _, n := range c.nodes {
		more, _ := filepath.Glob(filepath.Join(n.dir, "logs", "*.log"))
		logs = append(logs, more...)
	}
	for _, l := range logs {
		rel, _ := filepath.Rel(c.dir, l)
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		_ = os.WriteFile(filepath.Join(keep, strings.ReplaceAll(rel, "/", "_")), b, 0o644)
		if c.t.Failed() {
			lines := strings.Split(tail(string(b), 40), "\n")
			for i, l := range lines {
				if len(l) > 300 {
					lines[i] = l[:300] + "…"
				}
			}
			c.t.Logf("----- %s (last lines)\n%s", rel, strings.Join(lines, "\n"))
		}
	}
	c.t.Logf("e2e-k8s: logs kept in %s", keep)
}

// mountsUnder lists the host's mount points below dir, deepest first.
func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// waitFor polls cond every second until it holds; it fails the test after
// timeout, with cond's last error.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			t.Fatalf("e2e-k8s: %s not reached within %v (last error: %v)", what, timeout, last)
		}
		time.Sleep(time.Second)
	}
}
