package election

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestLeaderChecksTheDeadline: a leader whose last acknowledged keepalive
// was sent longer ago than TTL − 1 s answers as a standby on the very
// request that asks, before its watchdog's goroutine runs; the watchdog
// then reports the lapse.
func TestLeaderChecksTheDeadline(t *testing.T) {
	const ttl = 3 * time.Second
	l := newLeadership("http://self:8642")
	fresh := newKeepalive(nil, 0, ttl, time.Now())
	l.lead(fresh)
	leader, _ := l.Leader()
	require.True(t, leader, "keepalive acknowledged just now")

	stale := newKeepalive(nil, 0, ttl, time.Now().Add(-(ttl - watchdogMargin)))
	changed := l.Changed()
	l.lead(stale)
	leader, url := l.Leader()
	require.False(t, leader, "past send time + TTL − margin: not the leader")
	require.Empty(t, url)
	select {
	case <-changed:
		t.Fatal("only the loop changes the role")
	default:
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go stale.watch(ctx)
	<-stale.Lapsed()

	l.observed("http://other:8642")
	l.standBy()
	leader, url = l.Leader()
	require.False(t, leader)
	require.Equal(t, "http://other:8642", url, "a standby names the observed leader")
	<-changed
	l.observed("http://self:8642")
	_, url = l.Leader()
	require.Empty(t, url, "never names itself")
}

// TestUnavailableNamesEtcd: a failed etcd contact makes the replica say
// that no coordinator can lead, with the error, until a contact
// succeeds; etcd's own "lease not found" is a contact; a renewal that
// returned long after its timeout (a stopped process) is not judged.
func TestUnavailableNamesEtcd(t *testing.T) {
	l := newLeadership("http://self:8642")
	require.NoError(t, l.Unavailable())
	l.etcdContact(reached(context.DeadlineExceeded))
	err := l.Unavailable()
	require.ErrorContains(t, err, "no coordinator can lead: etcd is unreachable or has lost quorum (renew the etcd session's lease: context deadline exceeded)")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	l.etcdContact(reached(rpctypes.ErrLeaseNotFound))
	require.NoError(t, l.Unavailable(), "etcd answered: reached")

	const ttl = 3 * time.Second
	require.False(t, stalled(time.Now().Add(-ttl), ttl), "a renewal that timed out on time")
	require.True(t, stalled(time.Now().Add(-3*ttl), ttl), "a renewal that returned long after its timeout")
}
