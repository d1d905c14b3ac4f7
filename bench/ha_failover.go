package main

// Failover of the coordinator's replicas (docs/design.md §7.2):
// the leader is killed (kill -9, or SIGTERM: it resigns) while a client
// holding every replica's URL runs lock cycles; measured are the time
// until the new leader's /readyz answers 200 and until the client's first
// lock cycle started after the signal is done.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// failoverSeries is one signal at one session TTL, over n failovers.
type failoverSeries struct {
	Signal   string
	TTL      time.Duration
	Ready    []time.Duration // signal → the new leader's /readyz 200
	Cycle    []time.Duration // signal → the client's first cycle begun after it is done
	Errors   int             // lock cycles that failed (the client retried them)
	FirstErr string
}

// summary is a progress line of the series' figures.
func (s failoverSeries) summary() string {
	return fmt.Sprintf("ha: failover %s at TTL %s: ready p50/p99/max %s/%s/%s, cycle p50/p99/max %s/%s/%s, %d client errors",
		s.Signal, s.TTL, quantile(s.Ready, 0.5), quantile(s.Ready, 0.99), maxOf(s.Ready),
		quantile(s.Cycle, 0.5), quantile(s.Cycle, 0.99), maxOf(s.Cycle), s.Errors)
}

// cycler runs session + lock + unlock cycles in a loop and keeps when
// each was begun and done.
type cycler struct {
	c    *lockclient.Client
	mu   sync.Mutex
	done []cycleTimes
	errs int
	err  string
}

type cycleTimes struct{ begun, done time.Time }

func (y *cycler) run(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		begun := time.Now()
		err := y.cycle(ctx, fmt.Sprintf("bench-ha-failover-%d", i%8))
		y.mu.Lock()
		if err != nil {
			if ctx.Err() == nil {
				y.errs++
				if y.err == "" {
					y.err = err.Error()
				}
			}
		} else {
			y.done = append(y.done, cycleTimes{begun, time.Now()})
		}
		y.mu.Unlock()
		if err != nil {
			time.Sleep(10 * time.Millisecond) // the next try's pace
		}
	}
}

func (y *cycler) cycle(ctx context.Context, key string) error {
	if _, err := y.c.Session(ctx, api.SessionRequest{NodeID: "bench-ha"}); err != nil {
		return fmt.Errorf("session: %w", err)
	}
	res, err := y.c.Lock(ctx, api.LockRequest{Type: api.OperationUpdate, ResourceID: key})
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if !res.Acquired {
		return fmt.Errorf("lock %s not acquired: %+v", key, res)
	}
	return y.c.Unlock(ctx, res.Lease, true, nil)
}

// firstDoneAfter waits for the first cycle begun after t and returns when
// it was done.
func (y *cycler) firstDoneAfter(ctx context.Context, t time.Time, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		y.mu.Lock()
		for _, c := range y.done {
			if c.begun.After(t) {
				y.mu.Unlock()
				return c.done, nil
			}
		}
		y.mu.Unlock()
		time.Sleep(5 * time.Millisecond) // a poll's pace
	}
	return time.Time{}, fmt.Errorf("no lock cycle done in %s after the signal", timeout)
}

// failoverBench runs n failovers with sig against 3 replicas of bin at
// session TTL ttl on the cluster.
func failoverBench(ctx context.Context, bin string, etcd *etcdCluster, sig syscall.Signal, ttl time.Duration, n int, progress func(string)) (failoverSeries, error) {
	name := map[syscall.Signal]string{syscall.SIGKILL: "kill -9", syscall.SIGTERM: "SIGTERM"}[sig]
	res := failoverSeries{Signal: name, TTL: ttl}
	prefix := fmt.Sprintf("/bench-ha-%s-%d/", strings.ReplaceAll(name, " ", ""), ttl.Milliseconds())
	reps := make([]*replica, 3)
	defer func() {
		for _, r := range reps {
			r.stop()
		}
	}()
	var urls []string
	for i := range reps {
		r, err := startReplica(bin, etcd.endpoints, prefix, ttl)
		if err != nil {
			return res, err
		}
		reps[i] = r
		urls = append(urls, r.url)
	}
	client, err := lockclient.New(strings.Join(urls, ","), lockclient.WithNodeID("bench-ha"),
		lockclient.WithMaxRetries(100), lockclient.WithRetryInterval(100*time.Millisecond))
	if err != nil {
		return res, err
	}
	defer client.Close()
	cctx, cancel := context.WithCancel(ctx)
	y := &cycler{c: client}
	var wg sync.WaitGroup
	wg.Go(func() { y.run(cctx) })
	defer func() { cancel(); wg.Wait() }()

	timeout := 4*ttl + 30*time.Second
	for i := range n {
		leader, _, err := waitLeader(ctx, reps, timeout)
		if err != nil {
			return res, err
		}
		// The client is served before the signal, so that what is
		// measured is the failover, not its first connection.
		if _, err := y.firstDoneAfter(ctx, time.Now(), timeout); err != nil {
			return res, err
		}
		y.mu.Lock()
		errs0 := y.errs
		y.mu.Unlock()
		progress(fmt.Sprintf("ha: failover %s at TTL %s, %d/%d", name, ttl, i+1, n))
		at := time.Now()
		leader.signal(sig)
		_, readyAt, err := waitLeader(ctx, reps, timeout)
		if err != nil {
			return res, err
		}
		doneAt, err := y.firstDoneAfter(ctx, at, timeout)
		if err != nil {
			return res, err
		}
		res.Ready = append(res.Ready, readyAt.Sub(at))
		res.Cycle = append(res.Cycle, doneAt.Sub(at))
		y.mu.Lock()
		res.Errors += y.errs - errs0
		if res.FirstErr == "" && y.errs > errs0 {
			res.FirstErr = y.err
		}
		y.mu.Unlock()
		if err := leader.start(); err != nil {
			return res, fmt.Errorf("restarting the old leader: %w", err)
		}
	}
	return res, nil
}
