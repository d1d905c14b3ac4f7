package scale

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"time"
)

// profile records CPU profiles of a scenario's measured part when
// cfg.Profile names a directory: the simulator's own (NAME-sim.pprof, go
// tool pprof) and, when perf(1) is on the PATH, the coordinator's
// (NAME-coordinator.perf.data, perf report). The returned function stops
// both; nothing is recorded without cfg.Profile.
func profile(cfg Config, name string, coordinatorPID int) (stop func()) {
	if cfg.Profile == "" {
		return func() {}
	}
	warn := func(err error) { fmt.Fprintf(os.Stderr, "bench-scale: profile %s: %v\n", name, err) }
	if err := os.MkdirAll(cfg.Profile, 0o755); err != nil {
		warn(err)
		return func() {}
	}
	var stops []func()
	if f, err := os.Create(filepath.Join(cfg.Profile, name+"-sim.pprof")); err != nil {
		warn(err)
	} else if err := pprof.StartCPUProfile(f); err != nil {
		warn(err)
		f.Close()
	} else {
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	if perf, err := exec.LookPath("perf"); err == nil {
		cmd := exec.Command(perf, "record", "-q", "-F", "997", "-g", "-p", fmt.Sprint(coordinatorPID),
			"-o", filepath.Join(cfg.Profile, name+"-coordinator.perf.data"))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			warn(err)
		} else {
			time.Sleep(200 * time.Millisecond) // perf attaches
			stops = append(stops, func() {
				_ = cmd.Process.Signal(os.Interrupt)
				_ = cmd.Wait()
			})
		}
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}
