package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sharedcontent/sharedcontent/internal/testutil/testnet"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver"

	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/lockserver/httpserver"
)

const (
	// redisRetry is how often a hot-key contender retries SET NX: Redis
	// has no queue, so a loser polls.
	redisRetry = time.Millisecond
	// lockTTL is the lease of every system's lock: long enough never to
	// expire during a cycle.
	lockTTL = 15 * time.Second
	// unlockTimeout bounds an unlock issued after the round's deadline.
	unlockTimeout = 5 * time.Second
)

// lockClient is one contender: a separate connection and identity, as one
// node would have.
type lockClient interface {
	lock(ctx context.Context, key string) error
	unlock(ctx context.Context, key string) error
	close()
}

// lockSystem makes contenders of one lock service.
type lockSystem struct {
	name      string
	newClient func(i int) (lockClient, error)
	stop      func()
	// pid is the server's process, whose CPU time counts with the
	// benchmark's own; 0 when the server runs in this process.
	pid int
	// accepted, when known, counts the TCP connections the server has
	// accepted so far.
	accepted func() int64
	// distinctOnly: the system does not exclude (a floor), so a hot key
	// means nothing for it.
	distinctOnly bool
}

// ---- sharedcontent: the coordinator over HTTP through lockclient ----

// startOurs starts the coordinator in this process, on a loopback TCP
// port, with its default configuration and a bbolt data directory. The
// benchmark takes `update` locks: exclusive per key, FIFO, no retained
// completion and no reference write, the analogue of a mutex.
func startOurs() (*lockSystem, error) {
	dir, err := os.MkdirTemp("", "bench-lockserver-")
	if err != nil {
		return nil, err
	}
	srv, err := httpserver.Open(httpserver.Config{Config: lockserver.DefaultConfig(), DataDir: dir})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	counted := testnet.Count(ln)
	go srv.Serve(counted)
	url := "http://" + ln.Addr().String()
	return &lockSystem{
		name:     "sharedcontent",
		accepted: counted.Accepted,
		newClient: func(i int) (lockClient, error) {
			c, err := lockclient.New(url, lockclient.WithNodeID(fmt.Sprintf("bench-%d", i)))
			if err != nil {
				return nil, err
			}
			return &oursClient{c: c}, nil
		},
		stop: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
			os.RemoveAll(dir)
		},
	}, nil
}

type oursClient struct {
	c     *lockclient.Client
	lease *lockclient.Lease
}

func (o *oursClient) lock(ctx context.Context, key string) error {
	res, err := o.c.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: key})
	if err != nil {
		return err
	}
	if !res.Acquired {
		return fmt.Errorf("update lock %s: not acquired: %+v", key, res)
	}
	o.lease = res.Lease
	return nil
}

func (o *oursClient) unlock(ctx context.Context, _ string) error {
	err := o.c.Unlock(ctx, o.lease, true, nil)
	o.lease = nil
	return err
}

func (o *oursClient) close() { o.c.Close() }

// ---- etcd: concurrency.Mutex, one session (lease) per contender ----

func etcdSystem(p *peer, cfg *clientv3.Config) *lockSystem {
	sys := etcdMutexSystem(*cfg)
	sys.name, sys.pid = "etcd", p.cmd.Process.Pid
	return sys
}

type etcdClient struct {
	c       *clientv3.Client
	s       *concurrency.Session
	mutexes map[string]*concurrency.Mutex
}

func (e *etcdClient) mutex(key string) *concurrency.Mutex {
	m, ok := e.mutexes[key]
	if !ok {
		m = concurrency.NewMutex(e.s, "/bench/"+key)
		e.mutexes[key] = m
	}
	return m
}

func (e *etcdClient) lock(ctx context.Context, key string) error {
	return e.mutex(key).Lock(ctx)
}

func (e *etcdClient) unlock(ctx context.Context, key string) error {
	return e.mutex(key).Unlock(ctx)
}

func (e *etcdClient) close() {
	e.s.Close()
	e.c.Close()
}

// ---- Redis: SET key token NX PX, compare-and-delete by Lua ----

// redisUnlock deletes the key only if it still holds this contender's token.
var redisUnlock = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

func redisSystem(p *peer) *lockSystem {
	addr := p.addr
	return &lockSystem{
		name: "redis",
		pid:  p.cmd.Process.Pid,
		newClient: func(int) (lockClient, error) {
			c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2, MinIdleConns: 1})
			var b [16]byte
			rand.Read(b[:])
			return &redisClient{c: c, token: hex.EncodeToString(b[:])}, nil
		},
		stop: func() {},
	}
}

type redisClient struct {
	c     *redis.Client
	token string
}

func (r *redisClient) lock(ctx context.Context, key string) error {
	for {
		err := r.c.Do(ctx, "SET", key, r.token, "NX", "PX", lockTTL.Milliseconds()).Err()
		if err == nil {
			return nil
		}
		if !errors.Is(err, redis.Nil) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(redisRetry):
		}
	}
}

func (r *redisClient) unlock(ctx context.Context, key string) error {
	n, err := redisUnlock.Run(ctx, r.c, []string{key}, r.token).Int()
	if err == nil && n != 1 {
		err = fmt.Errorf("redis unlock %s: the key no longer held our token", key)
	}
	return err
}

func (r *redisClient) close() { r.c.Close() }

// ---- the measurement ----

// lockScenario is one row group of the lock table.
type lockScenario struct {
	clients int
	hot     bool // all on one key, else one key per client
}

func (s lockScenario) String() string {
	k := "distinct keys"
	if s.hot {
		k = "hot key"
	}
	return fmt.Sprintf("%s, %d clients", k, s.clients)
}

// lockResult is one system in one scenario, over all its rounds.
type lockResult struct {
	System   string
	Scenario lockScenario
	// Rate is the median over rounds of completed lock+unlock cycles/s.
	Rate     float64
	Rates    []float64
	P50, P99 time.Duration // of one lock+unlock cycle, pooled over rounds
	MaxWait  time.Duration // longest lock acquisition
	// CPUPerCycle is the CPU time of the benchmark process (clients, and
	// our server) plus the peer's server process, per completed cycle.
	CPUPerCycle time.Duration
	// ConnsPerCycle is the TCP connections the server accepted per cycle
	// (-1: not measured).
	ConnsPerCycle float64
	MinCount      int     // per-client cycles over all rounds: fewest
	MaxCount      int     // most
	CountCV       float64 // stddev/mean of the per-client cycles
	Errors        int
	FirstError    string
}

type roundSample struct {
	conns  int64           // connections accepted during the round; -1: unknown
	cpu    time.Duration   // CPU time of this process and the server's
	cycles []time.Duration // per completed cycle
	waits  []time.Duration // per completed cycle: time to acquire
	counts []int           // per client
	errs   int
	err    error
}

// runRound lets every client lock and unlock its key for d and returns
// what completed before the deadline.
func runRound(sys *lockSystem, clients []lockClient, keys []string, d time.Duration) roundSample {
	pid := sys.pid
	accepted := func() int64 {
		if sys.accepted == nil {
			return 0
		}
		return sys.accepted()
	}
	conns0 := accepted()
	cpu := func() time.Duration {
		if pid == 0 {
			return cpuTime(0)
		}
		return cpuTime(0) + cpuTime(pid)
	}
	cpu0 := cpu()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	deadline, _ := ctx.Deadline()
	type perClient struct {
		cycles, waits []time.Duration
		n, errs       int
		err           error
	}
	res := make([]perClient, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			pc := &res[i]
			for ctx.Err() == nil {
				t0 := time.Now()
				if err := c.lock(ctx, keys[i]); err != nil {
					if ctx.Err() == nil {
						pc.errs++
						pc.err = err
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				t1 := time.Now()
				uctx, ucancel := context.WithTimeout(context.Background(), unlockTimeout)
				err := c.unlock(uctx, keys[i])
				ucancel()
				t2 := time.Now()
				if err != nil {
					pc.errs++
					pc.err = err
					continue
				}
				if t2.After(deadline) {
					break
				}
				pc.n++
				pc.cycles = append(pc.cycles, t2.Sub(t0))
				pc.waits = append(pc.waits, t1.Sub(t0))
			}
		})
	}
	wg.Wait()
	out := roundSample{cpu: cpu() - cpu0, conns: accepted() - conns0}
	if sys.accepted == nil {
		out.conns = -1
	}
	for _, pc := range res {
		out.cycles = append(out.cycles, pc.cycles...)
		out.waits = append(out.waits, pc.waits...)
		out.counts = append(out.counts, pc.n)
		out.errs += pc.errs
		if pc.err != nil && out.err == nil {
			out.err = pc.err
		}
	}
	return out
}

// lockBench runs every scenario with every system, interleaving the
// systems round by round so that background noise hits them alike.
func lockBench(all []*lockSystem, scenarios []lockScenario, rounds int, roundDur time.Duration, progress func(string)) ([]lockResult, error) {
	var out []lockResult
	for si, sc := range scenarios {
		var systems []*lockSystem
		for _, sys := range all {
			if !sc.hot || !sys.distinctOnly {
				systems = append(systems, sys)
			}
		}
		keys := make([]string, sc.clients)
		for i := range keys {
			if sc.hot {
				keys[i] = fmt.Sprintf("bench-hot-%d", si)
			} else {
				keys[i] = fmt.Sprintf("bench-%d-key-%d", si, i)
			}
		}
		clients := make([][]lockClient, len(systems))
		for k, sys := range systems {
			for i := range sc.clients {
				c, err := sys.newClient(i)
				if err != nil {
					return nil, fmt.Errorf("%s client: %w", sys.name, err)
				}
				clients[k] = append(clients[k], c)
			}
			// Warm up: connections, sessions, scripts loaded.
			runRound(sys, clients[k], keys, 300*time.Millisecond)
		}
		samples := make([][]roundSample, len(systems))
		for r := range rounds {
			for j := range systems {
				k := (j + r) % len(systems)
				progress(fmt.Sprintf("lock: %s, %s, round %d/%d", sc, systems[k].name, r+1, rounds))
				samples[k] = append(samples[k], runRound(systems[k], clients[k], keys, roundDur))
			}
		}
		for k, sys := range systems {
			out = append(out, summarizeLock(sys.name, sc, samples[k], roundDur))
			for _, c := range clients[k] {
				c.close()
			}
		}
	}
	return out, nil
}

func summarizeLock(name string, sc lockScenario, rs []roundSample, d time.Duration) lockResult {
	res := lockResult{System: name, Scenario: sc}
	var cycles, waits []time.Duration
	counts := make([]int, sc.clients)
	var cpu time.Duration
	var conns int64
	for _, r := range rs {
		cpu += r.cpu
		conns += r.conns
		res.Rates = append(res.Rates, float64(len(r.cycles))/d.Seconds())
		cycles = append(cycles, r.cycles...)
		waits = append(waits, r.waits...)
		for i, n := range r.counts {
			counts[i] += n
		}
		res.Errors += r.errs
		if r.err != nil && res.FirstError == "" {
			res.FirstError = r.err.Error()
		}
	}
	res.Rate = median(res.Rates)
	res.ConnsPerCycle = -1
	if len(cycles) > 0 {
		res.CPUPerCycle = cpu / time.Duration(len(cycles))
		if len(rs) > 0 && rs[0].conns >= 0 {
			res.ConnsPerCycle = float64(conns) / float64(len(cycles))
		}
	}
	res.P50 = percentile(cycles, 0.50)
	res.P99 = percentile(cycles, 0.99)
	if len(waits) > 0 {
		res.MaxWait = slices.Max(waits)
	}
	res.MinCount, res.MaxCount = slices.Min(counts), slices.Max(counts)
	var sum, sq float64
	for _, n := range counts {
		sum += float64(n)
	}
	mean := sum / float64(len(counts))
	for _, n := range counts {
		sq += (float64(n) - mean) * (float64(n) - mean)
	}
	if mean > 0 {
		res.CountCV = math.Sqrt(sq/float64(len(counts))) / mean
	}
	return res
}

// percentile returns the q-quantile of ds (nearest rank); 0 when empty.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := max(int(math.Ceil(q*float64(len(s))))-1, 0)
	return s[i]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cpuTime returns the user+system CPU time of process pid (0: this one)
// from /proc, in clock ticks of 10 ms; 0 if unknown.
func cpuTime(pid int) time.Duration {
	path := "/proc/self/stat"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/stat", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 14th and 15th fields of the line.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(u+s) * 10 * time.Millisecond
}
