package main

// Replicas as real processes (docs/design.md §7): the sharedcontent-lockserver
// binary, built once, run several times against a real 3-member etcd
// cluster (internal/testutil/etcdtest).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// serverBinary builds the server once for the test binary's run.
func serverBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sharedcontent-lockserver-test-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "sharedcontent-lockserver")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// replicaProc is one running replica.
type replicaProc struct {
	url string
	cmd *exec.Cmd
	log string // its log file
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// startReplicas starts n replicas on endpoints with session TTL ttl.
func startReplicas(t *testing.T, n int, endpoints []string, ttl time.Duration) []*replicaProc {
	t.Helper()
	each := make([][]string, n)
	for i := range each {
		each[i] = endpoints
	}
	return startReplicasOn(t, each, ttl)
}

// startReplicasOn starts one replica per list of etcd endpoints (replica
// i talks to etcd through endpoints[i] only: a relay, for instance).
func startReplicasOn(t *testing.T, endpoints [][]string, ttl time.Duration) []*replicaProc {
	t.Helper()
	return startReplicasArgs(t, endpoints, ttl)
}

// startReplicasArgs is startReplicasOn with more flags for every replica.
func startReplicasArgs(t *testing.T, endpoints [][]string, ttl time.Duration, extra ...string) []*replicaProc {
	t.Helper()
	bin := serverBinary(t)
	dir := t.TempDir()
	reps := make([]*replicaProc, len(endpoints))
	for i := range reps {
		addr := freeAddr(t)
		r := &replicaProc{url: "http://" + addr, log: filepath.Join(dir, fmt.Sprintf("replica%d.log", i))}
		logf, err := os.Create(r.log)
		require.NoError(t, err)
		args := append([]string{"--listen", addr, "--data-dir", filepath.Join(dir, "unused"), "--log-level", "debug",
			"--etcd-endpoints", strings.Join(endpoints[i], ","), "--advertise-url", r.url,
			"--etcd-session-ttl", ttl.String(), "--etcd-prefix", "/sc-test/"}, extra...)
		r.cmd = exec.Command(bin, args...)
		r.cmd.Stdout, r.cmd.Stderr = logf, logf
		require.NoError(t, r.cmd.Start())
		reps[i] = r
		t.Cleanup(func() {
			_ = r.cmd.Process.Signal(syscall.SIGCONT)
			_ = r.cmd.Process.Kill()
			_ = r.cmd.Wait()
			logf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(r.log)
				t.Logf("replica %s log:\n%s", r.url, b)
			}
		})
	}
	return reps
}

var probe = &http.Client{Timeout: 2 * time.Second}

// ready reports whether the replica's /readyz answers 200.
func (r *replicaProc) ready() bool {
	resp, err := probe.Get(r.url + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// waitLeader polls every replica but the skipped ones until exactly one
// is ready, and returns it.
func waitLeader(t *testing.T, reps []*replicaProc, skip ...*replicaProc) *replicaProc {
	t.Helper()
	var last []string
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var ready []*replicaProc
		last = last[:0]
		for _, r := range reps {
			if contains(skip, r) {
				continue
			}
			if r.ready() {
				ready = append(ready, r)
				last = append(last, r.url)
			}
		}
		if len(ready) == 1 {
			return ready[0]
		}
		require.LessOrEqual(t, len(ready), 1, "two replicas ready at once: %v", last)
		time.Sleep(20 * time.Millisecond) // a poll's pace, not a synchronisation
	}
	t.Fatalf("no replica became the leader; ready: %v", last)
	return nil
}

func contains(rs []*replicaProc, r *replicaProc) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// lockAt sends one POST /lock to the replica: its status, error code and
// answer.
func lockAt(t *testing.T, r *replicaProc, resource, node string, timeout time.Duration) (int, api.LockResponse, api.ErrorResponse, http.Header) {
	t.Helper()
	wait := false
	body, err := json.Marshal(api.LockRequest{Type: api.OperationPull, ResourceID: resource, NodeID: node, Wait: &wait})
	require.NoError(t, err)
	c := &http.Client{Timeout: timeout}
	resp, err := c.Post(r.url+"/lock", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var ok api.LockResponse
	var bad api.ErrorResponse
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.Unmarshal(buf.Bytes(), &ok), buf.String())
	} else {
		_ = json.Unmarshal(buf.Bytes(), &bad)
	}
	return resp.StatusCode, ok, bad, resp.Header
}

// metric returns the sum of a metric's samples on the replica's /metrics
// (labels matched by prefix), or -1 when it has none.
func (r *replicaProc) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := probe.Get(r.url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	sum, found := 0.0, false
	for _, line := range strings.Split(buf.String(), "\n") {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		require.NoError(t, err, line)
		sum, found = sum+v, true
	}
	if !found {
		return -1
	}
	return sum
}

// replicaClient is a lockclient for node given the URLs of reps, in that
// order, retrying long enough to ride out a failover (opts may change
// that).
func replicaClient(t *testing.T, node string, reps []*replicaProc, opts ...lockclient.Option) *lockclient.Client {
	t.Helper()
	urls := make([]string, len(reps))
	for i, r := range reps {
		urls[i] = r.url
	}
	opts = append([]lockclient.Option{lockclient.WithNodeID(node),
		lockclient.WithMaxRetries(20), lockclient.WithRetryInterval(200 * time.Millisecond)}, opts...)
	client, err := lockclient.New(strings.Join(urls, ","), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	return client
}

// lockCycle keeps the client's session, then locks and unlocks resource.
func lockCycle(ctx context.Context, t *testing.T, client *lockclient.Client, resource string) {
	t.Helper()
	require.NoError(t, tryLockCycle(ctx, client, resource))
}

// tryLockCycle is lockCycle's work, for a goroutine: its first error.
func tryLockCycle(ctx context.Context, client *lockclient.Client, resource string) error {
	if _, err := client.Session(ctx, api.SessionRequest{NodeID: client.NodeID()}); err != nil {
		return fmt.Errorf("session: %w", err)
	}
	res, err := client.Lock(ctx, api.LockRequest{Type: api.OperationPull, ResourceID: resource})
	if err != nil {
		return fmt.Errorf("lock %s: %w", resource, err)
	}
	if !res.Acquired {
		return fmt.Errorf("lock %s: not acquired: %+v", resource, res)
	}
	if err := client.Unlock(ctx, res.Lease, true, nil); err != nil {
		return fmt.Errorf("unlock %s: %w", resource, err)
	}
	return nil
}
