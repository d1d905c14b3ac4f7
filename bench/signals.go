package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// How the benchmark stops on SIGTERM or SIGINT (a CI time-out, Ctrl-C).
// The sections that take a context (lock, ha) stop with it; the others
// do not look at one, so the run does not wait for them: untilDone returns
// as soon as the signal's context is done and the process exits 1. The
// processes the benchmark started follow it: the scale section's
// coordinator gets SIGTERM when the benchmark's process ends (Pdeathsig;
// it shuts down as on any SIGTERM), etcd, redis-server and the HA
// section's replicas SIGKILL (peers.go). Their temporary directories are
// left behind. Each runs in a process group of its own, so a terminal's
// Ctrl-C reaches the benchmark, not them in mid-scenario.

// untilDone runs fn and returns its error, or, once ctx is done first,
// an error naming ctx's cause at once (fn keeps running until the process
// exits).
func untilDone(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("interrupted (%v): stopping; the coordinator it started gets SIGTERM as the benchmark exits", context.Cause(ctx))
	}
}

// followGoRun makes the benchmark get SIGTERM when its parent ends if
// that parent is `go run` (`cd bench && go run .`, as make does): go run
// dies of the SIGTERM a CI time-out sends it without passing it on, and
// the benchmark would run on alone. Any other parent (a shell, nohup) is
// left alone.
func followGoRun() {
	ppid := os.Getppid()
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ppid))
	if err != nil || strings.TrimSpace(string(comm)) != "go" {
		return
	}
	const prSetPdeathsig = 1 // PR_SET_PDEATHSIG, linux/prctl.h
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetPdeathsig, uintptr(syscall.SIGTERM), 0); errno != 0 {
		return
	}
	if os.Getppid() != ppid { // the parent ended before the call
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}
}
