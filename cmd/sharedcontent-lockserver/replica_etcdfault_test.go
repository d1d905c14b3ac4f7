package main

// The replicas under etcd faults (docs/design.md §7.2): the leader cut off
// from etcd but not from the nodes, an etcd member lost, etcd's quorum
// lost and back. Real replica processes, a real 3-member etcd.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/internal/testutil/testnet"
	"github.com/sharedcontent/sharedcontent/lockclient"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// watchdogMargin is the election's: a leader stops answering at the send
// time of its last acknowledged keepalive + TTL − this (docs/design.md
// §7.2).
const watchdogMargin = time.Second

// refusal is what a leader cut off from etcd answered last.
type refusal struct {
	lastGrantSent time.Time // when the last granted request was sent
	refused       time.Time // when the first refusal was received
	status        int
	code, message string
}

// untilRefused asks r for fresh pull locks, one after the other, until it
// refuses one. Every lock is on a new resource, so a leader grants it.
func untilRefused(t *testing.T, r *replicaProc, prefix string) refusal {
	t.Helper()
	var out refusal
	require.Eventually(t, func() bool {
		sent := time.Now()
		status, resp, e, _ := lockAt(t, r, fmt.Sprintf("%s-%d", prefix, sent.UnixNano()), "node-probe", time.Minute)
		if status == http.StatusOK {
			require.True(t, resp.Acquired)
			out.lastGrantSent = sent
			return false
		}
		out.refused, out.status, out.code, out.message = time.Now(), status, e.Code, e.Error
		return true
	}, 2*time.Minute, 20*time.Millisecond, "the leader %s never stopped granting", r.url)
	require.Equal(t, http.StatusServiceUnavailable, out.status, "%+v", out)
	require.Contains(t, []string{api.CodeNotLeader, api.CodeUnavailable}, out.code, "%+v", out)
	return out
}

// etcdLost is the message of a replica's answer while it cannot reach
// etcd (docs/design.md §7.2).
const etcdLost = "no coordinator can lead: etcd is unreachable or has lost quorum ("

// requireSaysEtcdLost waits until r answers a lock request 503
// unavailable, naming etcd and no leader, as a replica that cannot reach
// etcd does: its session's keepalive or lease grant fails within a TTL or
// two. It returns the answer's message.
func requireSaysEtcdLost(t *testing.T, r *replicaProc) string {
	t.Helper()
	var (
		last   string
		status int
		e      api.ErrorResponse
		h      http.Header
	)
	require.Eventually(t, func() bool {
		status, _, e, h = lockAt(t, r, "blob-etcd-lost", "node-probe", 10*time.Second)
		last = fmt.Sprintf("%d %s %q leader header %q", status, e.Code, e.Error, h.Get(api.LeaderHeader))
		return status != http.StatusServiceUnavailable || e.Code == api.CodeUnavailable
	}, 2*time.Minute, 20*time.Millisecond, "%s never said that etcd is unreachable (last: %s)", r.url, last)
	require.Equal(t, http.StatusServiceUnavailable, status, "a replica cut off from etcd grants nothing: %s", last)
	require.Contains(t, e.Error, etcdLost, "an unavailable answer of a replica cut off from etcd names etcd")
	require.Empty(t, h.Get(api.LeaderHeader), "a replica cut off from etcd names no leader")
	require.Empty(t, e.Leader, "a replica cut off from etcd names no leader")
	return last
}

// requireStoppedInTime checks the watchdog's rule: no keepalive sent after
// cut (the black hole, the quorum loss) can have been acknowledged, so the
// leader's deadline is before cut + TTL − margin, and no request sent from
// then on may be granted. Exact, whatever the machine's load: a request is
// handled after it is sent.
func requireStoppedInTime(t *testing.T, cut time.Time, got refusal) {
	t.Helper()
	deadline := cut.Add(replicaTTL - watchdogMargin)
	if !got.lastGrantSent.IsZero() {
		require.True(t, got.lastGrantSent.Before(deadline),
			"a lock sent %v after the cut was granted; the watchdog's deadline is at most %v after it",
			got.lastGrantSent.Sub(cut), replicaTTL-watchdogMargin)
	}
}

// relayed puts a relay between each replica and each etcd member: the
// replicas' endpoint lists, and replica i's relays.
func relayed(t *testing.T, etcd *etcdtest.Cluster, n int) ([][]string, [][]*testnet.Relay) {
	t.Helper()
	eps := make([][]string, n)
	relays := make([][]*testnet.Relay, n)
	for i := range eps {
		for _, ep := range etcd.Endpoints() {
			r := testnet.StartRelay(t, strings.TrimPrefix(ep, "http://"))
			relays[i] = append(relays[i], r)
			eps[i] = append(eps[i], "http://"+r.Addr())
		}
	}
	return eps, relays
}

// TestPartitionedLeaderStops: the leader is cut off from etcd (its relays
// black-holed: connections stay open, nothing comes back) but not from the
// nodes. It stops granting before its lease can have lapsed (the
// watchdog's rule), another replica leads, a client holding every URL —
// the old leader's first — moves to it; the old leader, still cut off,
// does not grant the lock the new one granted, and once its etcd requests
// fail it says so (503 unavailable naming etcd, no leader).
func TestPartitionedLeaderStops(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{})
	eps, relays := relayed(t, etcd, 3)
	reps := startReplicasOn(t, eps, replicaTTL)
	old := waitLeader(t, reps)
	status, _, _, _ := lockAt(t, old, "blob-warm", "node-a", 10*time.Second)
	require.Equal(t, http.StatusOK, status)

	var oldRelays []*testnet.Relay
	for i, r := range reps {
		if r == old {
			oldRelays = relays[i]
		}
	}
	for _, r := range oldRelays {
		r.BlackHole()
	}
	cut := time.Now()
	got := untilRefused(t, old, "blob-partition")
	requireStoppedInTime(t, cut, got)
	next := waitLeader(t, reps, old)
	elected := time.Since(cut)

	// The old leader's URL first: the client must leave it.
	others := []*replicaProc{old}
	for _, r := range reps {
		if r != old {
			others = append(others, r)
		}
	}
	client := replicaClient(t, "node-a", others)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lockCycle(ctx, t, client, "blob-after")
	cycled := time.Since(cut)

	status, resp, _, _ := lockAt(t, next, "blob-x", "node-b", 10*time.Second)
	require.Equal(t, http.StatusOK, status)
	require.True(t, resp.Acquired, "the new leader grants blob-x to node-b")
	status, resp, e, _ := lockAt(t, old, "blob-x", "node-c", 10*time.Second)
	require.Equal(t, http.StatusServiceUnavailable, status, "the cut-off old leader grants nothing: %+v %+v", resp, e)
	require.Contains(t, []string{api.CodeNotLeader, api.CodeUnavailable}, e.Code)
	require.False(t, old.ready())
	cutOff := requireSaysEtcdLost(t, old)
	t.Logf("partition at --etcd-session-ttl %v: black hole → last grant sent %v, first refusal (%s %q) %v; → new leader ready %v; → client's session and lock cycle done %v; the cut-off replica then answered %s, %v after the black hole",
		replicaTTL, sinceOrNone(got.lastGrantSent, cut), got.code, got.message, got.refused.Sub(cut).Round(time.Millisecond),
		elected.Round(time.Millisecond), cycled.Round(time.Millisecond), cutOff, time.Since(cut).Round(time.Millisecond))
}

// sinceOrNone is t − from, or "none" when t is zero.
func sinceOrNone(t, from time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.Sub(from).Round(time.Millisecond).String()
}

// TestEtcdMemberLoss: one etcd member killed (a follower, then, restarted,
// etcd's leader): the coordinator goes on serving lock cycles and
// reference adds, throughout, to a client holding every URL; with a
// follower gone, the same replica leads. With etcd's leader gone, the
// pause may be a coordinator failover (the watchdog lapses when etcd
// elects slower than TTL − 1 s): logged, not asserted.
func TestEtcdMemberLoss(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{})
	// A TTL longer than the other tests': "no step-down with a follower
	// gone" means the replica's etcd client moved to a live member before
	// its watchdog (TTL − 1 s) lapsed, which a loaded 2-core machine can
	// delay past the 2 s a 3 s TTL leaves.
	const memberLossTTL = 10 * time.Second
	reps := startReplicas(t, 2, etcd.Endpoints(), memberLossTTL)
	leader := waitLeader(t, reps)
	// Retries for a few TTLs: etcd's leader lost, the replica's watchdog
	// may lapse before etcd has a new leader, and a failover costs a TTL.
	client := replicaClient(t, "node-a", reps, lockclient.WithMaxRetries(100))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lockCycle(ctx, t, client, "blob-warm")

	// Lock cycles and reference adds, one after the other, until stopped;
	// each one must succeed (the client retries within its budget).
	var (
		mu      sync.Mutex
		done    int
		slowest time.Duration
		failed  error
	)
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			err := cycleAndAdd(ctx, client, fmt.Sprintf("blob-%d", i))
			mu.Lock()
			if err != nil && failed == nil {
				failed = err
			}
			if d := time.Since(start); d > slowest {
				slowest = d
			}
			done++
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	progress := func(what string) {
		t.Helper()
		mu.Lock()
		from := done
		mu.Unlock()
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return failed != nil || done >= from+5
		}, 2*time.Minute, 20*time.Millisecond, "%s: no progress", what)
		mu.Lock()
		defer mu.Unlock()
		require.NoError(t, failed, what)
	}
	progress("before")

	etcdLeader := etcd.Leader(t)
	follower := 0 // the first endpoint of every replica, unless it leads etcd
	if etcdLeader == 0 {
		follower = 1
	}
	etcd.Kill(follower)
	progress("a follower killed")
	require.True(t, leader.ready(), "the same replica leads with a follower gone")
	require.LessOrEqual(t, leader.metric(t, "sharedcontent_leader_stepdowns_total"), float64(0), "no step-down (-1: no sample yet)")
	etcd.Restart(t, follower)
	etcd.WaitHealthy(t)
	progress("the follower back")

	etcdLeader = etcd.Leader(t)
	killed := time.Now()
	etcd.Kill(etcdLeader)
	progress("etcd's leader killed")
	close(stop)
	<-finished
	mu.Lock()
	defer mu.Unlock()
	require.NoError(t, failed)
	t.Logf("etcd member loss: %d lock cycles + reference adds, the slowest %v; etcd's leader killed %v ago; the first leader's step-downs: %v",
		done, slowest.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond),
		max(leader.metric(t, "sharedcontent_leader_stepdowns_total"), 0))
}

// cycleAndAdd is a lock cycle on resource, then a reference added to it
// and read back. A reference refused for want of a session (the first
// call, a new leader) opens the session, then is retried, as a node's
// daemon does (docs/design.md §8.4).
func cycleAndAdd(ctx context.Context, client *lockclient.Client, resource string) error {
	if err := tryLockCycle(ctx, client, resource); err != nil {
		return err
	}
	_, err := client.AddRef(ctx, resource)
	if errors.Is(err, api.ErrNoSession) {
		if _, err = client.Session(ctx, api.SessionRequest{}); err == nil {
			_, err = client.AddRef(ctx, resource)
		}
	}
	if err != nil {
		return fmt.Errorf("add a reference to %s: %w", resource, err)
	}
	refs, err := client.Refs(ctx, resource)
	if err != nil {
		return fmt.Errorf("references of %s: %w", resource, err)
	}
	if !containsString(refs.Nodes, client.NodeID()) {
		return fmt.Errorf("references of %s: %v, without %s", resource, refs.Nodes, client.NodeID())
	}
	return nil
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestEtcdQuorumLoss: two etcd members of three killed (etcd's leader
// among them): the coordinator's leader stops granting within its TTL
// (the watchdog's rule) and no replica leads; once their etcd requests
// fail, every replica answers 503 unavailable naming etcd, and no leader;
// quorum back, a replica leads again, with the reference added before the
// loss.
func TestEtcdQuorumLoss(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{})
	reps := startReplicas(t, 2, etcd.Endpoints(), replicaTTL)
	leader := waitLeader(t, reps)
	client := replicaClient(t, "node-a", reps)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, cycleAndAdd(ctx, client, "blob-kept"))

	first := etcd.Leader(t)
	second := (first + 1) % 3
	etcd.Kill(first)
	etcd.Kill(second)
	cut := time.Now()
	got := untilRefused(t, leader, "blob-quorum")
	requireStoppedInTime(t, cut, got)
	for _, r := range reps {
		require.False(t, r.ready(), "%s leads without etcd's quorum", r.url)
	}
	// Every replica, the old leader and the standby, says why: etcd.
	var said []string
	for _, r := range reps {
		said = append(said, requireSaysEtcdLost(t, r))
	}
	told := time.Since(cut)
	for _, r := range reps {
		require.False(t, r.ready(), "%s leads without etcd's quorum", r.url)
	}

	etcd.Restart(t, first)
	etcd.Restart(t, second)
	back := time.Now()
	etcd.WaitHealthy(t)
	next := waitLeader(t, reps)
	resumed := time.Since(back)
	refs, err := client.Refs(ctx, "blob-kept")
	require.NoError(t, err)
	require.Contains(t, refs.Nodes, "node-a", "the reference added before the loss")
	require.NoError(t, cycleAndAdd(ctx, client, "blob-after"))
	t.Logf("quorum loss at --etcd-session-ttl %v: 2 of 3 members killed → last grant sent %v, first refusal (%d %s %q) %v; every replica answering that etcd is lost %v (%q); quorum back → %s ready %v",
		replicaTTL, sinceOrNone(got.lastGrantSent, cut), got.status, got.code, got.message, got.refused.Sub(cut).Round(time.Millisecond),
		told.Round(time.Millisecond), said, next.url, resumed.Round(time.Millisecond))
}

// TestDeleteInFlightAcrossFailover: a delete granted by leader A (its
// marker written; the deleter's own reference dropped when it asked,
// docs/design.md §8.7), A killed before the unlock. B, the new leader,
// finds the marker and counts the delete as lapsed (maybe done, §8.9): a
// node that still sees the blob may not reference it on that stale view
// (it downloads again), a node that downloaded it may. The deleter's
// unlock, arriving at B, which never granted that lease, is refused and
// drops nothing: the other node's reference stays.
func TestDeleteInFlightAcrossFailover(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{})
	reps := startReplicas(t, 2, etcd.Endpoints(), replicaTTL)
	a := waitLeader(t, reps)
	deleter := replicaClient(t, "node-a", reps)
	other := replicaClient(t, "node-b", reps)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, c := range []*lockclient.Client{deleter, other} {
		_, err := c.Session(ctx, api.SessionRequest{NodeID: c.NodeID()})
		require.NoError(t, err)
		_, err = c.SyncRefs(ctx, api.SyncRequest{SyncID: "s", Done: true})
		require.NoError(t, err)
	}
	_, err := deleter.AddRef(ctx, "blob-del")
	require.NoError(t, err)
	del, err := deleter.Lock(ctx, api.LockRequest{Type: api.OperationDelete, ResourceID: "blob-del"})
	require.NoError(t, err)
	require.True(t, del.Acquired, "%+v", del)

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
	b := waitLeader(t, reps, a)
	for _, c := range []*lockclient.Client{deleter, other} {
		_, err := c.Session(ctx, api.SessionRequest{NodeID: c.NodeID()})
		require.NoError(t, err)
		_, err = c.SyncRefs(ctx, api.SyncRequest{SyncID: "s2", Done: true})
		require.NoError(t, err)
	}
	// A stale view of the blob is refused: B does not know whether A's
	// deleter removed it.
	_, err = other.AddFoundRef(ctx, "blob-del")
	require.Error(t, err, "B lets a node reference a blob whose delete may have completed, on a stale view")
	t.Logf("B (%s), a found reference to blob-del: %v", b.url, err)
	// A node that downloaded it again references it.
	_, err = other.AddRef(ctx, "blob-del")
	require.NoError(t, err)

	err = deleter.Unlock(ctx, del.Lease, true, nil)
	require.ErrorIs(t, err, api.ErrNotHolder, "B never granted A's delete: its unlock is refused")
	refs, err := other.Refs(ctx, "blob-del")
	require.NoError(t, err)
	require.Equal(t, []string{"node-b"}, refs.Nodes, "the refused unlock dropped nothing")
}
