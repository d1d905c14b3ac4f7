package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchdogMargin is how long before its lease may lapse a leader stops
// answering (docs/design.md §7).
const watchdogMargin = time.Second

// keepalive renews a session's lease on its own, every TTL/3, and keeps
// the time each acknowledged renewal was sent. etcd's lease runs from the
// moment it receives a renewal, which is after it was sent: so the lease
// holds at least until that send time + TTL, whatever the network and the
// scheduler did meanwhile. The watchdog fires at that time − the margin:
// a leader stops answering before etcd can have expired its lease and let
// another replica win.
type keepalive struct {
	cli   *clientv3.Client
	lease clientv3.LeaseID
	ttl   time.Duration

	mu    sync.Mutex
	acked time.Time // protected by mu: send time of the last acknowledged renewal (or of the grant)

	lapsed     chan struct{} // closed by the watchdog
	lapsedOnce sync.Once

	// report, when set, is told the outcome of each renewal (reached),
	// and of a lapse noticed on time. Set before run.
	report func(error)
}

// newKeepalive watches the lease granted by a request sent at granted.
func newKeepalive(cli *clientv3.Client, lease clientv3.LeaseID, ttl time.Duration, granted time.Time) *keepalive {
	return &keepalive{cli: cli, lease: lease, ttl: ttl, acked: granted, lapsed: make(chan struct{})}
}

// deadline is when the watchdog fires: answers stop then.
func (k *keepalive) deadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.acked.Add(k.ttl - watchdogMargin)
}

// valid reports whether the deadline is still ahead.
func (k *keepalive) valid() bool { return time.Now().Before(k.deadline()) }

// Lapsed is closed once the deadline passed without a renewal.
func (k *keepalive) Lapsed() <-chan struct{} { return k.lapsed }

// run renews the lease and watches the deadline until ctx ends.
func (k *keepalive) run(ctx context.Context) {
	go k.watch(ctx)
	tick := time.NewTicker(k.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, k.ttl)
		_, err := k.cli.KeepAliveOnce(rctx, k.lease)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if !stalled(sent, k.ttl) {
			k.told(reached(err))
		}
		if err != nil {
			continue // the watchdog decides
		}
		k.mu.Lock()
		if sent.After(k.acked) {
			k.acked = sent
		}
		k.mu.Unlock()
	}
}

// watch closes lapsed once the deadline has passed.
func (k *keepalive) watch(ctx context.Context) {
	for {
		d := time.Until(k.deadline())
		if d <= 0 {
			if -d < k.ttl/3 {
				// On time: the process ran, and etcd acknowledged
				// nothing for TTL − margin. (Late, the process was
				// stopped: that says nothing of etcd.)
				k.told(fmt.Errorf("no renewal of the etcd session's lease acknowledged for %v", k.ttl-watchdogMargin))
			}
			k.lapsedOnce.Do(func() { close(k.lapsed) })
			return
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// stalled reports whether a renewal sent at sent with a timeout of ttl
// returned well after its timeout: the process was not running (SIGSTOP,
// a VM frozen), and its failure says nothing of etcd.
func stalled(sent time.Time, ttl time.Duration) bool {
	return time.Since(sent) > ttl+ttl/3
}

func (k *keepalive) told(err error) {
	if k.report != nil {
		k.report(err)
	}
}

// reached returns nil when err is etcd's own answer (the lease is gone:
// etcd was reached), or else err, wrapped to say what failed.
func reached(err error) error {
	if err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return fmt.Errorf("renew the etcd session's lease: %w", err)
}
