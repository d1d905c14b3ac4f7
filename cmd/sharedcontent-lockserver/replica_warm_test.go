package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// TestWarmTakeOver: a node syncs its journal (and another node adds
// references) with the leader; kill -9 of the leader; the standby that
// takes over starts from the hashes it kept from etcd's watch, not from
// a walk of every reference (sharedcontent_hashes_built_total{how="warm"},
// docs/design.md §7.2), and the node's sync by hash after the failover,
// its journal unchanged, is answered synced at the hash step.
//
// With SHAREDCONTENT_BENCH_REFS=N, the state holds N references more
// before the replicas start (blobs of 100 nodes), and the test logs the
// leaders' time from winning to answering (ready_seconds): the first
// walks (its standby's walk has not ended), the second takes over warm.
func TestWarmTakeOver(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{})
	if n, err := strconv.Atoi(os.Getenv("SHAREDCONTENT_BENCH_REFS")); err == nil && n > 0 {
		prefill(t, etcd.Client(t), n)
	}
	reps := startReplicas(t, 2, etcd.Endpoints(), replicaTTL)
	leader := waitLeader(t, reps)
	require.Equal(t, 1.0, leader.metric(t, "sharedcontent_hashes_built_total"), "the leader's hashes were built once")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := replicaClient(t, "node-a", reps)
	other := replicaClient(t, "node-b", reps)
	var journal []string
	for i := range 300 {
		journal = append(journal, fmt.Sprintf("sha256:%x", sha256.Sum256(fmt.Appendf(nil, "blob-%d", i))))
	}
	const gen = "journal-1"
	sess, err := node.Session(ctx, api.SessionRequest{})
	require.NoError(t, err)
	got := time.Now()
	_, err = node.SyncRefs(ctx, api.SyncRequest{SyncID: "s1", Generation: gen, ResourceIDs: journal, Done: true, Echo: echo(sess, got)})
	require.NoError(t, err)
	_, err = other.Session(ctx, api.SessionRequest{})
	require.NoError(t, err)
	_, err = other.SyncRefs(ctx, api.SyncRequest{SyncID: "s1", Done: true})
	require.NoError(t, err)
	for _, id := range journal[:50] {
		_, err := other.AddRef(ctx, id)
		require.NoError(t, err)
	}

	require.NoError(t, leader.cmd.Process.Signal(syscall.SIGKILL))
	next := waitLeader(t, reps, leader)
	require.Equal(t, 1.0, next.metric(t, `sharedcontent_hashes_built_total{how="warm"}`), "the new leader did not take the standby's hashes")
	require.Equal(t, -1.0, next.metric(t, `sharedcontent_hashes_built_total{how="walk"}`), "the new leader walked")

	// The node re-syncs by hash, its journal unchanged: the whole hash
	// matches the new leader's record at once.
	sess, err = node.Session(ctx, api.SessionRequest{})
	require.NoError(t, err)
	got = time.Now()
	zero := 0
	resp, err := node.SyncRefs(ctx, api.SyncRequest{SyncID: "s2", Generation: gen, ResourceIDs: []string{}, Offset: &zero})
	require.NoError(t, err)
	require.True(t, resp.ByHash, "the new leader does not compare hashes")
	whole := api.SyncHash(synchash.FromIDs(journal).Whole())
	resp, err = node.SyncRefs(ctx, api.SyncRequest{SyncID: "s2", Generation: gen, Offset: &zero, Hash: &whole, Echo: echo(sess, got)})
	require.NoError(t, err)
	require.True(t, resp.Synced, "the unchanged journal's hash does not match the new leader's: %+v", resp)
	for _, r := range []*replicaProc{leader, next} {
		b, err := os.ReadFile(r.log)
		require.NoError(t, err)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "election: leading") {
				t.Logf("%s: %s", r.url, line)
			}
		}
	}
}

// prefill writes n references under the replicas' prefix as a leader of
// their election would, then resigns.
func prefill(t *testing.T, cli *clientv3.Client, n int) {
	ctx := t.Context()
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
	require.NoError(t, err)
	defer sess.Close()
	e := concurrency.NewElection(sess, "/sc-test/leader")
	require.NoError(t, e.Campaign(ctx, "prefill"))
	s, err := etcdstore.OpenElection(ctx, cli, "/sc-test/", e, etcdstore.Options{})
	require.NoError(t, err)
	batch := new(refcount.Batch)
	for i := range n {
		batch.AddRef(fmt.Sprintf("sha256:%x", sha256.Sum256(fmt.Appendf(nil, "prefill-%d", i/100))), fmt.Sprintf("node-%04d.cluster.example", i%100))
		if batch.Len() == refcount.GroupRefs || i == n-1 {
			require.NoError(t, s.Commit(ctx, batch))
			batch = new(refcount.Batch)
		}
	}
	require.NoError(t, s.Close())
	require.NoError(t, e.Resign(ctx))
}

// echo is the echo of a session answer received at got.
func echo(s api.SessionResponse, got time.Time) *api.Echo {
	return &api.Echo{Epoch: s.Epoch, StampMs: s.StampMs, ElapsedMs: time.Since(got).Milliseconds()}
}
