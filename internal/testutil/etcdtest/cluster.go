package etcdtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/sharedcontent/sharedcontent/internal/testutil/testca"
)

// Environment variables: EnvBinary names the etcd binary; EnvSkip=1 skips
// the tests that need it when it is not set.
const (
	EnvBinary = "SHAREDCONTENT_ETCD"
	EnvSkip   = "SHAREDCONTENT_SKIP_ETCD"
)

// startTimeout bounds how long a cluster (or a restarted member) may take
// to become healthy: generous, for a loaded machine.
const startTimeout = 2 * time.Minute

// Options configure Start. The zero value is a 3-member cluster with
// etcd's default limits.
type Options struct {
	// Members is the cluster's size; 0 means 3.
	Members int
	// MaxTxnOps is etcd's --max-txn-ops; 0 keeps etcd's default (128).
	MaxTxnOps int
	// MaxRequestBytes is etcd's --max-request-bytes; 0 keeps etcd's
	// default (1.5 MiB).
	MaxRequestBytes int
	// TLS serves the client URLs over TLS (https://) with client
	// certificate authentication (etcd's --client-cert-auth), certificates
	// of a CA of the test's own (Cluster.TLS); peers stay plain HTTP.
	TLS bool
	// ElectionTimeout is etcd's --election-timeout (its
	// --heartbeat-interval a tenth of it); 0 keeps etcd's defaults
	// (1 s, 100 ms). A longer one stands for a loaded machine, where
	// etcd takes longer to elect a leader.
	ElectionTimeout time.Duration
}

// TLSFiles are the PEM files of a TLS cluster's clients: the CA that
// signed every certificate, and a client certificate and its key, as
// etcdctl's --cacert, --cert and --key take them.
type TLSFiles struct {
	CACert, Cert, Key string
}

// Cluster is a running etcd cluster. Its members are stopped when the
// test ends.
type Cluster struct {
	t       testing.TB
	bin     string
	opts    Options
	initial string // --initial-cluster
	members []*member

	ca        *testca.CA
	serverTLS TLSFiles    // the members' certificate (server and client use), key and CA
	clientTLS TLSFiles    // a client's
	tlsConfig *tls.Config // the clients' configuration; nil without TLS
}

// member is one etcd process of a Cluster.
type member struct {
	name      string
	dir       string
	clientURL string
	peerURL   string
	logPath   string

	mu   sync.Mutex
	cmd  *exec.Cmd     // protected by mu; nil when stopped
	done chan struct{} // protected by mu; closed when cmd exits
}

// Binary returns the etcd binary of $SHAREDCONTENT_ETCD, or else the
// bin/etcd that `make etcd` left at the module's root. Without either the
// test fails, or skips when $SHAREDCONTENT_SKIP_ETCD=1.
func Binary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv(EnvBinary)
	if bin == "" {
		bin = built()
	}
	if bin == "" {
		if os.Getenv(EnvSkip) == "1" {
			t.Skipf("etcdtest: $%s is not set and $%s=1: skipping a test that needs etcd", EnvBinary, EnvSkip)
		}
		t.Fatalf("etcdtest: no etcd: $%s is not set and bin/etcd is not built: run `make etcd` "+
			"(`make test` does, and sets $%[1]s), or set %s=1 to skip the tests that need etcd", EnvBinary, EnvSkip)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("etcdtest: $%s: %v (build it with `make etcd`)", EnvBinary, err)
	}
	return bin
}

// built returns the module root's bin/etcd when it exists: the root is
// the first directory up from the working directory (a test's package
// directory) whose go.mod is the main module's.
func built() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.HasPrefix(string(b), "module github.com/sharedcontent/sharedcontent\n") {
			bin := filepath.Join(dir, "bin", "etcd")
			if _, err := os.Stat(bin); err != nil {
				return ""
			}
			return bin
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// Start starts a cluster and waits until every member answers a
// linearizable read. The cluster is killed when t ends. A member that
// exits while starting (another process took its port between freePorts
// and its bind) makes it start the cluster again on other ports, up to
// startAttempts times.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	bin := Binary(t)
	if opts.Members == 0 {
		opts.Members = 3
	}
	var sec *security
	if opts.TLS {
		sec = newSecurity(t)
	}
	for attempt := 1; ; attempt++ {
		c, err := tryStart(t, bin, opts, sec)
		if err == nil {
			return c
		}
		c.kill()
		if !errors.Is(err, errExited) || attempt == startAttempts {
			c.dumpLogs()
			t.Fatalf("etcdtest: %v", err)
		}
		t.Logf("etcdtest: %v; starting again on other ports", err)
	}
}

// startAttempts is how many times Start starts a cluster whose member
// exited while starting.
const startAttempts = 3

// errExited is the error of a member that exited while starting.
var errExited = errors.New("exited while starting")

// tryStart starts a cluster on new ports and data directories.
func tryStart(t testing.TB, bin string, opts Options, sec *security) (*Cluster, error) {
	c := &Cluster{t: t, bin: bin, opts: opts}
	scheme := "http"
	if sec != nil {
		c.ca, c.serverTLS, c.clientTLS, c.tlsConfig = sec.ca, sec.server, sec.client, sec.config
		scheme = "https"
	}
	root := t.TempDir()
	ports := pickPorts(t, 2*opts.Members)
	var initial []string
	for i := range opts.Members {
		m := &member{
			name:      fmt.Sprintf("m%d", i),
			dir:       filepath.Join(root, fmt.Sprintf("m%d", i), "data"),
			clientURL: scheme + "://127.0.0.1:" + strconv.Itoa(ports[2*i]),
			peerURL:   "http://127.0.0.1:" + strconv.Itoa(ports[2*i+1]),
			logPath:   filepath.Join(root, fmt.Sprintf("etcd-m%d.log", i)),
		}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peerURL)
	}
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			c.dumpLogs()
		}
	})
	c.initial = strings.Join(initial, ",")
	for _, m := range c.members {
		if err := c.start(m); err != nil {
			return c, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for i := range c.members {
		if err := c.waitHealthy(ctx, i); err != nil {
			return c, err
		}
	}
	return c, nil
}

// kill kills every member.
func (c *Cluster) kill() {
	for _, m := range c.members {
		m.signal(syscall.SIGKILL)
	}
}

// pickPorts is freePorts; a test of the retry replaces it.
var pickPorts = freePorts

// freePorts returns n distinct free TCP ports on 127.0.0.1. They are free
// when it returns; etcd binds them a moment later.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var out []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("etcdtest: free port: %v", err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	return out
}

// start starts m's process (on a restart, etcd reads the membership from
// m's data directory and ignores --initial-cluster).
func (c *Cluster) start(m *member) error {
	args := []string{
		"--name", m.name,
		"--data-dir", m.dir,
		"--listen-client-urls", m.clientURL,
		"--advertise-client-urls", m.clientURL,
		"--listen-peer-urls", m.peerURL,
		"--initial-advertise-peer-urls", m.peerURL,
		"--initial-cluster", c.initial,
		"--initial-cluster-state", "new",
		"--initial-cluster-token", "etcdtest",
		"--auto-compaction-mode", "revision",
		"--auto-compaction-retention", "10000",
		"--quota-backend-bytes", strconv.Itoa(1 << 30),
		// Tests kill processes, not machines: the page cache keeps what a
		// killed member wrote, and fsync is the slowest part of a commit.
		"--unsafe-no-fsync",
		"--log-level", "warn",
		"--log-outputs", "stderr",
	}
	if c.opts.MaxTxnOps > 0 {
		args = append(args, "--max-txn-ops", strconv.Itoa(c.opts.MaxTxnOps))
	}
	if d := c.opts.ElectionTimeout; d > 0 {
		args = append(args, "--election-timeout", strconv.FormatInt(d.Milliseconds(), 10),
			"--heartbeat-interval", strconv.FormatInt(d.Milliseconds()/10, 10))
	}
	if c.opts.MaxRequestBytes > 0 {
		args = append(args, "--max-request-bytes", strconv.Itoa(c.opts.MaxRequestBytes))
	}
	if c.tlsConfig != nil {
		args = append(args, "--cert-file", c.serverTLS.Cert, "--key-file", c.serverTLS.Key,
			"--trusted-ca-file", c.serverTLS.CACert, "--client-cert-auth")
	}
	log, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", m.name, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		log.Close()
		close(done)
	}()
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
	return nil
}

// signal sends sig to m's process, if it runs, and waits for it to exit.
func (m *member) signal(sig syscall.Signal) {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	<-done
}

// running reports whether m's process runs, and returns the channel
// closed when it exits.
func (m *member) running() (chan struct{}, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.done, m.cmd != nil
}

// waitHealthy waits until member i answers a linearizable read, which
// needs a leader and a quorum.
func (c *Cluster) waitHealthy(ctx context.Context, i int) error {
	m := c.members[i]
	cli, err := c.newClient([]string{m.clientURL})
	if err != nil {
		return err
	}
	defer cli.Close()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if done, ok := m.running(); !ok {
			return fmt.Errorf("member %s is stopped", m.name)
		} else {
			select {
			case <-done:
				return fmt.Errorf("member %s %w (see its log)", m.name, errExited)
			default:
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, last = cli.Get(rctx, "etcdtest/health")
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("member %s not healthy: %w (last: %v)", m.name, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// Endpoints returns the client URLs of every member, stopped ones
// included.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.clientURL
	}
	return out
}

// Endpoint returns member i's client URL.
func (c *Cluster) Endpoint(i int) string { return c.members[i].clientURL }

// Client returns a client of every member, closed when t ends.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	return c.ClientOf(t, c.Endpoints()...)
}

// ClientOf returns a client of the given endpoints, closed when t ends.
func (c *Cluster) ClientOf(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := c.newClient(endpoints)
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func (c *Cluster) newClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		TLS:         c.tlsConfig,
	})
}

// TLS returns the files of a client of a TLS cluster (Options.TLS): the
// CA, a client certificate and its key. Without TLS, they are empty.
func (c *Cluster) TLS() TLSFiles { return c.clientTLS }

// CA returns the CA of a TLS cluster (nil without TLS): a test issues
// other certificates with it.
func (c *Cluster) CA() *testca.CA { return c.ca }

// Stop stops member i gracefully (SIGTERM) and waits for it to exit.
func (c *Cluster) Stop(i int) { c.members[i].signal(syscall.SIGTERM) }

// Kill kills member i (SIGKILL) and waits for it to exit.
func (c *Cluster) Kill(i int) { c.members[i].signal(syscall.SIGKILL) }

// Restart starts the stopped member i again on its data directory and
// waits until it answers a linearizable read (which needs a quorum: restart
// enough members first, then wait with WaitHealthy).
func (c *Cluster) Restart(t testing.TB, i int) {
	t.Helper()
	if err := c.start(c.members[i]); err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
}

// WaitHealthy waits until every running member answers a linearizable
// read.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for i, m := range c.members {
		if _, ok := m.running(); !ok {
			continue
		}
		if err := c.waitHealthy(ctx, i); err != nil {
			t.Fatalf("etcdtest: %v", err)
		}
	}
}

// WaitNoLeader waits until member i knows no leader: a member cut from
// its quorum refuses proposals from then on (etcd's check quorum and
// pre-vote), rather than taking them into a log that a later leader might
// commit.
func (c *Cluster) WaitNoLeader(t testing.TB, i int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := c.status(i)
		if err == nil && st.Leader == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("etcdtest: member %s still has a leader: %v", c.members[i].name, errors.Join(ctx.Err(), err))
		case <-tick.C:
		}
	}
}

// Leader returns the index of the cluster's leader: the running member
// that some running member names as its leader and that answers itself.
func (c *Cluster) Leader(t testing.TB) int {
	t.Helper()
	ids := map[uint64]int{} // member ID → index
	var leader uint64
	for i, m := range c.members {
		if _, ok := m.running(); !ok {
			continue
		}
		st, err := c.status(i)
		if err != nil {
			continue
		}
		ids[st.Header.MemberId] = i
		if st.Leader != 0 {
			leader = st.Leader
		}
	}
	i, ok := ids[leader]
	if !ok {
		t.Fatalf("etcdtest: no running member is the leader (leader ID %x)", leader)
	}
	return i
}

// status asks member i for its status.
func (c *Cluster) status(i int) (*clientv3.StatusResponse, error) {
	m := c.members[i]
	cli, err := c.newClient([]string{m.clientURL})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cli.Status(ctx, m.clientURL)
}

// Logs returns the paths of the members' logs (etcd's stderr, warnings
// and above), for a test that keeps its logs.
func (c *Cluster) Logs() []string {
	out := make([]string, 0, len(c.members))
	for _, m := range c.members {
		out = append(out, m.logPath)
	}
	return out
}

// dumpLogs logs the tail of every member's log.
func (c *Cluster) dumpLogs() {
	for _, m := range c.members {
		b, err := os.ReadFile(m.logPath)
		if err != nil {
			continue
		}
		const tail = 4096
		if len(b) > tail {
			b = b[len(b)-tail:]
		}
		c.t.Logf("etcdtest: log of %s (tail):\n%s", m.name, b)
	}
}
