package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/lockserver/api"
)

// TestWarmTakeOver: a node syncs its journal (and another node adds
// references) with the leader; kill -9 of the leader; the standby that
// takes over starts from the hashes it kept from etcd's watch, not from
// a walk of every reference (sharedcontent_hashes_built_total{how="warm"},
// docs/design.md §7.2), and the node's sync by hash after the failover,
// its journal unchanged, is answered synced at the hash step.
func TestWarmTakeOver(t *testing.T) {
	etcd := etcdtest.Start(t, etcdtest.Options{})
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
}

// echo is the echo of a session answer received at got.
func echo(s api.SessionResponse, got time.Time) *api.Echo {
	return &api.Echo{Epoch: s.Epoch, StampMs: s.StampMs, ElapsedMs: time.Since(got).Milliseconds()}
}
