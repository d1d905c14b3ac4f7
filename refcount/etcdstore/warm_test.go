package etcdstore_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sharedcontent/sharedcontent/internal/synchash"
	"github.com/sharedcontent/sharedcontent/internal/testutil/etcdtest"
	"github.com/sharedcontent/sharedcontent/refcount"
	"github.com/sharedcontent/sharedcontent/refcount/etcdstore"
)

// warmNodes and warmBlobs are the universe of the warm tests' references.
const warmNodes, warmBlobs = 8, 60

func warmNode(i int) string { return fmt.Sprintf("node-%d", i) }

// hashesOf returns every node's hash as m offers it (NodeHash).
func hashesOf(t *testing.T, m *refcount.Manager) map[string]synchash.Table {
	t.Helper()
	out := map[string]synchash.Table{}
	for i := range warmNodes {
		h, ok := m.NodeHash(warmNode(i))
		require.True(t, ok, "no hash of %s", warmNode(i))
		out[warmNode(i)] = h
	}
	return out
}

// walked returns every node's hash from a walk of s's references.
func walked(t *testing.T, s refcount.Storage) map[string]synchash.Table {
	t.Helper()
	m := refcount.NewManager(s)
	require.NoError(t, m.BuildHashes(t.Context()))
	how, _ := m.HashesBuilt()
	require.Equal(t, refcount.HashesWalk, how)
	return hashesOf(t, m)
}

// waitWarm waits until w has walked n times and its hashes are kept:
// NodeHashes answers.
func waitWarm(t *testing.T, w *etcdstore.Warm, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		if w.Walks() < n {
			return false
		}
		_, err := w.NodeHashes(t.Context())
		return err == nil
	}, time.Minute, 5*time.Millisecond, "the standby's hashes are not kept")
}

// startLeader starts a 3-member cluster and a leader of the state under
// prefix: its client, elections, handle and Manager.
func startLeader(t *testing.T, prefix string) (*clientv3.Client, *leaders, *etcdstore.Store, *refcount.Manager) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	l := newLeaders(cli)
	s := l.campaign(t, prefix, etcdstore.Options{})
	return cli, l, s, refcount.NewManager(s)
}

// TestWarmHashesFollowTheLeader: a standby starts keeping the hashes
// while a leader adds and drops references, drops sets and replaces
// nodes' references concurrently (and a key is written over, which
// changes nothing); a new leader then takes the standby's hashes rather
// than walk, and they are those of a fresh walk (docs/design.md §7.2).
func TestWarmHashesFollowTheLeader(t *testing.T) {
	const prefix = "/warm/"
	cli, l, s, m := startLeader(t, prefix)
	ctx := t.Context()
	blob := func(i int) string { return digest(i % warmBlobs) }
	for i := range warmNodes {
		refs := map[string]struct{}{}
		for j := range warmBlobs / 2 {
			refs[blob(i+j)] = struct{}{}
		}
		require.NoError(t, m.ReplaceNode(ctx, warmNode(i), refs))
	}

	started := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for op := range 150 {
				if g == 0 && op == 20 {
					close(started) // the standby starts amid the writes
				}
				node, id := warmNode(rng.IntN(warmNodes)), blob(rng.IntN(warmBlobs))
				var err error
				switch k := rng.IntN(20); {
				case k < 10:
					_, err = m.AddRef(ctx, id, node)
				case k < 17:
					_, err = m.RemoveRef(ctx, id, node)
				case k < 18:
					err = m.Commit(ctx, new(refcount.Batch).DropRefs(id))
				default:
					refs := map[string]struct{}{}
					for range rng.IntN(10) {
						refs[blob(rng.IntN(warmBlobs))] = struct{}{}
					}
					err = m.ReplaceNode(ctx, node, refs)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	<-started
	w := etcdstore.StartWarm(ctx, cli, prefix, time.Minute)
	wg.Wait()
	// A write over a reference's key (not one the store makes) changes
	// no hash.
	page, err := s.List(ctx, "", 1)
	require.NoError(t, err)
	require.Len(t, page, 1)
	_, err = cli.Put(ctx, prefix+"refs/"+page[0].ResourceID+"\x00"+page[0].Refs.NodeList()[0], "")
	require.NoError(t, err)
	waitWarm(t, w, 1)

	// A new leader: its Manager takes the standby's hashes.
	s2 := l.takeOver(t, s)
	m2 := refcount.NewManager(s2)
	m2.WarmHashes(w)
	require.NoError(t, m2.BuildHashes(ctx))
	how, warmErr := m2.HashesBuilt()
	require.NoError(t, warmErr)
	require.Equal(t, refcount.HashesWarm, how, "the new leader walked")
	require.Equal(t, walked(t, s2), hashesOf(t, m2), "the standby's hashes are not the stored references'")
	require.Equal(t, 1, w.Walks(), "the standby walked more than once")
}

// TestWarmCompactedFallsBack: etcd compacts the revision the standby's
// watch would start from; the standby has no hashes (a new leader walks,
// and its hashes are right) until it walked again, and then its hashes
// are right too.
func TestWarmCompactedFallsBack(t *testing.T) {
	const prefix = "/warm-compact/"
	cli, l, s, m := startLeader(t, prefix)
	ctx := t.Context()
	for i := range warmNodes {
		_, err := m.AddRef(ctx, digest(i), warmNode(i))
		require.NoError(t, err)
	}
	second, release := make(chan struct{}), make(chan struct{})
	w := etcdstore.StartWarmHooked(ctx, cli, prefix, time.Minute, func(walk int) {
		switch walk {
		case 1:
			// After the walk, before its watch: more references, and
			// the revisions since the walk's compacted away.
			for i := range warmNodes {
				_, err := m.AddRef(ctx, digest(100+i), warmNode(i))
				require.NoError(t, err)
			}
			resp, err := cli.Get(ctx, prefix+"identity")
			require.NoError(t, err)
			_, err = cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical())
			require.NoError(t, err)
		case 2:
			close(second)
			<-release
		}
	})
	<-second // the first watch failed: the standby walks again
	_, err := w.NodeHashes(ctx)
	require.Error(t, err, "a standby whose watch was compacted offers hashes")

	s2 := l.takeOver(t, s)
	m2 := refcount.NewManager(s2)
	m2.WarmHashes(w)
	require.NoError(t, m2.BuildHashes(ctx))
	how, warmErr := m2.HashesBuilt()
	require.Equal(t, refcount.HashesWalk, how, "the new leader took a compacted standby's hashes")
	require.Error(t, warmErr)
	want := walked(t, s2)
	require.Equal(t, want, hashesOf(t, m2))
	for i := range warmNodes {
		h := want[warmNode(i)]
		require.Equal(t, uint64(2), h.Whole().Count, "the references added after the walk are counted")
	}

	close(release)
	waitWarm(t, w, 2)
	m3 := refcount.NewManager(s2)
	m3.WarmHashes(w)
	require.NoError(t, m3.BuildHashes(ctx))
	how, _ = m3.HashesBuilt()
	require.Equal(t, refcount.HashesWarm, how)
	require.Equal(t, want, hashesOf(t, m3))
}

// TestProgressSafe: the etcd versions whose progress notifications a
// standby trusts.
func TestProgressSafe(t *testing.T) {
	for v, want := range map[string]bool{
		"3.7.3": true, "3.6.0": true, "3.5.13": true, "3.5.21": true, "3.4.31": true, "4.0.0": true,
		"3.5.12": false, "3.5.8": false, "3.4.30": false, "3.3.27": false, "2.3.8": false, "": false, "garbage": false,
	} {
		require.Equal(t, want, etcdstore.ProgressSafe(v), v)
	}
}
