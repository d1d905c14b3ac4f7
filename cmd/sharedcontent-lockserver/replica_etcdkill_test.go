package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
)

// slowElection is etcd's election timeout in TestEtcdLeaderLossFailover:
// longer than the replicas' TTL − 1 s, so that every replica's watchdog
// lapses while etcd has no leader, as on a loaded machine.
const slowElection = replicaTTL

// TestEtcdLeaderLossFailover: etcd's leader member killed -9 (and, as a
// host gone, its connections left open with nothing coming back) under
// three replicas, etcd slow to elect: every replica's watchdog lapses, the
// leader steps down. Once etcd takes writes again, a replica must lead
// within two TTLs plus what the first election took: the lapsed sessions'
// leases are revoked as soon as etcd answers and no campaign waits on a
// resign (docs/design.md §7.2). The two TTLs: an etcd request sent just
// before etcd took writes again may be on the black-holed member's
// connection and waits its whole deadline (a TTL), and the next term's
// grant can meet that connection once more (etcd's client picks endpoints
// in turn; CI saw one such request: ready 3.36 s after etcd was back, at
// TTL 3 s). Before, every lapsed key stayed until its lease expired, which
// etcd's new leader extends, or a stuck resign returned: 7.8–9.4 s after
// etcd was back, over this bound (6.3 s at TTL 3 s).
func TestEtcdLeaderLossFailover(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{ElectionTimeout: slowElection})
	eps, relays := relayed(t, etcd, 3)
	started := time.Now()
	reps := startReplicasOn(t, eps, replicaTTL)
	leader := waitLeader(t, reps)
	elect := time.Since(started)
	for _, r := range reps {
		if r != leader {
			waitHint(t, r, leader)
		}
	}

	m := etcd.Leader(t)
	killed := time.Now()
	for i := range relays {
		relays[i][m].BlackHole()
	}
	etcd.Kill(m)
	var live []string
	for i, ep := range etcd.Endpoints() {
		if i != m {
			live = append(live, ep)
		}
	}
	cli := etcd.ClientOf(t, live...)
	writable := make(chan time.Time, 1)
	go func() {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), slowElection/10)
			_, err := cli.Put(ctx, "/probe", "x")
			cancel()
			if err == nil || time.Since(killed) > 2*time.Minute {
				writable <- time.Now()
				return
			}
		}
	}()

	var down, back time.Time
	for deadline := killed.Add(2 * time.Minute); time.Now().Before(deadline) && back.IsZero(); {
		for _, r := range reps {
			switch ok := r.ready(); {
			case r == leader && !ok && down.IsZero():
				down = time.Now()
			case ok && !down.IsZero():
				back = time.Now()
			}
		}
		time.Sleep(20 * time.Millisecond) // a poll's pace, not a synchronisation
	}
	require.False(t, down.IsZero(), "the leader did not step down while etcd had no leader")
	require.False(t, back.IsZero(), "no replica led again")
	up := <-writable
	t.Logf("etcd's leader killed, election timeout %v, --etcd-session-ttl %v: → leader stepped down %v; → etcd writable %v; → a replica ready %v (%v after etcd was writable; bound: 2 TTLs + the first election's %v)",
		slowElection, replicaTTL, down.Sub(killed).Round(time.Millisecond), up.Sub(killed).Round(time.Millisecond),
		back.Sub(killed).Round(time.Millisecond), back.Sub(up).Round(time.Millisecond), elect.Round(time.Millisecond))
	require.LessOrEqual(t, back.Sub(up), 2*replicaTTL+elect,
		"a replica ready within 2 TTLs + the first election's time of etcd taking writes again")
}
