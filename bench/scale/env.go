package scale

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
)

// env is one scenario's coordinator and fleet.
type env struct {
	dir   string
	coord *coordinator
	fleet *fleet
	epoch uint64 // the coordinator's epoch when the fleet synced
	// shared holds the nodes' shared root and state directories when
	// they are contentv2 stores (setUpStores).
	shared string
}

// setUpWave is how many nodes join at once at setup: a fleet that joins
// all at once is a re-sync storm itself, which the restart scenario
// measures; setup only has to get every node synced.
const setUpWave = 100

// setUp starts a coordinator on a fresh data directory and n simulated
// nodes whose journals are journal(i) (nil: empty), each running the
// session loop of session.go, setUpWave at a time, each wave once the one
// before is synced.
func setUp(cfg Config, n int, journal func(i int) []digest.Digest) (*env, error) {
	e, err := newEnv(cfg, n, journal)
	if err != nil {
		return nil, err
	}
	if err := e.join(cfg, func(wave []*node) error {
		e.fleet.start(wave)
		return nil
	}); err != nil {
		return nil, err
	}
	return e, nil
}

// setUpStores starts a coordinator on a fresh data directory and n nodes,
// each a contentv2 store (store.go; skipRef: contentv2.WithSkipAddsRef)
// over one shared root on tmpfs,
// setUpWave at a time, each wave once the one before is synced. The
// first node alone first: it claims the root for the cluster.
func setUpStores(cfg Config, n int, skipRef bool) (*env, error) {
	e, err := newEnv(cfg, n, nil)
	if err != nil {
		return nil, err
	}
	if e.shared, err = os.MkdirTemp(sharedParent(), "bench-scale-root-"); err != nil {
		e.tearDown()
		return nil, err
	}
	root, state := filepath.Join(e.shared, "root"), filepath.Join(e.shared, "state")
	err = e.join(cfg, func(wave []*node) error {
		if wave[0] == e.fleet.nodes[0] {
			if err := wave[0].openStore(root, state, skipRef); err != nil {
				return err
			}
			wave = wave[1:]
		}
		errs := make([]error, len(wave))
		var wg sync.WaitGroup
		for i, nd := range wave {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = nd.openStore(root, state, skipRef)
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// sharedParent is where the shared root of contentv2 stores goes: tmpfs
// when there is one, so that the disk is not what is measured.
func sharedParent() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return ""
}

// newEnv starts a coordinator on a fresh data directory and builds n
// nodes against it, whose journals are journal(i).
func newEnv(cfg Config, n int, journal func(i int) []digest.Digest) (*env, error) {
	dir, err := os.MkdirTemp("", "bench-scale-")
	if err != nil {
		return nil, err
	}
	e := &env{dir: dir}
	if e.coord, err = newCoordinator(cfg.Server, dir, cfg.Etcd); err == nil {
		err = e.coord.start()
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if e.fleet, err = newFleet(n, cfg, e.coord.url(), journal); err != nil {
		e.tearDown()
		return nil, err
	}
	if e.epoch, err = clusterEpoch(e.coord.url()); err != nil {
		e.tearDown()
		return nil, err
	}
	return e, nil
}

// join starts the fleet's nodes setUpWave at a time (start), each wave
// once the nodes so far are synced; on failure it tears e down.
func (e *env) join(cfg Config, start func(wave []*node) error) error {
	n := len(e.fleet.nodes)
	begun := time.Now()
	for i := 0; i < n; i += setUpWave {
		wave := e.fleet.nodes[i:min(n, i+setUpWave)]
		err := start(wave)
		if err == nil {
			if _, unsynced := waitSynced(e.fleet.nodes[:i+len(wave)], e.epoch, cfg.SetupTimeout-time.Since(begun)); unsynced > 0 {
				err = fmt.Errorf("%d of the %d nodes joined so far not synced after %s (%d of %d not joined yet)",
					unsynced, i+len(wave), time.Since(begun).Round(time.Second), n-i-len(wave), n)
			}
		}
		if err != nil {
			e.tearDown()
			return fmt.Errorf("setup: %w", err)
		}
	}
	return nil
}

func (e *env) tearDown() {
	if e.fleet != nil {
		e.fleet.closeStores()
		e.fleet.stop()
	}
	if e.coord != nil && e.coord.cmd != nil {
		if err := e.coord.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "bench-scale:", err)
		}
	}
	os.RemoveAll(e.dir)
	if e.shared != "" {
		os.RemoveAll(e.shared)
	}
}

// Usage is what every scenario measures of the coordinator and the nodes.
type Usage struct {
	// CPU is the coordinator's utime+stime over the scenario.
	CPU time.Duration
	// PeakRSS is the coordinator's VmHWM; PeakFiles the most descriptors
	// it had open; PeakStreams the most event streams the nodes had open.
	PeakRSS     int64
	PeakFiles   int
	PeakStreams int64

	// PeakAnon and PeakFile are the highest RssAnon and RssFile sampled
	// since the process started (rssparts.go): its own memory, and the
	// mapped pages of its database file, reclaimable page cache.
	PeakAnon, PeakFile int64

	// Errors counts the nodes' failed attempts by kind.
	Errors Errors
	// Requests counts the nodes' requests by kind.
	Requests Requests
	// BytesSent counts the bytes the nodes read from the coordinator.
	BytesSent int64
	// MaxGap is the longest time any node went without a session answer.
	MaxGap time.Duration
	// Load is the load average at the end.
	Load string
	// EtcdTxns counts the guarded transactions a coordinator on etcd
	// sent, EtcdOps their writes (sharedcontent_etcd_txns_total and
	// sharedcontent_etcd_txn_ops_sum), EtcdBytes the bytes they wrote
	// (sharedcontent_etcd_txn_bytes_sum); zero on bbolt.
	EtcdTxns, EtcdOps, EtcdBytes float64
}

// measure is a scenario's Usage, between begin and end.
type measure struct {
	Usage
	cpu0    time.Duration
	errors0 Errors
	reqs0   Requests
	bytes0  int64
	txns0   float64
	ops0    float64
	bytes0E float64 // etcd bytes written
	err     error   // reading /proc or /metrics
}

// begin starts measuring: the coordinator's CPU so far, the nodes' counts,
// and new peaks and session gaps from now.
func (e *env) begin() *measure {
	m := &measure{}
	m.cpu0, m.err = cpuTime(e.coord.pid())
	m.errors0, m.bytes0 = e.fleet.a.errors(), e.fleet.a.bytesRead.Load()
	m.reqs0 = e.fleet.a.requests.snapshot()
	e.coord.resetPeakFiles()
	e.fleet.a.peakStreams.Store(e.fleet.a.streams.Load())
	e.fleet.resetGaps()
	m.txns0, m.ops0, m.bytes0E = e.etcdCounts(m)
	return m
}

// Metrics of the etcd store (refcount/etcdstore).
const (
	metricEtcdTxns  = "sharedcontent_etcd_txns_total"
	metricEtcdOps   = "sharedcontent_etcd_txn_ops_sum"
	metricEtcdBytes = "sharedcontent_etcd_txn_bytes_sum"
)

// etcdCounts reads the coordinator's etcd transactions, their writes and
// bytes so far; zero on bbolt. A failure is kept in m.
func (e *env) etcdCounts(m *measure) (txns, ops, bytes float64) {
	if len(e.coord.etcd) == 0 {
		return 0, 0, 0
	}
	txns, err1 := Metric(e.coord.url(), metricEtcdTxns)
	ops, err2 := Metric(e.coord.url(), metricEtcdOps)
	bytes, err3 := Metric(e.coord.url(), metricEtcdBytes)
	if err := errors.Join(err1, err2, err3); err != nil && m.err == nil {
		m.err = err
	}
	return txns, ops, bytes
}

// end completes m.
func (e *env) end(m *measure) {
	cpu, err := cpuTime(e.coord.pid())
	if err != nil && m.err == nil {
		m.err = err
	}
	m.CPU = cpu - m.cpu0
	if m.PeakRSS, err = peakRSS(e.coord.pid()); err != nil && m.err == nil {
		m.err = err
	}
	m.PeakAnon, m.PeakFile = e.coord.mem.peaks()
	m.PeakFiles = e.coord.peakOpenFiles()
	m.PeakStreams = e.fleet.a.peakStreams.Load()
	m.Errors = e.fleet.a.errors().sub(m.errors0)
	m.Requests = e.fleet.a.requests.snapshot().sub(m.reqs0)
	m.BytesSent = e.fleet.a.bytesRead.Load() - m.bytes0
	m.MaxGap = e.fleet.maxGap()
	m.Load = Loadavg()
	txns, ops, bytes := e.etcdCounts(m)
	m.EtcdTxns, m.EtcdOps, m.EtcdBytes = txns-m.txns0, ops-m.ops0, bytes-m.bytes0E
}
