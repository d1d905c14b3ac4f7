package scale

import (
	"fmt"
	"os"
	"time"

	"github.com/opencontainers/go-digest"
)

// env is one scenario's coordinator and fleet.
type env struct {
	dir   string
	coord *coordinator
	fleet *fleet
	epoch uint64 // the coordinator's epoch when the fleet synced
}

// setUp starts a coordinator on a fresh data directory and n nodes whose
// journals are journal(i) (nil: empty), and waits until all are synced.
func setUp(cfg Config, n int, journal func(i int) []digest.Digest) (*env, error) {
	dir, err := os.MkdirTemp("", "bench-scale-")
	if err != nil {
		return nil, err
	}
	e := &env{dir: dir}
	if e.coord, err = newCoordinator(cfg.Server, dir); err == nil {
		err = e.coord.start()
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if e.fleet, err = startFleet(n, e.coord.url(), journal); err != nil {
		e.tearDown()
		return nil, err
	}
	if e.epoch, err = clusterEpoch(e.coord.url()); err != nil {
		e.tearDown()
		return nil, err
	}
	start := time.Now()
	if _, unsynced := e.fleet.waitSynced(e.epoch, cfg.SetupTimeout); unsynced > 0 {
		e.tearDown()
		return nil, fmt.Errorf("setup: %d of %d nodes not synced after %s", unsynced, n, time.Since(start).Round(time.Second))
	}
	return e, nil
}

func (e *env) tearDown() {
	if e.fleet != nil {
		e.fleet.stop()
	}
	if e.coord != nil && e.coord.cmd != nil {
		if err := e.coord.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "bench-scale:", err)
		}
	}
	os.RemoveAll(e.dir)
}

// measure is what a scenario measures, between begin and end.
type measure struct {
	cpu0    time.Duration
	errors0 Errors
	bytes0  int64

	cpu         time.Duration
	peakRSS     int64
	peakFiles   int
	peakStreams int64
	errors      Errors
	bytes       int64
	maxGap      time.Duration
	load        string
	err         error // reading /proc
}

// begin starts measuring: the coordinator's CPU so far, the nodes' counts,
// and new peaks and session gaps from now.
func (e *env) begin() *measure {
	m := &measure{}
	m.cpu0, m.err = cpuTime(e.coord.pid())
	m.errors0, m.bytes0 = e.fleet.a.errors(), e.fleet.a.bytesRead.Load()
	e.coord.resetPeakFiles()
	e.fleet.a.peakStreams.Store(e.fleet.a.streams.Load())
	e.fleet.resetGaps()
	return m
}

// end completes m.
func (e *env) end(m *measure) {
	cpu, err := cpuTime(e.coord.pid())
	if err != nil && m.err == nil {
		m.err = err
	}
	m.cpu = cpu - m.cpu0
	if m.peakRSS, err = peakRSS(e.coord.pid()); err != nil && m.err == nil {
		m.err = err
	}
	m.peakFiles = e.coord.peakOpenFiles()
	m.peakStreams = e.fleet.a.peakStreams.Load()
	m.errors = e.fleet.a.errors().sub(m.errors0)
	m.bytes = e.fleet.a.bytesRead.Load() - m.bytes0
	m.maxGap = e.fleet.maxGap()
	m.load = Loadavg()
}
