package main

// Memory under abuse (docs/design.md §10.3): the stand-alone coordinator, built from
// this package and run in its own process, driven over loopback HTTP, so
// that the memory measured (VmRSS, and the Go heap from /metrics) is the
// server's alone. make bench runs them with -benchtime 1x. One iteration is one whole
// scenario: the figures are custom metrics, and ns/op means little.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sharedcontent/sharedcontent/internal/testutil/renew"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// serverProc is a running sharedcontent-lockserver.
type serverProc struct {
	cmd  *exec.Cmd
	addr string // host:port it listens on
	log  string // its log file
}

// listenRE finds the address in the server's "serving" log line.
var listenRE = regexp.MustCompile(`listen="?([^"\s]+)`)

// startServer builds the server and starts it on a free loopback port
// with args added to its flags. It is stopped (SIGTERM) when b ends.
func startServer(b *testing.B, args ...string) *serverProc {
	b.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		b.Skip("no go tool to build the server with:", err)
	}
	dir := b.TempDir()
	bin := filepath.Join(dir, "sharedcontent-lockserver")
	if out, err := exec.Command(goTool, "build", "-trimpath", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		b.Fatal(err)
	}
	s := &serverProc{log: filepath.Join(dir, "server.log")}
	s.cmd = exec.Command(bin, append([]string{"--listen", "127.0.0.1:0", "--data-dir", data}, args...)...)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	logFile, err := os.Create(s.log)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	copied := make(chan struct{})
	b.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
		<-copied
		logFile.Close()
	})
	// The "serving" line (at level info) names the address.
	lines := bufio.NewReader(stderr)
	kill := time.AfterFunc(30*time.Second, func() { _ = s.cmd.Process.Kill() })
	defer kill.Stop()
	for s.addr == "" {
		line, err := lines.ReadString('\n')
		_, _ = logFile.WriteString(line)
		if err != nil {
			close(copied) // nothing left to copy: the cleanup must not wait for it
			b.Fatalf("server exited before serving: %v (log: %s)", err, s.log)
		}
		if m := listenRE.FindStringSubmatch(line); m != nil && strings.Contains(line, "serving") {
			s.addr = m[1]
		}
	}
	go func() {
		defer close(copied)
		_, _ = io.Copy(logFile, lines)
	}()
	return s
}

// url returns the server's base URL.
func (s *serverProc) url() string { return "http://" + s.addr }

// rss returns the server's resident set size (VmRSS) in bytes.
func (s *serverProc) rss(b *testing.B) float64 {
	b.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb * 1024
		}
	}
	b.Fatal("no VmRSS in /proc/PID/status")
	return 0
}

// metric returns the value of an unlabelled metric of /metrics.
func (s *serverProc) metric(b *testing.B, name string) float64 {
	b.Helper()
	status, body, err := fasthttp.GetTimeout(nil, s.url()+"/metrics", 10*time.Second)
	if err != nil || status != http.StatusOK {
		b.Fatalf("GET /metrics: %d %v", status, err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				b.Fatal(err)
			}
			return v
		}
	}
	b.Fatalf("no %s in /metrics", name)
	return 0
}

// memSample is the server's memory at one moment.
type memSample struct {
	at        time.Duration // since the scenario started
	rss, heap float64       // VmRSS and go_memstats_heap_inuse_bytes
	gcs       float64       // garbage collections so far
}

func (s *serverProc) sample(b *testing.B, start time.Time) memSample {
	return memSample{at: time.Since(start), rss: s.rss(b), heap: s.metric(b, "go_memstats_heap_inuse_bytes"),
		gcs: s.metric(b, "go_gc_duration_seconds_count")}
}

func (m memSample) String() string {
	return fmt.Sprintf("t=%5.1fs rss=%6.1f MiB heap_inuse=%6.1f MiB gcs=%.0f", m.at.Seconds(), m.rss/(1<<20), m.heap/(1<<20), m.gcs)
}

const (
	// idleKeys is the number of distinct resources locked, then released.
	idleKeys = 200_000
	// idleWorkers is the number of concurrent HTTP clients that lock and
	// unlock them.
	idleWorkers = 32
	// idleLeaseTTL is the server's --lease-ttl: every lock is still held
	// when the last one is taken (so its lease must outlive the locking
	// phase: 8 to 25 s on a busy 2-core machine), and a released lease is
	// remembered this long. It does not lengthen the run: the released
	// leases are forgotten before the runtime forces its collection.
	idleLeaseTTL = 45 * time.Second
	// idleSettleMax bounds the wait, after the last unlock, for the
	// server's next two collections.
	idleSettleMax = 200 * time.Second
)

// BenchmarkMemoryIdleKeys: idleKeys distinct resources are locked (update:
// no references are recorded), all at once, over idleWorkers keep-alive
// connections; then all are released, and the server is left idle.
// Reported in MiB, VmRSS and the Go heap in use: base-* before the load,
// held-* with every lock held, released-* right after the last unlock,
// swept-* one lease TTL (plus two sweeps) after it, when the coordinator
// has forgotten every key and lease, and settled-* 5 s after the server's
// second garbage collection since (the runtime forces one 2 minutes after
// the last; idleSettleMax at most). About 3 minutes in all. The server
// runs with --lease-ttl 45s --session-ttl 60s --completed-ttl 1s.
func BenchmarkMemoryIdleKeys(b *testing.B) {
	for range b.N {
		benchIdleKeys(b)
	}
}

func benchIdleKeys(b *testing.B) {
	// A lease TTL must stay under the nodes' fail-open delay (docs/design.md
	// §8.8), which follows the session TTL: 60 s gives 88 s.
	s := startServer(b, "--lease-ttl", idleLeaseTTL.String(), "--session-ttl", "60s", "--completed-ttl", "1s")
	hc := &fasthttp.HostClient{Addr: s.addr, MaxConns: idleWorkers}
	start := time.Now()
	base := s.sample(b, start)
	b.Logf("base     %v", base)

	leases := make([]string, idleKeys)
	id := func(i int) string { return fmt.Sprintf("sha256:%064x", i) }
	each := func(fn func(i int) error) {
		var wg sync.WaitGroup
		var failed atomic.Pointer[error]
		for w := range idleWorkers {
			wg.Go(func() {
				for i := w; i < idleKeys && failed.Load() == nil; i += idleWorkers {
					if err := fn(i); err != nil {
						failed.Store(&err)
					}
				}
			})
		}
		wg.Wait()
		if err := failed.Load(); err != nil {
			b.Fatal(*err)
		}
	}
	each(func(i int) error {
		var resp api.LockResponse
		err := post(hc, "/lock", api.LockRequest{Type: api.OperationUpdate, ResourceID: id(i), NodeID: "node-1"}, &resp)
		if err == nil && !resp.Acquired {
			err = fmt.Errorf("lock %s: not acquired: %+v", id(i), resp)
		}
		leases[i] = resp.LeaseID
		return err
	})
	held := s.sample(b, start)
	b.Logf("held     %v (%d locks)", held, idleKeys)
	each(func(i int) error {
		var resp api.UnlockResponse
		return post(hc, "/unlock", api.UnlockRequest{Type: api.OperationUpdate, ResourceID: id(i), LeaseID: leases[i], Success: true}, &resp)
	})
	released := s.sample(b, start)
	releasedAt := time.Now()
	b.Logf("released %v", released)
	hc.CloseIdleConnections()

	// Every released lease is forgotten a lease TTL after its release, at
	// the next sweep (every 750 ms with these flags). The memory they
	// held is free once the garbage collector has run: an idle server
	// does not allocate towards its next heap goal, so that is the Go
	// runtime's forced collection, at most 2 minutes after the last one.
	// The scavenger hands the free pages back to the system after that
	// collection or the next (its goal follows the previous cycle's heap),
	// which comes soon, the heap goal being small by then.
	var swept, settled memSample
	var collected time.Time
	for deadline := releasedAt.Add(idleSettleMax); settled.at == 0; {
		time.Sleep(time.Until(releasedAt.Add(time.Duration(math.Ceil(time.Since(releasedAt).Seconds()/5+0.01)) * 5 * time.Second)))
		m := s.sample(b, start)
		b.Logf("idle     %v", m)
		switch {
		case swept.at == 0:
			if time.Since(releasedAt) >= idleLeaseTTL+1500*time.Millisecond {
				swept = m
			}
		case m.gcs >= swept.gcs+2 && collected.IsZero():
			collected = time.Now() // then give the scavenger 5 s
		case !collected.IsZero() && time.Since(collected) >= 5*time.Second, time.Now().After(deadline):
			settled = m
		}
	}
	b.Logf("swept    %v", swept)
	b.Logf("settled  %v", settled)
	for _, m := range []struct {
		name string
		s    memSample
	}{{"base", base}, {"held", held}, {"released", released}, {"swept", swept}, {"settled", settled}} {
		b.ReportMetric(m.s.rss/(1<<20), m.name+"-rss-MiB")
		b.ReportMetric(m.s.heap/(1<<20), m.name+"-heap-MiB")
	}
}

// post sends one JSON request of the API and decodes its answer.
func post(hc *fasthttp.HostClient, path string, in, out any) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req.SetRequestURI("http://" + hc.Addr + path)
	req.Header.SetMethod(http.MethodPost)
	req.Header.SetContentType("application/json")
	req.SetBodyRaw(body)
	if err := hc.DoTimeout(req, resp, 10*time.Second); err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	if resp.StatusCode() != http.StatusOK {
		return fmt.Errorf("POST %s: %d %s", path, resp.StatusCode(), bytes.TrimSpace(resp.Body()))
	}
	return json.Unmarshal(resp.Body(), out)
}

// waitersN is the number of waiters of BenchmarkWaiters.
const waitersN = 5000

// BenchmarkWaiters: a holder (a node with its session) takes a pull lock; waitersN lockclient
// Clients (one node each, with its session) call Lock on the same key at
// once and wait, each on its node's event stream; once every stream is open, the holder unlocks
// with success. Reported: the time from the start of that Unlock until
// each waiter's Lock returned Skipped, p50-ms, p99-ms and max-ms (all
// waiters have their outcome: the total), first-ms, and unlock-ms (the
// holder's Unlock call, which persists the holder's reference first). The
// server runs with --max-conns 16000 --max-conns-per-ip 16000: its
// defaults allow 512 event streams per IP address, and every client here
// is 127.0.0.1.
func BenchmarkWaiters(b *testing.B) {
	for range b.N {
		benchWaiters(b)
	}
}

func benchWaiters(b *testing.B) {
	s := startServer(b, "--max-conns", "16000", "--max-conns-per-ip", "16000")
	// The waiters share the transports (not the streams): as many
	// connections as there are calls in flight, without 5,000 pools.
	streams := &countingTransport{RoundTripper: &http.Transport{MaxIdleConnsPerHost: waitersN}}
	long := &http.Client{Transport: streams}
	short := &fasthttp.HostClient{Addr: s.addr, MaxConns: 1024, MaxConnWaitTimeout: 30 * time.Second}
	newClient := func(node string) *lockclient.Client {
		c, err := lockclient.New(s.url(), lockclient.WithNodeID(node), lockclient.WithLongClient(long), lockclient.WithShortClient(short))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	ctx := context.Background()
	req := api.LockRequest{Type: api.OperationPull, ResourceID: fmt.Sprintf("sha256:waiters-%d", time.Now().UnixNano())}
	holder := newClient("holder")
	// The holder records its pull, so it holds a live session
	// (docs/design.md §8.4), renewed while the waiters queue as its
	// daemon would, outside the timed unlock.
	session := renew.New("holder", holder.Session)
	if err := session.Renew(ctx); err != nil {
		b.Fatal(err)
	}
	res, err := holder.Lock(ctx, req)
	if err != nil || !res.Acquired {
		b.Fatalf("holder: %+v %v", res, err)
	}
	ends := make([]time.Time, waitersN)
	errs := make([]error, waitersN)
	var wg sync.WaitGroup
	queueStart := time.Now()
	for i := range waitersN {
		c := newClient(fmt.Sprintf("node-%d", i))
		wg.Go(func() {
			// A member, as a real node is: the coordinator's limit on
			// event streams in all follows its membership.
			if _, err := c.Session(ctx, api.SessionRequest{}); err != nil {
				errs[i] = fmt.Errorf("waiter %d: session: %w", i, err)
				return
			}
			res, err := c.Lock(ctx, req)
			ends[i] = time.Now()
			if err == nil && !res.Skipped {
				err = fmt.Errorf("waiter %d: %+v", i, res)
			}
			errs[i] = err
		})
	}
	// Every waiter is queued (the server's pull queue depth) with its
	// event stream open: its node's stream (/lock/events), or a stream of
	// its own request (/lock/subscribe) where the node stream is refused.
	depth := `sharedcontent_lock_queue_depth{type="pull"}`
	for streams.open.Load() < waitersN || s.metric(b, depth) < waitersN {
		if err := session.Renew(ctx); err != nil {
			b.Fatal(err)
		}
		if time.Since(queueStart) > time.Minute {
			b.Fatalf("after a minute, %d of %d event streams open, %v waiters queued", streams.open.Load(), waitersN, s.metric(b, depth))
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Logf("%d waiters queued, each with its event stream, in %v; server rss %.1f MiB", waitersN, time.Since(queueStart).Round(time.Millisecond), s.rss(b)/(1<<20))
	if err := session.Renew(ctx); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := holder.Unlock(ctx, res.Lease, true, nil); err != nil {
		b.Fatal(err)
	}
	unlock := time.Since(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, waitersN)
	for i, e := range ends {
		lat[i] = e.Sub(start)
	}
	slices.Sort(lat)
	ms := func(q float64) float64 {
		return float64(lat[max(int(math.Ceil(q*float64(len(lat))))-1, 0)]) / float64(time.Millisecond)
	}
	b.Logf("outcomes after the unlock: first %.1f ms, p50 %.1f ms, p99 %.1f ms, max (all) %.1f ms; unlock call %v",
		ms(0), ms(0.5), ms(0.99), ms(1), unlock.Round(time.Microsecond))
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
	b.ReportMetric(ms(1), "max-ms")
	b.ReportMetric(ms(0), "first-ms")
	b.ReportMetric(float64(unlock)/float64(time.Millisecond), "unlock-ms")
}

// countingTransport counts the event streams the server accepted: the
// nodes' (/lock/events) and the per-request ones (/lock/subscribe).
type countingTransport struct {
	http.RoundTripper
	open atomic.Int64
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.RoundTripper.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusOK && (req.URL.Path == "/lock/subscribe" || req.URL.Path == "/lock/events") {
		t.open.Add(1)
	}
	return resp, err
}
